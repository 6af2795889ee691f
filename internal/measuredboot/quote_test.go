package measuredboot_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"maps"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/measuredboot"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	"github.com/pact-hpc/pact/internal/swtpmtest"
)

// booted starts a software TPM, extends its PCRs with log as firmware
// would, and returns an attestor (a fresh AK) on it.
func booted(t *testing.T, log measuredboottest.Log) *tpm.Attestor {
	t.Helper()
	sw := swtpmtest.Start(t)
	tr, err := tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	log.Extend(t, tr)
	tr.Close()
	tr, err = tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	a, err := tpm.NewAttestor(tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func nonce(t *testing.T) []byte {
	n := make([]byte, measuredboot.NonceSize)
	if _, err := rand.Read(n); err != nil {
		t.Fatal(err)
	}
	return n
}

func quote(t *testing.T, a *tpm.Attestor, n []byte, log []byte) measuredboot.Quote {
	t.Helper()
	q, err := a.Quote(n, tpm.DefaultQuotePCRs)
	if err != nil {
		t.Fatal(err)
	}
	return measuredboot.Quote{Quoted: q.Quoted, Signature: q.Signature, HashAlg: uint16(tpm2.TPMAlgSHA256), PCRs: q.PCRs, EventLog: log}
}

// A real TPM's quote over PCRs extended with a boot's events verifies, and
// the replayed events are those of the log, with their digests.
func TestVerifyQuoteWithSWTPM(t *testing.T) {
	log := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	a := booted(t, log)
	n := nonce(t)
	ev, err := measuredboot.VerifyQuote(a.AKPublic(), n, quote(t, a, n, log.Bytes()))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if got := ev.QuotedPCRs(); len(got) != len(tpm.DefaultQuotePCRs) {
		t.Fatalf("quoted PCRs %v, want %v", got, tpm.DefaultQuotePCRs)
	}
	if !ev.EventLog || len(ev.Events) != len(log) {
		t.Fatalf("%d replayed events, want %d", len(ev.Events), len(log))
	}
	for k, e := range ev.Events {
		if e.PCR != log[k].PCR || e.Type != log[k].Type || !bytes.Equal(e.Digest, log[k].Digest()) {
			t.Fatalf("event %d: %+v, want %+v", k, e, log[k])
		}
	}
	if ev.Events[len(ev.Events)-1].TypeName() != "EV_IPL" {
		t.Fatalf("type name %q", ev.Events[len(ev.Events)-1].TypeName())
	}
	// No log: the quote alone verifies, with no events.
	ev, err = measuredboot.VerifyQuote(a.AKPublic(), n, quote(t, a, n, nil))
	if err != nil || ev.EventLog || len(ev.Events) != 0 {
		t.Fatalf("without a log: %+v, %v", ev, err)
	}
}

func TestVerifyQuoteRefusals(t *testing.T) {
	log := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	a := booted(t, log)
	other := booted(t, log)
	n := nonce(t)
	good := quote(t, a, n, log.Bytes())
	fromOther := quote(t, other, n, log.Bytes())
	oldNonce := nonce(t)
	replayed := quote(t, a, oldNonce, log.Bytes())

	with := func(f func(q *measuredboot.Quote)) measuredboot.Quote {
		q := good
		q.PCRs = maps.Clone(good.PCRs)
		f(&q)
		return q
	}
	otherKernel := measuredboottest.Boot("6.1.0-evil", "root=nfs quiet").Bytes()
	truncated := log.Bytes()
	truncated = truncated[:len(truncated)-7]
	hostile := append(log.Bytes()[:len(log.Bytes())-len("root=nfs quiet")-len("kernel_cmdline: ")-4], 0xff, 0xff, 0xff, 0x7f)

	for _, tc := range []struct {
		name  string
		nonce []byte
		q     measuredboot.Quote
		want  error
	}{
		{"replayed quote (old nonce)", n, replayed, measuredboot.ErrQuoteInvalid},
		{"quote from another TPM", n, fromOther, measuredboot.ErrQuoteInvalid},
		{"a PCR value changed", n, with(func(q *measuredboot.Quote) { q.PCRs[9] = make([]byte, 32) }), measuredboot.ErrQuoteInvalid},
		{"a PCR dropped", n, with(func(q *measuredboot.Quote) { delete(q.PCRs, 9) }), measuredboot.ErrQuoteInvalid},
		{"a PCR not quoted added", n, with(func(q *measuredboot.Quote) { q.PCRs[10] = make([]byte, 32) }), measuredboot.ErrQuoteInvalid},
		{"a signature flipped", n, with(func(q *measuredboot.Quote) { q.Signature = flip(q.Signature) }), measuredboot.ErrQuoteInvalid},
		{"the quote flipped", n, with(func(q *measuredboot.Quote) { q.Quoted = flip(q.Quoted) }), measuredboot.ErrQuoteInvalid},
		{"SHA-1 bank claimed", n, with(func(q *measuredboot.Quote) { q.HashAlg = uint16(tpm2.TPMAlgSHA1) }), measuredboot.ErrQuoteInvalid},
		{"no nonce", nil, good, measuredboot.ErrQuoteInvalid},
		{"log of another kernel", n, with(func(q *measuredboot.Quote) { q.EventLog = otherKernel }), measuredboot.ErrEventLogInvalid},
		{"truncated log", n, with(func(q *measuredboot.Quote) { q.EventLog = truncated }), measuredboot.ErrEventLogInvalid},
		{"hostile event size", n, with(func(q *measuredboot.Quote) { q.EventLog = hostile }), measuredboot.ErrEventLogInvalid},
		{"garbage log", n, with(func(q *measuredboot.Quote) { q.EventLog = []byte("not a log at all, not at all") }), measuredboot.ErrEventLogInvalid},
		{"oversized log", n, with(func(q *measuredboot.Quote) { q.EventLog = make([]byte, measuredboot.MaxEventLog+1) }), measuredboot.ErrEventLogInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := measuredboot.VerifyQuote(a.AKPublic(), tc.nonce, tc.q)
			if !errors.Is(err, tc.want) || ev != nil {
				t.Fatalf("got %v, %v; want %v", ev, err, tc.want)
			}
		})
	}
	if _, err := measuredboot.VerifyQuote(a.AKPublic(), n, good); err != nil {
		t.Fatalf("the good quote: %v", err)
	}
}

func flip(b []byte) []byte {
	c := bytes.Clone(b)
	c[len(c)-1] ^= 1
	return c
}

// hostileSpecID is a crypto-agile log whose Spec ID event declares
// algs digest algorithms, followed by one event with digests digests.
func hostileSpecID(algs, digests int) []byte {
	var spec bytes.Buffer
	spec.WriteString("Spec ID Event03\x00")
	spec.Write([]byte{0, 0, 0, 0, 0, 2, 0, 2})
	_ = binary.Write(&spec, binary.LittleEndian, uint32(algs))
	for k := range algs {
		_ = binary.Write(&spec, binary.LittleEndian, []uint16{uint16(0x1000 + k%0xe000), 1})
	}
	spec.WriteByte(0)
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, []uint32{0, 3})
	b.Write(make([]byte, 20))
	_ = binary.Write(&b, binary.LittleEndian, uint32(spec.Len()))
	b.Write(spec.Bytes())
	_ = binary.Write(&b, binary.LittleEndian, []uint32{9, 0xd, uint32(digests)})
	for range digests {
		_ = binary.Write(&b, binary.LittleEndian, uint16(0x1000))
		b.WriteByte(1)
	}
	return b.Bytes()
}

// A log that declares very many digest algorithms is refused before the
// parser compares each of its digests with each of them (quadratic).
func TestHostileSpecIDRefused(t *testing.T) {
	log := hostileSpecID(200_000, 200_000)
	if len(log) > measuredboot.MaxEventLog {
		t.Fatalf("%d bytes: the hostile log must fit the size bound", len(log))
	}
	_, err := measuredboot.ReplayLog(log, map[int][]byte{9: make([]byte, 32)})
	if !errors.Is(err, measuredboot.ErrEventLogInvalid) {
		t.Fatalf("got %v", err)
	}
}
