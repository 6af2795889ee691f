package raftfsm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A snapshot file (pact journal snapshot save) is
//
//	"PACTSNAP" | uint32 big-endian header length | SnapshotHeader | Snapshot
//
// The header says which format, domain and Raft position the state is
// from, and the SHA-256 and size of the Snapshot bytes that follow, so a
// truncated or altered file is refused before anything is written.
const (
	snapMagic = "PACTSNAP"
	// SnapshotFormat is the format this version writes and the newest it
	// reads: 2, the state as a stream of records (snaprecords.go). It
	// reads format 1 (one Snapshot message) too.
	SnapshotFormat = 2
	// maxHeader bounds the header a reader accepts (it is a few hundred
	// bytes).
	maxHeader = 64 << 10
	// MaxSnapshotSize bounds the state a reader accepts: far above a
	// registry of a million nodes.
	MaxSnapshotSize = 8 << 30
)

// Errors of a snapshot file.
var (
	ErrSnapshotFormat    = errors.New("raftfsm: not a pact snapshot file")
	ErrSnapshotTruncated = errors.New("raftfsm: snapshot file truncated")
	ErrSnapshotCorrupt   = errors.New("raftfsm: snapshot file corrupt")
	ErrSnapshotNewer     = errors.New("raftfsm: snapshot file of a newer format")
)

// Consistent returns the whole state as the Snapshot bytes a snapshot file
// carries, and the index of the last command it reflects, read under one
// lock so the two agree.
func (f *FSM) Consistent() ([]byte, uint64, int, error) {
	if r := f.Halted(); r != "" {
		return nil, 0, 0, fmt.Errorf("%w: %s", ErrHalted, r)
	}
	f.mu.RLock()
	s := f.snapshotLocked().snap
	index := f.applied.Load()
	f.mu.RUnlock()
	sortSnapshot(s)
	var buf bytes.Buffer
	err := writeRecords(&buf, s)
	return buf.Bytes(), index, len(s.GetNodes()), err
}

// WriteSnapshotFile writes a snapshot file: h with its checksum and size
// filled in from state, then state.
func WriteSnapshotFile(w io.Writer, h *pactv1.SnapshotHeader, state []byte) error {
	sum := sha256.Sum256(state)
	h = proto.CloneOf(h)
	h.FormatVersion, h.Sha256, h.Size = stateFormat(state), sum[:], uint64(len(state))
	hb, err := proto.MarshalOptions{Deterministic: true}.Marshal(h)
	if err != nil {
		return err
	}
	var pre []byte
	pre = append(pre, snapMagic...)
	pre = binary.BigEndian.AppendUint32(pre, uint32(len(hb)))
	for _, b := range [][]byte{pre, hb, state} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// ReadSnapshotHeader reads and checks the magic and header of a snapshot
// file, leaving r at the start of the state.
func ReadSnapshotHeader(r io.Reader) (*pactv1.SnapshotHeader, error) {
	pre := make([]byte, len(snapMagic)+4)
	if _, err := io.ReadFull(r, pre); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: it is shorter than a header (%v)", ErrSnapshotFormat, err)
		}
		return nil, err
	}
	if string(pre[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: it does not start with %s", ErrSnapshotFormat, snapMagic)
	}
	n := binary.BigEndian.Uint32(pre[len(snapMagic):])
	if n > maxHeader {
		return nil, fmt.Errorf("%w: header of %d bytes (at most %d)", ErrSnapshotCorrupt, n, maxHeader)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("%w: in the header: %v", ErrSnapshotTruncated, err)
	}
	h := &pactv1.SnapshotHeader{}
	if err := proto.Unmarshal(hb, h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrSnapshotCorrupt, err)
	}
	switch {
	case h.GetFormatVersion() == 0:
		return nil, fmt.Errorf("%w: header has no format version", ErrSnapshotCorrupt)
	case h.GetFormatVersion() > SnapshotFormat:
		return nil, fmt.Errorf("%w: format %d, this version reads up to %d; use pact-journal %s or newer", ErrSnapshotNewer, h.GetFormatVersion(), SnapshotFormat, orUnknown(h.GetVersion()))
	case len(h.GetSha256()) != sha256.Size:
		return nil, fmt.Errorf("%w: header has no SHA-256", ErrSnapshotCorrupt)
	case h.GetSize() > MaxSnapshotSize:
		return nil, fmt.Errorf("%w: state of %d bytes (at most %d)", ErrSnapshotCorrupt, h.GetSize(), uint64(MaxSnapshotSize))
	case h.GetDomain() == "":
		return nil, fmt.Errorf("%w: header names no domain", ErrSnapshotCorrupt)
	case len(h.GetRootSha256()) != 0 && len(h.GetRootSha256()) != sha256.Size:
		return nil, fmt.Errorf("%w: header's root fingerprint is %d bytes, not a SHA-256", ErrSnapshotCorrupt, len(h.GetRootSha256()))
	}
	return h, nil
}

