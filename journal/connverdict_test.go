package journal_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A connection's client chain is verified once and then remembered
// (journal/auth/connverdict.go); what is remembered must lapse with the chain. Each case
// keeps one connection open, calls once so the verdict is remembered, then
// changes the world and calls again on the same connection.
func TestRememberedChainLapsesOnTheSameConnection(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, e *env, a *agent)
		reason apierr.Reason
	}{
		{"the certificate expires", func(t *testing.T, e *env, a *agent) {
			notAfter := time.Unix(e.node(t, a.node).GetCert().GetNotAfterUnix(), 0)
			e.tick(t, notAfter.Sub(e.fc.Now())+time.Minute)
		}, apierr.Unauthenticated},
		{"its intermediate is retired at once", func(t *testing.T, e *env, a *agent) {
			if _, err := e.admin.RetireIntermediate(callCtx(t), &pactv1.RetireIntermediateRequest{Targets: []string{"j1"}, Now: true}); err != nil {
				t.Fatalf("retire: %v", err)
			}
		}, apierr.Unauthenticated},
		{"the journal's clock steps back before the certificate", func(t *testing.T, e *env, a *agent) {
			notBefore := time.Unix(e.node(t, a.node).GetCert().GetNotBeforeUnix(), 0)
			e.tick(t, notBefore.Add(-time.Hour).Sub(e.fc.Now()))
		}, apierr.CertNotYetValid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			a := e.activate(t, "n1", "SN1", mac1)
			client := e.agentClient(t, a) // one connection for every call below
			for i := range 2 {
				if _, err := client.Ping(callCtx(t), &pactv1.PingRequest{}); err != nil {
					t.Fatalf("ping %d before the change: %v", i, err)
				}
			}
			tt.change(t, e, a)
			_, err := client.Ping(callCtx(t), &pactv1.PingRequest{})
			wantErr(t, err, codes.Unauthenticated, tt.reason)
		})
	}
}
