// Package measuredboot is the journal's side of measured boot: it verifies
// a TPM2 quote and replays the TCG event log (docs/tpm.md, "Measured boot").
// The agent never imports it.
package measuredboot

import (
	"bytes"
	"crypto"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/tpm2"
)

// Measured boot: the journal's side of a TPM2 quote (docs/tpm.md,
// "Measured boot"). Quote signature, nonce and PCR digest checks and the
// TCG event log's parsing and replay are github.com/google/go-attestation's
// (attest.AKPublic.Verify, attest.ParseEventLog, attest.EventLog.Verify);
// this file bounds the untrusted input, picks the bank and keeps only what
// was verified.

// Sentinel errors of quote verification.
var (
	// ErrQuoteInvalid: the quote is malformed, not signed by the attestation
	// key, not over the journal's nonce, or its PCR values do not produce the
	// quoted digest.
	ErrQuoteInvalid = errors.New("measuredboot: TPM quote does not verify")
	// ErrEventLogInvalid: the TCG event log is malformed or does not
	// reproduce the quoted PCR values.
	ErrEventLogInvalid = errors.New("measuredboot: TCG event log does not reproduce the quoted PCRs")
)

// Bounds on a quote's untrusted parts.
const (
	MaxQuoted    = 2048
	MaxSignature = 1024
	// MaxEventLog: a UEFI machine's log is tens of KiB; this leaves room
	// for firmware that measures much more, under gRPC's 4 MiB message.
	MaxEventLog = 2 << 20
	NumPCRs     = 24
	// NonceSize is the journal's quote nonce (TPMS_ATTEST extraData).
	NonceSize = 32
)

// Quote is a TPM2 quote as an agent sends it.
type Quote struct {
	// Quoted is the TPMS_ATTEST the TPM signed, Signature its TPMT_SIGNATURE.
	Quoted, Signature []byte
	// HashAlg is the TPM_ALG_ID of the PCR bank quoted.
	HashAlg uint16
	// PCRs are the claimed values of the quoted PCRs.
	PCRs map[int][]byte
	// EventLog is the TCG event log; empty if the node has none.
	EventLog []byte
	// IMALog is the IMA measurement list, read after the quote; empty
	// when not asked for (TpmChallenge.quote_ima).
	IMALog []byte
}

// Event is one event of a replayed event log: its digest is the one that
// reproduced the quoted PCR.
type Event struct {
	PCR    int
	Type   uint32
	Digest []byte
	// Data is the event's data as logged. Only the digest is verified:
	// whether data and digest agree depends on the event type.
	Data []byte
}

// TypeName is the TCG name of the event's type ("EV_IPL", ...).
func (e Event) TypeName() string { return attest.EventType(e.Type).String() }

// BootEvidence is what a verified quote proves: the TPM that holds the
// attestation key had these PCR values when it signed the nonce, and
// these events (when a log was sent) produced them.
type BootEvidence struct {
	// HashAlg is the PCR bank: "sha256", "sha384" or "sha512".
	HashAlg string
	// PCRs are the quoted PCRs' values.
	PCRs map[int][]byte
	// Events are the replayed events of the quoted PCRs, in log order.
	Events []Event
	// EventLog says whether a log was sent (and replayed).
	EventLog bool
	// IMA are the IMA list's entries the quote covers (ReplayIMA), in
	// list order; IMALog says whether a list was sent (and replayed).
	IMA    []IMAEntry
	IMALog bool
}

