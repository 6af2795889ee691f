package tpm_test

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/internal/tpmattest"
)

func attestor(t *testing.T, device string) *tpm.Attestor {
	t.Helper()
	tr, err := tpm.Open(device)
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

// The whole credential activation against a real software TPM: the
// journal's pure half makes the challenge, the TPM answers it.
func TestActivateCredentialWithSWTPM(t *testing.T) {
	sw := swtpmtest.Start(t)
	a := attestor(t, sw.Device)
	ek, err := tpmattest.ParseEK(a.EKPublic())
	if err != nil {
		t.Fatal(err)
	}
	if ek.Hash != a.EKHash() {
		t.Fatalf("EK hash %s, attestor says %s", ek.Hash, a.EKHash())
	}
	ak, err := tpmattest.ParseAK(a.AKPublic())
	if err != nil {
		t.Fatalf("the agent's AK is refused: %v", err)
	}
	ch, secret, err := tpmattest.CreateChallenge(rand.Reader, ek, ak)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Activate(ch.CredentialBlob, ch.EncryptedSecret)
	if err != nil {
		t.Fatalf("activate: %v", err)
	}
	if !bytes.Equal(got, secret) {
		t.Fatalf("activated %x, want %x", got, secret)
	}
}

// BenchmarkAgentTPMWithSWTPM is the agent's TPM time per enrollment: open
// the TPM, read the EK, make the AK, activate one credential, flush. swtpm
// runs the TPM in software on the host CPU; a discrete TPM is slower (its
// RSA decryption alone takes tens to hundreds of milliseconds), so read the
// figure as a floor.
func BenchmarkAgentTPMWithSWTPM(b *testing.B) {
	sw := swtpmtest.Start(b)
	for b.Loop() {
		tr, err := tpm.Open(sw.Device)
		if err != nil {
			b.Fatal(err)
		}
		a, err := tpm.NewAttestor(tr)
		if err != nil {
			b.Fatal(err)
		}
		ek, err := tpmattest.ParseEK(a.EKPublic())
		if err != nil {
			b.Fatal(err)
		}
		ak, err := tpmattest.ParseAK(a.AKPublic())
		if err != nil {
			b.Fatal(err)
		}
		ch, _, err := tpmattest.CreateChallenge(rand.Reader, ek, ak)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := a.Activate(ch.CredentialBlob, ch.EncryptedSecret); err != nil {
			b.Fatal(err)
		}
		if err := a.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// The credential is bound to the AK's name: made for another AK (here one
// from another TPM), this TPM does not release it, even though it holds the
// EK it was encrypted to.
func TestActivateRefusesAnotherAKName(t *testing.T) {
	mine := attestor(t, swtpmtest.Start(t).Device)
	theirs := attestor(t, swtpmtest.Start(t).Device)
	ek, err := tpmattest.ParseEK(mine.EKPublic())
	if err != nil {
		t.Fatal(err)
	}
	otherAK, err := tpmattest.ParseAK(theirs.AKPublic())
	if err != nil {
		t.Fatal(err)
	}
	ch, secret, err := tpmattest.CreateChallenge(rand.Reader, ek, otherAK)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := mine.Activate(ch.CredentialBlob, ch.EncryptedSecret); err == nil {
		t.Fatalf("activated a credential made for another AK (secret match: %t)", bytes.Equal(got, secret))
	}
}
