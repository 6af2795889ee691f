package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/cli"
	"github.com/pact-hpc/pact/internal/bintest"
	"github.com/pact-hpc/pact/internal/measuredboot"
	"github.com/pact-hpc/pact/internal/tpmattest"
	"github.com/pact-hpc/pact/internal/transport"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A simulated TPM answers the journal's own checks as a TPM does: its EK
// is an endorsement key tpmattest accepts, with the hash registration
// uses; it activates a credential the journal made for it (RSA and ECC
// EKs) and refuses one made for another AK or another EK; its quote over
// the journal's nonce, with its event log, verifies and replays
// (measuredboot.VerifyQuote), and not over another nonce.
func TestSimTPMPassesTheJournalsChecks(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	eccKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newSimTPM(otherKey, simBoot("02:00:00:00:00:02"))
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]any{"rsa": rsaKey, "ecc": eccKey} {
		t.Run(name, func(t *testing.T) {
			log := simBoot("02:00:00:00:00:01")
			st, err := newSimTPM(key, log)
			if err != nil {
				t.Fatal(err)
			}
			ek, err := tpmattest.ParseEK(st.ekPublic)
			if err != nil {
				t.Fatalf("the journal refuses the simulated EK: %v", err)
			}
			if ek.Hash != st.ekHash {
				t.Fatalf("EK hash %s, the journal computes %s", st.ekHash, ek.Hash)
			}
			att, err := st.open()
			if err != nil {
				t.Fatal(err)
			}
			ak, err := tpmattest.ParseAK(att.AKPublic())
			if err != nil {
				t.Fatalf("the journal refuses the simulated AK: %v", err)
			}
			ch, secret, err := tpmattest.CreateChallenge(rand.Reader, ek, ak)
			if err != nil {
				t.Fatal(err)
			}
			got, err := att.Activate(ch.CredentialBlob, ch.EncryptedSecret)
			if err != nil || !bytes.Equal(got, secret) {
				t.Fatalf("activate: %x, %v; want the journal's secret", got, err)
			}
			// Another AK of the same TPM: the credential names this one.
			att2, err := st.open()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := att2.Activate(ch.CredentialBlob, ch.EncryptedSecret); !errors.Is(err, errSimIntegrity) {
				t.Fatalf("a credential for another AK activated: %v", err)
			}
			// Another TPM (EK) with an AK of the same name cannot: its
			// seed is not decryptable, or decrypts to garbage.
			if name == "ecc" {
				oatt, _ := other.open()
				oatt.(*simAttestor).akName = att.(*simAttestor).akName
				if s, err := oatt.Activate(ch.CredentialBlob, ch.EncryptedSecret); err == nil && bytes.Equal(s, secret) {
					t.Fatal("another EK activated the credential")
				}
			}

			nonce := bytes.Repeat([]byte{9}, measuredboot.NonceSize)
			q, err := att.Quote(nonce, tpm.DefaultQuotePCRs)
			if err != nil {
				t.Fatal(err)
			}
			mq := measuredboot.Quote{Quoted: q.Quoted, Signature: q.Signature, HashAlg: uint16(tpm2.TPMAlgSHA256), PCRs: q.PCRs, EventLog: log.Bytes()}
			ev, err := measuredboot.VerifyQuote(att.AKPublic(), nonce, mq)
			if err != nil {
				t.Fatalf("the journal refuses the simulated quote: %v", err)
			}
			if !ev.EventLog || len(ev.Events) == 0 || len(ev.PCRs) != len(tpm.DefaultQuotePCRs) {
				t.Fatalf("evidence %+v: want the log replayed over every quoted PCR", ev)
			}
			if _, err := measuredboot.VerifyQuote(att.AKPublic(), bytes.Repeat([]byte{8}, measuredboot.NonceSize), mq); err == nil {
				t.Fatal("a quote verified over another nonce")
			}
			if _, err := measuredboot.VerifyQuote(att2.AKPublic(), nonce, mq); err == nil {
				t.Fatal("a quote verified under another AK")
			}
		})
	}
}

// The -tpm storm, as make bench-storm TPM=1 runs it, at a tiny size with
// its agents over two worker processes (which load the TPMs the parent
// made): every node is registered with its simulated TPM's EK hash, the
// journals run under an enforced boot policy, and every enrollment and
// renewal goes through a TPM round whose quote the policy matched, with
// no refusal, so the benchmark measures attestations, not refusals.
func TestTinyTPMStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts journal processes; skipped with -short")
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the RSA EK cache
	bin := bintest.Dir(t, "pact-journal", "pact")
	const agents = 10
	f := stormFlags{agents: agents, journals: 3, bin: bin, workers: 2, spread: 200 * time.Millisecond,
		ceiling: 100 * time.Millisecond, renew: true, deadline: 2 * time.Minute, keyExchange: string(transport.Classical),
		tpm: true, tpmEK: "rsa"}
	var cl cleanup
	defer cl.run()
	var out bytes.Buffer
	res, err := stormMain(f, t.TempDir(), &cl, &out)
	t.Logf("report:\n%s", out.String())
	if err != nil {
		t.Fatal(err) // a failed final check too, which requires a match per node
	}
	if !res.chk.pass() || res.chk.renewed != agents {
		t.Errorf("final check: %s; renewed %d", res.chk.reason(), res.chk.renewed)
	}
	js := lastJSONLine(t, out.String())
	if js["tpm"] != true || js["tpm_ek"] != "RSA-2048" {
		t.Errorf("JSON: tpm %v, tpm_ek %v", js["tpm"], js["tpm_ek"])
	}
	for _, side := range []string{"enroll", "renew"} {
		if js[side+"_refused"] != float64(0) || js[side+"_tpm_challenges"].(float64) < agents {
			t.Errorf("%s: %v refused, %v TPM challenges: want none refused and a TPM round per node", side, js[side+"_refused"], js[side+"_tpm_challenges"])
		}
	}
	if v := js["boot_policy_verdicts"].(map[string]any); v["match"] != float64(agents) || len(v) != 1 {
		t.Errorf("enroll boot policy verdicts %v: want a match per node", v)
	}
	if v := js["renew_boot_policy_verdicts"].(map[string]any); v["match"] != float64(agents) || len(v) != 1 {
		t.Errorf("renew boot policy verdicts %v: want a match per node", v)
	}
}