func orUnknown(v string) string {
	if v == "" {
		return "(the one that wrote it)"
	}
	return v
}

// ReadSnapshotFile reads a whole snapshot file and checks it: header,
// size, checksum, and that the state decodes into a registry that keeps
// its rules. It returns the header, the state bytes and the node count.
func ReadSnapshotFile(r io.Reader) (*pactv1.SnapshotHeader, []byte, int, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	h, err := ReadSnapshotHeader(br)
	if err != nil {
		return nil, nil, 0, err
	}
	var buf bytes.Buffer
	buf.Grow(int(min(h.GetSize(), 1<<30)))
	n, err := io.Copy(&buf, io.LimitReader(br, int64(h.GetSize())+1))
	if err != nil {
		return nil, nil, 0, err
	}
	switch {
	case uint64(n) < h.GetSize():
		return nil, nil, 0, fmt.Errorf("%w: %d of %d bytes of state", ErrSnapshotTruncated, n, h.GetSize())
	case uint64(n) > h.GetSize():
		return nil, nil, 0, fmt.Errorf("%w: bytes after the %d bytes of state the header announces", ErrSnapshotCorrupt, h.GetSize())
	}
	state := buf.Bytes()
	if sum := sha256.Sum256(state); !bytes.Equal(sum[:], h.GetSha256()) {
		return nil, nil, 0, fmt.Errorf("%w: SHA-256 of the state does not match the header", ErrSnapshotCorrupt)
	}
	if stateFormat(state) != h.GetFormatVersion() {
		return nil, nil, 0, fmt.Errorf("%w: the header says format %d, the state is in format %d", ErrSnapshotCorrupt, h.GetFormatVersion(), stateFormat(state))
	}
	st, err := decodeState(bytes.NewReader(state), DefaultAuditCapacity)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	return h, state, len(st.nodes), nil
}

// SnapshotCounts summarises the state of a snapshot file for inspect.
type SnapshotCounts struct {
	Nodes         map[string]int // by state name
	Revoked       int
	Intermediates int
	Audit         int
	Journals      []string
}

// CountSnapshot decodes state (either format) and counts what it holds.
func CountSnapshot(state []byte) (SnapshotCounts, error) {
	c := SnapshotCounts{Nodes: map[string]int{}}
	err := walkState(bytes.NewReader(state), func(rec *pactv1.SnapshotRecord) error {
		switch r := rec.GetRecord().(type) {
		case *pactv1.SnapshotRecord_Node:
			c.Nodes[r.Node.GetState().String()]++
		case *pactv1.SnapshotRecord_Revoked:
			c.Revoked++
		case *pactv1.SnapshotRecord_Intermediate:
			c.Intermediates++
		case *pactv1.SnapshotRecord_Audit:
			c.Audit++
		case *pactv1.SnapshotRecord_Journal:
			c.Journals = append(c.Journals, r.Journal.GetJournalId())
		}
		return nil
	})
	if err != nil {
		return SnapshotCounts{}, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	return c, nil
}

// SnapshotIntermediates returns the journal intermediates state (either
// format) holds, retired ones included.
func SnapshotIntermediates(state []byte) ([]*pactv1.Intermediate, error) {
	var out []*pactv1.Intermediate
	err := walkState(bytes.NewReader(state), func(rec *pactv1.SnapshotRecord) error {
		if r, ok := rec.GetRecord().(*pactv1.SnapshotRecord_Intermediate); ok {
			out = append(out, r.Intermediate)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	return out, nil
}
