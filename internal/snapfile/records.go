package snapfile

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The state's encodings, in a Raft snapshot and in a snapshot file alike.
//
// Format 1 (pact-journal v0.2 and before) is one pactv1.Snapshot message.
// Reading it means holding the whole encoding and the whole decoded
// message at once before the first node is indexed: at 100,000 active
// nodes, hundreds of megabytes of garbage and a restore slower than the
// snapshot that wrote it.
//
// Format 2 streams: recordsMagic, then one pactv1.SnapshotRecord per node,
// revoked serial, intermediate and so on, each preceded by its length as a
// uvarint, then a zero length. A reader decodes and indexes one record at a
// time from a small buffer. Records are written in the order of the
// Snapshot message's fields, each list sorted as in format 1, so two
// replicas with one state write the same bytes.
//
// recordsMagic starts with a zero byte, which no protobuf message can
// start with (field number 0 is invalid): format 1 never starts with it,
// and a journal of the previous release refuses a format-2 snapshot as
// undecodable instead of misreading it.
const recordsMagic = "\x00pact-snapshot-records\n"

// maxRecord bounds one record a reader accepts: a node record is about
// 1.5 KB; the bound leaves room for anything a registry can hold.
const maxRecord = 64 << 20

// Field numbers of pactv1.SnapshotRecord's oneof, by kind.
const (
	recNode protowire.Number = iota + 1
	recRevoked
	recIntermediate
	recLastSeen
	recAudit
	recJournal
	recJoinToken
	recOperator
	recRevokedName
	recSizes
	recQuorum
	recJournalCA
	recQuorumLevel
)

// recFederatedDomain is FederatedDomain's field number (quorum feature
// level 3).
const recFederatedDomain protowire.Number = 240

// recBootPolicy is BootPolicy's field number (quorum feature level 3).
const recBootPolicy protowire.Number = 250

// StateFormat says which format state bytes are in: 1, one Snapshot
// message; 2, a stream of records; 3, a stream of records that opens with
// the quorum's feature level (a quorum above level 1, docs/upgrade.md),
// which a release before levels refuses at its first record.
func StateFormat(state []byte) uint32 {
	rest, ok := bytes.CutPrefix(state, []byte(recordsMagic))
	if !ok {
		return 1
	}
	if _, n := binary.Uvarint(rest); n > 0 {
		if num, typ, m := protowire.ConsumeTag(rest[n:]); m > 0 && num == recQuorumLevel && typ == protowire.BytesType {
			return 3
		}
	}
	return 2
}

