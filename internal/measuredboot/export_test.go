package measuredboot

import (
	"crypto"

	"github.com/google/go-attestation/attest"
)

// ReplayLog is replayLog over SHA-256 PCR values, for the fuzz target.
func ReplayLog(log []byte, pcrs map[int][]byte) ([]Event, error) {
	var ps []attest.PCR
	for i, d := range pcrs {
		ps = append(ps, attest.PCR{Index: i, Digest: d, DigestAlg: crypto.SHA256})
	}
	return replayLog(log, ps)
}

// Evidence is what VerifyQuote would return for a quote of pcrs with log.
func Evidence(pcrs map[int][]byte, log []byte) (*BootEvidence, error) {
	ev := &BootEvidence{HashAlg: "sha256", PCRs: pcrs}
	if log == nil {
		return ev, nil
	}
	events, err := ReplayLog(log, pcrs)
	if err != nil {
		return nil, err
	}
	ev.EventLog, ev.Events = true, events
	return ev, nil
}
