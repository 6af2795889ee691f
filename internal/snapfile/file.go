// Package snapfile is the format of pact's snapshots: the state as a
// stream of records (records.go), which a Raft snapshot of the journal's
// state machine holds, and the snapshot file (pact journal snapshot save,
// restore and inspect): that state behind a header with its checksum.
//
// It is a leaf: it imports the wire messages and protobuf only, not Raft,
// msgpack or bbolt, so the operator CLI reads and checks a snapshot file
// without linking the journal (cmd/pact/deps_test.go). The registry's
// state machine (raftfsm) writes and restores its snapshots through it.
package snapfile

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
	// Format is the newest format this version writes and reads: 3, the
	// state as a stream of records (records.go) that opens with the
	// quorum's feature level. A quorum at level 1 writes format 2 (the
	// same records, without the level), which the releases before feature
	// levels read; this version reads format 1 (one Snapshot message) too.
	Format = 3
	// maxHeader bounds the header a reader accepts (it is a few hundred
	// bytes).
	maxHeader = 64 << 10
	// MaxStateSize bounds the state a reader accepts: far above a
	// registry of a million nodes.
	MaxStateSize = 8 << 30
)

// Errors of a snapshot file. Their text (and that of the record reader's
// errors) still says raftfsm, where the format was born: operators and
// scripts see the same messages as before the format moved here.
var (
	ErrFormat    = errors.New("raftfsm: not a pact snapshot file")
	ErrTruncated = errors.New("raftfsm: snapshot file truncated")
	ErrCorrupt   = errors.New("raftfsm: snapshot file corrupt")
	ErrNewer     = errors.New("raftfsm: snapshot file of a newer format")
)

// Write writes a snapshot file: h with its checksum and size
// filled in from state, then state.
func Write(w io.Writer, h *pactv1.SnapshotHeader, state []byte) error {
	sum := sha256.Sum256(state)
	h = proto.CloneOf(h)
	h.FormatVersion, h.Sha256, h.Size = StateFormat(state), sum[:], uint64(len(state))
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

// ReadHeader reads and checks the magic and header of a snapshot
// file, leaving r at the start of the state.
func ReadHeader(r io.Reader) (*pactv1.SnapshotHeader, error) {
	pre := make([]byte, len(snapMagic)+4)
	if _, err := io.ReadFull(r, pre); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: it is shorter than a header (%v)", ErrFormat, err)
		}
		return nil, err
	}
	if string(pre[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: it does not start with %s", ErrFormat, snapMagic)
	}
	n := binary.BigEndian.Uint32(pre[len(snapMagic):])
	if n > maxHeader {
		return nil, fmt.Errorf("%w: header of %d bytes (at most %d)", ErrCorrupt, n, maxHeader)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, fmt.Errorf("%w: in the header: %v", ErrTruncated, err)
	}
	h := &pactv1.SnapshotHeader{}
	if err := proto.Unmarshal(hb, h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	switch {
	case h.GetFormatVersion() == 0:
		return nil, fmt.Errorf("%w: header has no format version", ErrCorrupt)
	case h.GetFormatVersion() > Format:
		return nil, fmt.Errorf("%w: format %d, this version reads up to %d; use pact-journal %s or newer", ErrNewer, h.GetFormatVersion(), Format, orUnknown(h.GetVersion()))
	case len(h.GetSha256()) != sha256.Size:
		return nil, fmt.Errorf("%w: header has no SHA-256", ErrCorrupt)
	case h.GetSize() > MaxStateSize:
		return nil, fmt.Errorf("%w: state of %d bytes (at most %d)", ErrCorrupt, h.GetSize(), uint64(MaxStateSize))
	case h.GetDomain() == "":
		return nil, fmt.Errorf("%w: header names no domain", ErrCorrupt)
	case len(h.GetRootSha256()) != 0 && len(h.GetRootSha256()) != sha256.Size:
		return nil, fmt.Errorf("%w: header's root fingerprint is %d bytes, not a SHA-256", ErrCorrupt, len(h.GetRootSha256()))
	}
	return h, nil
}

func orUnknown(v string) string {
	if v == "" {
		return "(the one that wrote it)"
	}
	return v
}

// Read reads a whole snapshot file and checks it: header,
// size, checksum, and that the state decodes into a registry that keeps
// its rules. It returns the header, the state bytes and the node count.
func Read(r io.Reader) (*pactv1.SnapshotHeader, []byte, int, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	h, err := ReadHeader(br)
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
		return nil, nil, 0, fmt.Errorf("%w: %d of %d bytes of state", ErrTruncated, n, h.GetSize())
	case uint64(n) > h.GetSize():
		return nil, nil, 0, fmt.Errorf("%w: bytes after the %d bytes of state the header announces", ErrCorrupt, h.GetSize())
	}
	state := buf.Bytes()
	if sum := sha256.Sum256(state); !bytes.Equal(sum[:], h.GetSha256()) {
		return nil, nil, 0, fmt.Errorf("%w: SHA-256 of the state does not match the header", ErrCorrupt)
	}
	if StateFormat(state) != h.GetFormatVersion() {
		return nil, nil, 0, fmt.Errorf("%w: the header says format %d, the state is in format %d", ErrCorrupt, h.GetFormatVersion(), StateFormat(state))
	}
	nodes, err := CheckState(bytes.NewReader(state))
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return h, state, nodes, nil
}

// Counts summarises the state of a snapshot file for inspect.
type Counts struct {
	Nodes         map[string]int // by state name
	Revoked       int
	Intermediates int
	JournalCAs    int
	Audit         int
	Journals      []string
}

// Count decodes state (either format) and counts what it holds.
func Count(state []byte) (Counts, error) {
	c := Counts{Nodes: map[string]int{}}
	err := Walk(bytes.NewReader(state), func(rec *pactv1.SnapshotRecord) error {
		switch r := rec.GetRecord().(type) {
		case *pactv1.SnapshotRecord_Node:
			c.Nodes[r.Node.GetState().String()]++
		case *pactv1.SnapshotRecord_Revoked:
			c.Revoked++
		case *pactv1.SnapshotRecord_Intermediate:
			c.Intermediates++
		case *pactv1.SnapshotRecord_JournalCa:
			c.JournalCAs++
		case *pactv1.SnapshotRecord_Audit:
			c.Audit++
		case *pactv1.SnapshotRecord_Journal:
			c.Journals = append(c.Journals, r.Journal.GetJournalId())
		}
		return nil
	})
	if err != nil {
		return Counts{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return c, nil
}

// Intermediates returns the journal intermediates state (either
// format) holds, retired ones included.
func Intermediates(state []byte) ([]*pactv1.Intermediate, error) {
	var out []*pactv1.Intermediate
	err := Walk(bytes.NewReader(state), func(rec *pactv1.SnapshotRecord) error {
		if r, ok := rec.GetRecord().(*pactv1.SnapshotRecord_Intermediate); ok {
			out = append(out, r.Intermediate)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return out, nil
}
