package channel_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/internal/pki"
)

// A server whose certificate chains to the domain root and names the
// address dialled (127.0.0.1), but carries a node's SPIFFE ID, is no
// journal: the channel refuses it in the handshake with an error that
// says so, where hostname verification alone would take it. A journal's
// SPIFFE ID of another trust domain is refused too; the same server with
// a journal's ID of the domain is accepted.
func TestRotatorRefusesAServerThatIsNoJournal(t *testing.T) {
	ca := identitytest.NewCA("pact.local", time.Now())
	for _, tc := range []struct {
		name   string
		server pki.Identity
		ok     bool
		says   string
	}{
		{"node", pki.Identity{Kind: pki.KindAgent, Name: "n2", Domain: "pact.local"}, false,
			"the server is not a journal: its certificate verifies against the domain roots but carries spiffe://pact.local/pact-agent/n2, not spiffe://pact.local/pact-journal/ID"},
		{"operator", pki.Identity{Kind: pki.KindAdmin, Name: "alice", Domain: "pact.local"}, false, "carries spiffe://pact.local/pact-admin/alice"},
		{"journal of another domain", pki.Identity{Kind: pki.KindJournal, Name: "j1", Domain: "other.example"}, false, "carries spiffe://other.example/pact-journal/j1"},
		{"journal", pki.Identity{Kind: pki.KindJournal, Name: "j1", Domain: "pact.local"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fj := startFakeServer(t, ca, ca, tc.server)
			cfg := channel.DefaultConfig()
			cfg.Targets = []string{fj.addr}
			cfg.Roots = []*x509.Certificate{ca.Cert}
			cfg.CallTimeout = 5 * time.Second
			cfg.Logger = quiet
			rot, err := channel.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rot.Close() })
			now := time.Now()
			id := ca.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Minute), now.Add(time.Hour))
			err = rot.Swap(t.Context(), id)
			if tc.ok {
				if err != nil {
					t.Fatalf("Swap to a journal = %v", err)
				}
				return
			}
			var nj *pki.NotJournalError
			var verr *tls.CertificateVerificationError
			if !errors.As(err, &nj) || !errors.As(err, &verr) || status.Code(err) != codes.Unavailable {
				t.Fatalf("Swap = %v, want UNAVAILABLE carrying a tls.CertificateVerificationError and a pki.NotJournalError", err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
			if rot.Active() != nil {
				t.Fatal("a channel went live to a server that is no journal")
			}
			if n := fj.get(func(f *fakeJournal) int { return f.streams }); n != 0 {
				t.Errorf("%d streams reached the server", n)
			}
		})
	}
}

// An SVID's bundle is SPIRE's, and SPIRE may sign a journal's SPIFFE ID
// in the pact trust domain: the channel verifies the journal with the
// pact roots only, whatever identity it presents (docs/spire.md).
func TestClientTLSConfigDoesNotTrustSPIREForTheJournal(t *testing.T) {
	now := time.Now()
	pact := identitytest.NewCA("pact.local", now)
	spire := identitytest.NewCA("pact.local", now)
	fj := startFakeServer(t, spire, spire, pki.Identity{Kind: pki.KindJournal, Name: "j1", Domain: "pact.local"})
	svid := spire.Issue(identity.SourceSPIRE, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Minute), now.Add(time.Hour))

	cfg := channel.DefaultConfig()
	cfg.Targets = []string{fj.addr}
	cfg.Roots = []*x509.Certificate{pact.Cert}
	cfg.CallTimeout = 5 * time.Second
	cfg.Logger = quiet
	rot, err := channel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rot.Close() })
	err = rot.Swap(t.Context(), svid)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("Swap with an SVID to a journal SPIRE signed = %v, want an x509.UnknownAuthorityError", err)
	}
	if rot.Active() != nil {
		t.Fatal("a channel went live to a journal SPIRE signed")
	}
}
