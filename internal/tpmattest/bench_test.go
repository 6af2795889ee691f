package tpmattest_test

import (
	"crypto/rand"
	"testing"

	"github.com/pact-hpc/pact/internal/tpmattest"
)

// BenchmarkRoundOne is the journal's CPU cost of a TPM round one: parse
// and check the EK and AK public areas, then make the credential (an
// RSA-2048 OAEP encryption to the EK). A boot storm of TPM nodes pays it
// once per node on top of an enrollment.
func BenchmarkRoundOne(b *testing.B) {
	ekPub, akPub := validEK(b), validAK(b)
	b.ReportAllocs()
	for b.Loop() {
		ek, err := tpmattest.ParseEK(ekPub)
		if err != nil {
			b.Fatal(err)
		}
		ak, err := tpmattest.ParseAK(akPub)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := tpmattest.CreateChallenge(rand.Reader, ek, ak); err != nil {
			b.Fatal(err)
		}
	}
}