// QuotedPCRs are the quoted PCR indices, ascending.
func (b *BootEvidence) QuotedPCRs() []int {
	out := make([]int, 0, len(b.PCRs))
	for i := range b.PCRs {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

var bankNames = map[tpm2.TPMAlgID]struct {
	name string
	hash crypto.Hash
}{
	tpm2.TPMAlgSHA256: {"sha256", crypto.SHA256},
	tpm2.TPMAlgSHA384: {"sha384", crypto.SHA384},
	tpm2.TPMAlgSHA512: {"sha512", crypto.SHA512},
}

// VerifyQuote checks q against the attestation key's public area (a
// TPMT_PUBLIC the caller has already accepted with ParseAK and bound to
// the EK by credential activation) and the nonce the journal issued, then
// replays the event log, if any, against the quoted PCRs. SHA-1 banks are
// refused.
func VerifyQuote(akPublic, nonce []byte, q Quote) (*BootEvidence, error) {
	if len(nonce) == 0 {
		return nil, fmt.Errorf("%w: no nonce", ErrQuoteInvalid)
	}
	switch {
	case len(q.Quoted) == 0 || len(q.Quoted) > MaxQuoted:
		return nil, fmt.Errorf("%w: quote of %d bytes (1..%d)", ErrQuoteInvalid, len(q.Quoted), MaxQuoted)
	case len(q.Signature) == 0 || len(q.Signature) > MaxSignature:
		return nil, fmt.Errorf("%w: signature of %d bytes (1..%d)", ErrQuoteInvalid, len(q.Signature), MaxSignature)
	case len(q.EventLog) > MaxEventLog:
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrEventLogInvalid, len(q.EventLog), MaxEventLog)
	case len(q.PCRs) == 0 || len(q.PCRs) > NumPCRs:
		return nil, fmt.Errorf("%w: %d PCR values (1..%d)", ErrQuoteInvalid, len(q.PCRs), NumPCRs)
	}
	bank, ok := bankNames[tpm2.TPMAlgID(q.HashAlg)]
	if !ok {
		return nil, fmt.Errorf("%w: PCR bank 0x%04x is not SHA-256, SHA-384 or SHA-512", ErrQuoteInvalid, q.HashAlg)
	}
	pcrs := make([]attest.PCR, 0, len(q.PCRs))
	for i, d := range q.PCRs {
		if i < 0 || i >= NumPCRs {
			return nil, fmt.Errorf("%w: PCR %d does not exist", ErrQuoteInvalid, i)
		}
		if len(d) != bank.hash.Size() {
			return nil, fmt.Errorf("%w: PCR %d value of %d bytes in the %s bank", ErrQuoteInvalid, i, len(d), bank.name)
		}
		pcrs = append(pcrs, attest.PCR{Index: i, Digest: slices.Clone(d), DigestAlg: bank.hash})
	}
	slices.SortFunc(pcrs, func(a, b attest.PCR) int { return a.Index - b.Index })
	ak, err := attest.ParseAKPublic(akPublic)
	if err != nil {
		return nil, fmt.Errorf("%w: attestation key: %w", ErrQuoteInvalid, err)
	}
	if err := ak.Verify(attest.Quote{Quote: q.Quoted, Signature: q.Signature}, pcrs, nonce); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrQuoteInvalid, err)
	}
	ev := &BootEvidence{HashAlg: bank.name, PCRs: make(map[int][]byte, len(pcrs))}
	for i := range pcrs {
		// Verify fails if a PCR given was not quoted, in this bank; this
		// keeps only what it verified all the same.
		if !pcrs[i].QuoteVerified() {
			return nil, fmt.Errorf("%w: PCR %d is not covered by the quote", ErrQuoteInvalid, pcrs[i].Index)
		}
		ev.PCRs[pcrs[i].Index] = pcrs[i].Digest
	}
	if len(q.IMALog) > 0 {
		if _, ok := ev.PCRs[IMAPCR]; !ok {
			return nil, fmt.Errorf("%w: an IMA list without PCR %d in the quote", ErrIMALogInvalid, IMAPCR)
		}
		if ev.IMA, err = ReplayIMA(q.IMALog, bank.hash, ev.PCRs); err != nil {
			return nil, err
		}
		ev.IMALog = true
	}
	if len(q.EventLog) == 0 {
		return ev, nil
	}
	// PCR 10 is IMA's: the TCG log has nothing of it to replay.
	bootPCRs := slices.DeleteFunc(slices.Clone(pcrs), func(p attest.PCR) bool { return ev.IMALog && p.Index == IMAPCR })
	events, err := replayLog(q.EventLog, bootPCRs)
	if err != nil {
		return nil, err
	}
	ev.EventLog = true
	ev.Events = events
	return ev, nil
}

// replayLog parses an untrusted event log and replays it against PCR
// values a quote verified, keeping the events that reproduced them.
func replayLog(log []byte, pcrs []attest.PCR) ([]Event, error) {
	if err := checkSpecID(log); err != nil {
		return nil, err
	}
	el, err := attest.ParseEventLog(log)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEventLogInvalid, err)
	}
	events, err := el.Verify(pcrs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEventLogInvalid, err)
	}
	out := make([]Event, 0, len(events))
	for _, e := range events {
		out = append(out, Event{PCR: e.Index, Type: uint32(e.Type), Digest: e.Digest, Data: e.Data})
	}
	return out, nil
}

// MaxLogAlgorithms bounds the digest algorithms a log's Spec ID event may
// declare. TCG defines a handful; the parser compares every digest of
// every event with each declared algorithm, so a hostile log declaring
// hundreds of thousands would cost minutes of CPU.
const MaxLogAlgorithms = 8

// checkSpecID bounds the Spec ID event of a crypto-agile log before the
// parser sees it. A log in the SHA-1 format (no Spec ID event) passes.
func checkSpecID(log []byte) error {
	// TCG_PCClientPCREvent: PCRIndex, EventType, SHA-1 digest, EventSize,
	// then TCG_EfiSpecIDEvent: Signature[16], platformClass,
	// specVersionMinor, specVersionMajor, specErrata, uintnSize,
	// numberOfAlgorithms, {algorithmId, digestSize}...
	const dataAt, numAlgsAt = 32, 32 + 24
	if len(log) < numAlgsAt+4 || binary.LittleEndian.Uint32(log[4:]) != 3 || !bytes.HasPrefix(log[dataAt:], []byte("Spec ID Event03")) {
		return nil
	}
	n := binary.LittleEndian.Uint32(log[numAlgsAt:])
	if n == 0 || n > MaxLogAlgorithms {
		return fmt.Errorf("%w: the Spec ID event declares %d digest algorithms (1..%d)", ErrEventLogInvalid, n, MaxLogAlgorithms)
	}
	for k := range int(n) {
		at := numAlgsAt + 4 + 4*k
		if len(log) < at+4 {
			return fmt.Errorf("%w: truncated Spec ID event", ErrEventLogInvalid)
		}
		if size := binary.LittleEndian.Uint16(log[at+2:]); size == 0 || size > 64 {
			return fmt.Errorf("%w: the Spec ID event declares a %d-byte digest", ErrEventLogInvalid, size)
		}
	}
	return nil
}