// WriteState writes s in format 2, in the order s holds its lists: sort
// them first (as the journal does) for bytes that depend on the state alone.
func WriteState(w io.Writer, s *pactv1.Snapshot) error {
	e := &recordEncoder{w: bufio.NewWriterSize(w, 256<<10)}
	_, e.err = e.w.WriteString(recordsMagic)
	// First, and only above level 1: a state at level 1 stays readable by
	// a journal of a release before feature levels (format 2).
	if ql := s.GetQuorumLevel(); ql.GetLevel() > 1 {
		e.put(recQuorumLevel, ql)
	}
	e.put(recSizes, &pactv1.SnapshotSizes{Nodes: uint64(len(s.GetNodes())), LastSeen: uint64(len(s.GetLastSeen()))})
	for _, n := range s.GetNodes() {
		e.put(recNode, n)
	}
	for _, r := range s.GetRevoked() {
		e.put(recRevoked, r)
	}
	for _, in := range s.GetIntermediates() {
		e.put(recIntermediate, in)
	}
	for _, ls := range s.GetLastSeen() {
		e.put(recLastSeen, ls)
	}
	for _, a := range s.GetAudit() {
		e.put(recAudit, a)
	}
	for _, ji := range s.GetJournals() {
		e.put(recJournal, ji)
	}
	for _, t := range s.GetJoinTokens() {
		e.put(recJoinToken, t)
	}
	for _, o := range s.GetOperators() {
		e.put(recOperator, o)
	}
	for _, n := range s.GetRevokedOperatorNames() {
		e.put(recRevokedName, n)
	}
	// Only when there is one: a state without a quorum id stays readable
	// by a journal of the version before quorum ids.
	if q := s.GetQuorum(); q.GetQuorumId() != "" {
		e.put(recQuorum, q)
	}
	for _, jc := range s.GetJournalCas() {
		e.put(recJournalCA, jc)
	}
	for _, fd := range s.GetFederatedDomains() {
		e.put(recFederatedDomain, fd)
	}
	for _, bp := range s.GetBootPolicies() {
		e.put(recBootPolicy, bp)
	}
	if e.err == nil {
		e.err = e.w.WriteByte(0) // the end
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return e.err
}

// recordEncoder writes records through reused buffers: the encoding of a
// SnapshotRecord holding m is the tag of m's field, m's length and m.
type recordEncoder struct {
	w             *bufio.Writer
	msg, hdr, pre []byte
	err           error
}

func (e *recordEncoder) put(field protowire.Number, m proto.Message) {
	if e.err != nil {
		return
	}
	e.msg, e.err = proto.MarshalOptions{Deterministic: true}.MarshalAppend(e.msg[:0], m)
	if e.err != nil {
		return
	}
	e.hdr = protowire.AppendTag(e.hdr[:0], field, protowire.BytesType)
	e.hdr = protowire.AppendVarint(e.hdr, uint64(len(e.msg)))
	e.pre = binary.AppendUvarint(e.pre[:0], uint64(len(e.hdr)+len(e.msg)))
	for _, b := range [][]byte{e.pre, e.hdr, e.msg} {
		if _, e.err = e.w.Write(b); e.err != nil {
			return
		}
	}
}

// Walk calls visit for every record of state read from r, in either
// format, in the order they are stored.
func Walk(r io.Reader, visit func(*pactv1.SnapshotRecord) error) error {
	br := bufio.NewReaderSize(r, 1<<20)
	if head, err := br.Peek(len(recordsMagic)); err == nil && string(head) == recordsMagic {
		_, _ = br.Discard(len(recordsMagic))
		return readRecords(br, visit)
	}
	data, err := io.ReadAll(br)
	if err != nil {
		return fmt.Errorf("raftfsm: read snapshot: %w", err)
	}
	return walkFormat1(data, visit)
}

// readRecords decodes the records on a goroutine of its own while visit
// indexes those already decoded, in order: decoding is about half of a
// restore, and the other half need not wait for it.
func readRecords(br *bufio.Reader, visit func(*pactv1.SnapshotRecord) error) error {
	type chunk struct {
		recs []*pactv1.SnapshotRecord
		err  error
	}
	chunks := make(chan chunk, 8)
	quit := make(chan struct{})
	defer func() {
		// The reader is the caller's again only once the decoder is done.
		close(quit)
		for range chunks {
		}
	}()
	go func() {
		defer close(chunks)
		var recs []*pactv1.SnapshotRecord
		send := func(err error) bool {
			select {
			case chunks <- chunk{recs: recs, err: err}:
				recs = nil
				return err == nil
			case <-quit:
				return false
			}
		}
		var buf []byte
		for {
			rec, end, err := readRecord(br, &buf)
			if err != nil || end {
				send(err)
				return
			}
			if recs = append(recs, rec); len(recs) == 512 && !send(nil) {
				return
			}
		}
	}()
	for c := range chunks {
		for _, rec := range c.recs {
			if err := visit(rec); err != nil {
				return err
			}
		}
		if c.err != nil {
			return c.err
		}
	}
	return nil
}

// readRecord reads the next record into a new message, through buf; end
// reports the end record.
func readRecord(br *bufio.Reader, buf *[]byte) (rec *pactv1.SnapshotRecord, end bool, err error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, false, fmt.Errorf("raftfsm: decode snapshot: no end record: %w", noEOF(err))
	}
	if n == 0 {
		if _, err := br.ReadByte(); err != io.EOF {
			return nil, false, errors.New("raftfsm: decode snapshot: bytes after the end record")
		}
		return nil, true, nil
	}
	if n > maxRecord {
		return nil, false, fmt.Errorf("raftfsm: decode snapshot: a record of %d bytes (at most %d)", n, maxRecord)
	}
	if *buf, err = readN(br, *buf, int(n)); err != nil {
		return nil, false, fmt.Errorf("raftfsm: decode snapshot: %w", noEOF(err))
	}
	if rec, err = unmarshalRecord(*buf); err != nil {
		return nil, false, fmt.Errorf("raftfsm: decode snapshot: %w", err)
	}
	if rec.GetRecord() == nil {
		// A newer version's kind of state: restoring without it would
		// diverge from the journals that have it.
		return nil, false, errors.New("raftfsm: decode snapshot: a record of a kind this version does not know")
	}
	return rec, false, nil
}

