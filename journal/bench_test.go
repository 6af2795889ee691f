package journal_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// BenchmarkEnroll measures one full Enroll round trip on loopback: a fresh
// TLS connection, CSR check, signing, a Raft commit with fsync on bbolt, and
// the response. Keys and CSRs are made outside the timer; registration too.
// "sequential" is the latency of one agent; "parallel" shows batching of
// concurrent proposals (hashicorp/raft groups in-flight Applies).
func BenchmarkEnroll(b *testing.B) {
	for _, mode := range []string{"sequential", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			h := journaltest.Start(b, journaltest.Config(b.TempDir()))
			admin := h.AdminClient(b)
			keys := make([]journaltest.Key, b.N)
			for i := 0; i < b.N; i++ {
				if _, err := admin.RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{
					NodeId:   fmt.Sprintf("n%d", i),
					Hardware: &pactv1.HardwareIdentity{Macs: []string{mac(i)}},
				}); err != nil {
					b.Fatal(err)
				}
				keys[i] = journaltest.NewKey(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			if mode == "sequential" {
				for i := 0; i < b.N; i++ {
					enrollOnce(b, h, keys[i], i)
				}
				return
			}
			var next atomic.Int64
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1) - 1)
					enrollOnce(b, h, keys[i], i)
				}
			})
		})
	}
}

func enrollOnce(b *testing.B, h *journaltest.Harness, key journaltest.Key, i int) {
	conn := h.Dial(b, nil)
	_, err := pactv1.NewEnrollmentServiceClient(conn).Enroll(context.Background(), &pactv1.EnrollRequest{
		Hardware: &pactv1.HardwareIdentity{Macs: []string{mac(i)}},
		CsrDer:   key.CSR,
	})
	conn.Close()
	if err != nil {
		b.Error(err)
	}
}

func mac(i int) string {
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
}