// The journal's own verification of one TPM round, without gRPC, TLS or
// Raft: parse the EK and AK, make the credential (TPM2_MakeCredential to
// the EK), check the proof, verify the quote and replay the event log,
// evaluate the boot policy. Beside storm -tpm's journal CPU per
// enrollment it says how much of attestation's cost is the checks
// themselves (docs/benchmarks.md, "What attestation costs"). The
// simulated TPM's part (activation, quote) is outside the timer.
func BenchmarkJournalChecksOfATPMRound(b *testing.B) {
	for _, kind := range simEKKinds {
		b.Run(kind, func(b *testing.B) {
			var key any
			var err error
			if kind == "rsa" {
				key, err = rsa.GenerateKey(rand.Reader, 2048)
			} else {
				key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			}
			if err != nil {
				b.Fatal(err)
			}
			boot := simBoot("02:00:00:00:00:01")
			st, err := newSimTPM(key, boot)
			if err != nil {
				b.Fatal(err)
			}
			log := boot.Bytes()
			fleet := &simFleet{dir: b.TempDir(), tpms: map[int]*simTPM{0: st}}
			if err := os.WriteFile(fleet.logPath(0), log, 0o600); err != nil {
				b.Fatal(err)
			}
			policyFile := filepath.Join(b.TempDir(), "policy.json")
			if err := fleet.bootPolicyFile(policyFile); err != nil {
				b.Fatal(err)
			}
			var view cli.BootPolicyView
			raw, _ := os.ReadFile(policyFile)
			if err := json.Unmarshal(raw, &view); err != nil {
				b.Fatal(err)
			}
			policy := policyOf(b, view)
			spki := strings.Repeat("ab", 32)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				att, _ := st.open()
				b.StartTimer()
				ek, err := tpmattest.ParseEK(st.ekPublic)
				if err != nil {
					b.Fatal(err)
				}
				if err := ek.Check(st.ekHash); err != nil {
					b.Fatal(err)
				}
				ak, err := tpmattest.ParseAK(att.AKPublic())
				if err != nil {
					b.Fatal(err)
				}
				ch, secret, err := tpmattest.CreateChallenge(rand.Reader, ek, ak)
				if err != nil {
					b.Fatal(err)
				}
				nonce := make([]byte, measuredboot.NonceSize)
				_, _ = rand.Read(nonce)
				b.StopTimer()
				got, err := att.Activate(ch.CredentialBlob, ch.EncryptedSecret)
				if err != nil {
					b.Fatal(err)
				}
				proof := tpmattest.Proof(got, "challenge-id", spki)
				q, err := att.Quote(nonce, tpm.DefaultQuotePCRs)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := tpmattest.VerifyProof(secret, "challenge-id", spki, proof); err != nil {
					b.Fatal(err)
				}
				ev, err := measuredboot.VerifyQuote(att.AKPublic(), nonce, measuredboot.Quote{Quoted: q.Quoted, Signature: q.Signature, HashAlg: uint16(tpm2.TPMAlgSHA256), PCRs: q.PCRs, EventLog: log})
				if err != nil {
					b.Fatal(err)
				}
				if diffs := measuredboot.Evaluate(policy, ev); len(diffs) != 0 {
					b.Fatalf("policy: %v", diffs)
				}
			}
		})
	}
}

// policyOf is the boot policy a view (pact boot-policy set --file) holds.
func policyOf(t testing.TB, v cli.BootPolicyView) *pactv1.BootPolicy {
	t.Helper()
	p := &pactv1.BootPolicy{}
	unhex := func(in []string) [][]byte {
		var out [][]byte
		for _, h := range in {
			b, err := hex.DecodeString(h)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	for _, r := range v.PCRs {
		p.Pcrs = append(p.Pcrs, &pactv1.BootPolicyPcr{Index: r.Index, Allowed: unhex(r.Allowed)})
	}
	for _, r := range v.Events {
		p.Events = append(p.Events, &pactv1.BootPolicyEvent{Name: r.Name, Pcr: r.PCR, EventType: r.EventType, AllowedDigests: unhex(r.AllowedDigests)})
	}
	return p
}