// unmarshalRecord decodes a SnapshotRecord. A node record, nearly all of
// a registry, is decoded straight into its Node: the same result as
// proto.Unmarshal without its generic oneof path.
func unmarshalRecord(b []byte) (*pactv1.SnapshotRecord, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n > 0 && num == recNode && typ == protowire.BytesType {
		if v, m := protowire.ConsumeBytes(b[n:]); m > 0 && n+m == len(b) {
			node := &pactv1.Node{}
			if err := proto.Unmarshal(v, node); err != nil {
				return nil, err
			}
			return &pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_Node{Node: node}}, nil
		}
	}
	rec := &pactv1.SnapshotRecord{}
	return rec, proto.Unmarshal(b, rec)
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readN reads n bytes into buf (reused when large enough). A length
// larger than the reused buffer grows it only as bytes actually arrive,
// so a corrupt length cannot make the reader allocate what is not there.
func readN(br *bufio.Reader, buf []byte, n int) ([]byte, error) {
	if n <= cap(buf) || n <= 1<<20 {
		if n > cap(buf) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		_, err := io.ReadFull(br, buf)
		return buf, err
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(br, int64(n))); err != nil {
		return nil, err
	}
	if b.Len() < n {
		return nil, io.ErrUnexpectedEOF
	}
	return b.Bytes(), nil
}

// walkFormat1 decodes a format-1 state and visits its elements as records.
func walkFormat1(data []byte, visit func(*pactv1.SnapshotRecord) error) error {
	s := &pactv1.Snapshot{}
	if err := proto.Unmarshal(data, s); err != nil {
		return fmt.Errorf("raftfsm: decode snapshot: %w", err)
	}
	var err error
	v := func(r *pactv1.SnapshotRecord) {
		if err == nil {
			err = visit(r)
		}
	}
	if ql := s.GetQuorumLevel(); ql.GetLevel() > 1 {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_QuorumLevel{QuorumLevel: ql}})
	}
	for _, n := range s.GetNodes() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_Node{Node: n}})
	}
	for _, r := range s.GetRevoked() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_Revoked{Revoked: r}})
	}
	for _, in := range s.GetIntermediates() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_Intermediate{Intermediate: in}})
	}
	for _, ls := range s.GetLastSeen() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_LastSeen{LastSeen: ls}})
	}
	for _, a := range s.GetAudit() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_Audit{Audit: a}})
	}
	for _, ji := range s.GetJournals() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_Journal{Journal: ji}})
	}
	for _, t := range s.GetJoinTokens() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_JoinToken{JoinToken: t}})
	}
	for _, o := range s.GetOperators() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_Operator{Operator: o}})
	}
	for _, n := range s.GetRevokedOperatorNames() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_RevokedOperatorName{RevokedOperatorName: n}})
	}
	for _, jc := range s.GetJournalCas() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_JournalCa{JournalCa: jc}})
	}
	for _, fd := range s.GetFederatedDomains() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_FederatedDomain{FederatedDomain: fd}})
	}
	for _, bp := range s.GetBootPolicies() {
		v(&pactv1.SnapshotRecord{Record: &pactv1.SnapshotRecord_BootPolicy{BootPolicy: bp}})
	}
	return err
}
