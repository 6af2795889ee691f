package tpm

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/internal/tpmattest"
)

// A TPM provisioned with its EK persistent at 0x81010001 (tpm2_createek -c
// 0x81010001): the agent uses that handle (it does not derive and flush a
// transient EK), the EK hash is the same as before provisioning, and
// credential activation works through the persistent handle.
func TestPersistentEK(t *testing.T) {
	sw := swtpmtest.Start(t)
	_, derived, err := ReadEK(sw.Device)
	if err != nil {
		t.Fatal(err)
	}

	tr, err := Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHEndorsement, InPublic: tpm2.New2B(tpm2.RSAEKTemplate)}.Execute(tr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (tpm2.EvictControl{
		Auth:             tpm2.TPMRHOwner,
		ObjectHandle:     &tpm2.NamedHandle{Handle: ek.ObjectHandle, Name: ek.Name},
		PersistentHandle: PersistentEK,
	}).Execute(tr); err != nil {
		t.Fatalf("persist the EK: %v", err)
	}
	if _, err := (tpm2.FlushContext{FlushHandle: ek.ObjectHandle}).Execute(tr); err != nil {
		t.Fatal(err)
	}

	a, err := NewAttestor(tr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.flushEK || a.ekHandle != PersistentEK {
		t.Fatalf("the agent derived a transient EK (handle %#x) instead of using the persistent one", a.ekHandle)
	}
	if a.EKHash() != derived {
		t.Fatalf("persistent EK hash %s, derived %s: registration would break", a.EKHash(), derived)
	}
	pek, err := tpmattest.ParseEK(a.EKPublic())
	if err != nil {
		t.Fatal(err)
	}
	ak, err := tpmattest.ParseAK(a.AKPublic())
	if err != nil {
		t.Fatal(err)
	}
	ch, secret, err := tpmattest.CreateChallenge(rand.Reader, pek, ak)
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Activate(ch.CredentialBlob, ch.EncryptedSecret)
	if err != nil {
		t.Fatalf("activate through the persistent EK: %v", err)
	}
	if !bytes.Equal(got, secret) {
		t.Fatal("wrong secret")
	}
}
