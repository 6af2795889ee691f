package tpm_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/internal/tpmattest"
	"github.com/pact-hpc/pact/internal/tpmdev"
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

// timerClock is a fake clock that reports every timer it makes.
type timerClock struct {
	*fakeclock.Clock
	made chan time.Duration
}

func (c timerClock) NewTimer(d time.Duration) clock.Timer {
	tm := c.Clock.NewTimer(d)
	c.made <- d
	return tm
}

// The agent's TPM operations are bounded: a TPM that never answers (swtpm
// serving another client, as a raw /dev/tpm0 admits one program) fails the
// attestation after the timeout with ErrTimeout, naming the device and
// what to do, instead of holding the enrollment for ever; once the other
// client is gone the same TPM attests.
func TestAttestorTimesOutOnAHeldTPM(t *testing.T) {
	sw := swtpmtest.Start(t)
	holder := sw.Hold(t)
	clk := timerClock{fakeclock.New(time.Unix(1_700_000_000, 0)), make(chan time.Duration, 100)}
	done := make(chan error, 1)
	go func() {
		tr, err := tpmdev.OpenWithin(sw.Device, 20*time.Second, clk) // tpm.Open, with a fake clock
		if err == nil {
			var a *tpm.Attestor
			if a, err = tpm.NewAttestor(tr); err == nil {
				a.Close()
			}
		}
		done <- err
	}()
	for range 2 { // the open, then the first command
		select {
		case <-clk.made:
		case err := <-done:
			t.Fatalf("attested through a TPM another client holds: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("the agent sent the TPM no command")
		}
	}
	clk.Advance(20 * time.Second)
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the attestation hangs on a TPM that does not answer")
	}
	if !errors.Is(err, tpm.ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	for _, want := range []string{sw.Device, "within 20s", "one client at a time", "docs/tpm.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	holder.Kill()
	attestor(t, sw.Device)
}
