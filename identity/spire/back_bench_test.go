package spire_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/identity/spire"
	"github.com/pact-hpc/pact/identity/spire/spiretest"
	"github.com/pact-hpc/pact/internal/polltest"
)

// BenchmarkSVIDBack measures, on the real clock and with the default retry
// and socket-poll settings, how long after SPIRE serves the node again the
// provider holds the new SVID: after its registration entry is created
// again (the Workload API answered PermissionDenied meanwhile, and go-spiffe
// retried with RetryMin..RetryMax), and after the SPIRE agent's socket
// comes back (a restarted agent; found by the socket poll). Each round
// keeps SPIRE away for 6 s first, so the retry backoff has grown to its cap. The
// project's Workload API fake (spiretest) stands in for a SPIRE agent.
// docs/spire.md quotes the figures: go test ./identity/spire -run '^$'
// -bench SVIDBack -benchtime 10x.
func BenchmarkSVIDBack(b *testing.B) {
	const away = 6 * time.Second
	for _, tc := range []struct {
		name     string
		down, up func(*spiretest.Server, *identity.Identity)
	}{
		{"entry-recreated", func(s *spiretest.Server, _ *identity.Identity) { s.SetSVID(nil) }, func(s *spiretest.Server, id *identity.Identity) { s.SetSVID(id) }},
		{"socket-back", func(s *spiretest.Server, _ *identity.Identity) { s.Stop() }, func(s *spiretest.Server, id *identity.Identity) { s.SetSVID(id); s.Start() }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ca := identitytest.NewCA("pact.local", time.Now())
			fresh := func() *identity.Identity {
				now := time.Now()
				return ca.Issue(identity.SourceSPIRE, nodeID, now.Add(-time.Minute), now.Add(time.Hour))
			}
			srv := spiretest.New(b)
			srv.SetSVID(fresh())
			srv.Start()
			cfg := spire.DefaultConfig()
			cfg.Socket, cfg.LostGrace, cfg.Logger = srv.Addr(), 0, slog.New(slog.DiscardHandler)
			sp, err := spire.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer sp.Close()
			serving := func(serial string) bool {
				id, err := sp.Current(context.Background())
				return err == nil && (serial == "" || id.Serial() == serial)
			}
			wait := func(what string, cond func() bool) {
				polltest.Until(b, 30*time.Second, time.Millisecond, cond, "%s: not within 30 s", what)
			}
			wait("the first SVID", func() bool { return serving("") })
			var backs []time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				tc.down(srv, nil)
				wait("the SVID given up", func() bool { return !serving("") })
				time.Sleep(away) // SPIRE stays away; the backoff grows
				next := fresh()
				b.StartTimer()
				start := time.Now()
				tc.up(srv, next)
				wait("the new SVID", func() bool { return serving(next.Serial()) })
				backs = append(backs, time.Since(start))
			}
			slices.Sort(backs)
			b.ReportMetric(float64(backs[len(backs)/2].Microseconds())/1000, "ms-median")
			b.ReportMetric(float64(backs[len(backs)-1].Microseconds())/1000, "ms-max")
			b.ReportMetric(float64(backs[0].Microseconds())/1000, "ms-min")
		})
	}
}
