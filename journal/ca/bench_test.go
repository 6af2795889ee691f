package ca

import (
	"testing"

	"github.com/pact-hpc/pact/internal/clock"
)

var benchKeys = []string{"P-256", "Ed25519"}

// newBenchCA uses the real clock: the fake clock's mutex would be the very
// global lock the parallel benchmark is meant to rule out.
func newBenchCA(b *testing.B) *CA {
	b.Helper()
	return newFixture(b, func(c *Config) { c.Clock = clock.Real{} }).ca
}

func benchCSR(b *testing.B, kind string) []byte {
	b.Helper()
	return makeCSR(b, newKey(b, kind), nil)
}

func BenchmarkParseCSR(b *testing.B) {
	for _, kind := range benchKeys {
		b.Run(kind, func(b *testing.B) {
			der := benchCSR(b, kind)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseCSR(der); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSignAgent(b *testing.B) {
	for _, kind := range benchKeys {
		b.Run(kind, func(b *testing.B) {
			c := newBenchCA(b)
			csr := parseCSR(b, benchCSR(b, kind))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.SignAgent(csr, "node-001"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSignAgentParallel signs from GOMAXPROCS goroutines at once; with
// no global lock its ns/op falls roughly with the core count.
func BenchmarkSignAgentParallel(b *testing.B) {
	for _, kind := range benchKeys {
		b.Run(kind, func(b *testing.B) {
			c := newBenchCA(b)
			csr := parseCSR(b, benchCSR(b, kind))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.SignAgent(csr, "node-001"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCSRToCertificate is the whole Enroll path in the CA: DER CSR in,
// DER certificate out.
func BenchmarkCSRToCertificate(b *testing.B) {
	for _, kind := range benchKeys {
		b.Run(kind, func(b *testing.B) {
			c := newBenchCA(b)
			der := benchCSR(b, kind)
			b.ReportAllocs()
			var out []byte
			for b.Loop() {
				csr, err := ParseCSR(der)
				if err != nil {
					b.Fatal(err)
				}
				iss, err := c.SignAgent(csr, "node-001")
				if err != nil {
					b.Fatal(err)
				}
				out = iss.DER
			}
			if len(out) == 0 {
				b.Fatal("no certificate")
			}
		})
	}
}
