package measuredboot_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"testing"

	"github.com/google/go-attestation/attest"
	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/measuredboot"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// fuzzAK is the agent's AK template with a software P-256 key.
func fuzzAK(t testing.TB) []byte {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := tpm.AKTemplate
	x, y := k.X.FillBytes(make([]byte, 32)), k.Y.FillBytes(make([]byte, 32))
	p.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{X: tpm2.TPM2BECCParameter{Buffer: x}, Y: tpm2.TPM2BECCParameter{Buffer: y}})
	return tpm2.Marshal(p)
}

// FuzzVerifyQuote: an untrusted quote, signature and PCR value never
// panic, and never verify under a key that signed nothing.
func FuzzVerifyQuote(f *testing.F) {
	ak := fuzzAK(f)
	n := bytes.Repeat([]byte{7}, measuredboot.NonceSize)
	attest := tpm2.Marshal(tpm2.TPMSAttest{
		Magic:     tpm2.TPMGeneratedValue,
		Type:      tpm2.TPMSTAttestQuote,
		ExtraData: tpm2.TPM2BData{Buffer: n},
		Attested: tpm2.NewTPMUAttest(tpm2.TPMSTAttestQuote, &tpm2.TPMSQuoteInfo{
			PCRSelect: tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(9)}}},
			PCRDigest: tpm2.TPM2BDigest{Buffer: make([]byte, 32)},
		}),
	})
	sig := tpm2.Marshal(tpm2.TPMTSignature{SigAlg: tpm2.TPMAlgECDSA, Signature: tpm2.NewTPMUSignature(tpm2.TPMAlgECDSA, &tpm2.TPMSSignatureECC{Hash: tpm2.TPMAlgSHA256, SignatureR: tpm2.TPM2BECCParameter{Buffer: []byte{1}}, SignatureS: tpm2.TPM2BECCParameter{Buffer: []byte{1}}})})
	f.Add(attest, sig, make([]byte, 32))
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add(attest[:10], sig[:3], []byte{1})
	f.Fuzz(func(t *testing.T, quoted, signature, pcr9 []byte) {
		ev, err := measuredboot.VerifyQuote(ak, n, measuredboot.Quote{Quoted: quoted, Signature: signature, HashAlg: uint16(tpm2.TPMAlgSHA256), PCRs: map[int][]byte{9: pcr9}})
		if err == nil || ev != nil {
			t.Fatalf("a quote no TPM signed verified: %+v", ev)
		}
	})
}

// FuzzReplayLog: an untrusted event log never panics; when it replays,
// every event it keeps is of a given PCR.
func FuzzReplayLog(f *testing.F) {
	log := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	b := log.Bytes()
	f.Add(b)
	f.Add(b[:len(b)-5])
	f.Add(b[:40])
	f.Add([]byte{})
	pcrs := map[int][]byte{}
	for _, e := range log {
		prev := pcrs[e.PCR]
		if prev == nil {
			prev = make([]byte, 32)
		}
		h := sha256.Sum256(append(prev, e.Digest()...))
		pcrs[e.PCR] = h[:]
	}
	f.Fuzz(func(t *testing.T, log []byte) {
		events, err := measuredboot.ReplayLog(log, pcrs)
		if err != nil {
			return
		}
		for _, e := range events {
			if _, ok := pcrs[e.PCR]; !ok {
				t.Fatalf("event of PCR %d, which was not given", e.PCR)
			}
		}
	})
}

// The fuzz seed log replays: the replay above checks what it should.
func TestFuzzSeedReplays(t *testing.T) {
	log := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	pcrs := map[int][]byte{}
	for _, e := range log {
		prev := pcrs[e.PCR]
		if prev == nil {
			prev = make([]byte, 32)
		}
		h := sha256.Sum256(append(prev, e.Digest()...))
		pcrs[e.PCR] = h[:]
	}
	events, err := measuredboot.ReplayLog(log.Bytes(), pcrs)
	if err != nil || len(events) != len(log) {
		t.Fatalf("%d events, %v", len(events), err)
	}
}

// FuzzPolicyOnLog: whatever log replays, a policy captured from it is
// valid and matches it, and evaluating the reference policy against it
// never panics.
func FuzzPolicyOnLog(f *testing.F) {
	ref := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	refEv, err := measuredboot.Evidence(ref.PCRs(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), ref.Bytes())
	if err != nil {
		f.Fatal(err)
	}
	p, err := measuredboot.Capture(refEv, measuredboot.DefaultCapture(), pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ref.Bytes())
	f.Add(measuredboottest.Boot("6.1.0-evil", "init=/bin/sh").Bytes())
	f.Fuzz(func(t *testing.T, log []byte) { fuzzPolicyBodyWith(t, p, log) })
}

// fuzzPolicyBodyWith is FuzzPolicyOnLog's body against the reference
// policy p.
func fuzzPolicyBodyWith(t *testing.T, p *pactv1.BootPolicy, log []byte) {
	{
		el, err := attest.ParseEventLog(log)
		if err != nil || len(log) > measuredboot.MaxEventLog {
			return
		}
		// The PCRs the log's own SHA-256 events produce (PCR 0 aside:
		// a locality event changes its start).
		values := map[int][]byte{}
		for _, e := range el.Events(attest.HashSHA256) {
			if e.Index <= 0 || e.Index >= measuredboot.NumPCRs || e.Type == 0x03 || len(e.Digest) != 32 {
				continue
			}
			prev, ok := values[e.Index]
			if !ok {
				prev = make([]byte, 32)
			}
			h := sha256.Sum256(append(bytes.Clone(prev), e.Digest...))
			values[e.Index] = h[:]
		}
		ev, err := measuredboot.Evidence(values, log)
		if err != nil {
			return
		}
		_ = measuredboot.Evaluate(p, ev)
		o := measuredboot.CaptureOptions{}
		for i := range values {
			o.EventPCRs = append(o.EventPCRs, i)
		}
		q, err := measuredboot.Capture(ev, o, pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_OBSERVE)
		if err != nil {
			return // e.g. a PCR with separators only, or more rules than a policy holds
		}
		if d := measuredboot.Evaluate(q, ev); len(d) != 0 {
			t.Fatalf("a policy captured from a log does not match it: %q", d)
		}
	}
}
