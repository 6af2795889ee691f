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
