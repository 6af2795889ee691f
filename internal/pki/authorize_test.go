package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"testing"
)

// VerifyConnection hands the verified leaf's one SPIFFE ID to the
// authorizer; AuthorizeJournal takes a journal of the trust domains and
// nothing else, and the refusal is a verification error that names what
// the leaf carries.
func TestAuthorizeJournal(t *testing.T) {
	uri := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	verify := VerifyConnection(AuthorizeJournal("pact.local", "new.example"))
	for _, tc := range []struct {
		name     string
		uris     []*url.URL
		verified bool
		ok       bool
		msg      string
	}{
		{"journal", []*url.URL{uri("spiffe://pact.local/pact-journal/j1")}, true, true, ""},
		{"journal of the second domain", []*url.URL{uri("spiffe://new.example/pact-journal/j2")}, true, true, ""},
		{"node", []*url.URL{uri("spiffe://pact.local/pact-agent/n1")}, true, false,
			"pki: the server is not a journal: its certificate verifies against the domain roots but carries spiffe://pact.local/pact-agent/n1, not spiffe://pact.local/pact-journal/ID or spiffe://new.example/pact-journal/ID"},
		{"operator", []*url.URL{uri("spiffe://pact.local/pact-admin/alice")}, true, false, ""},
		{"journal of another domain", []*url.URL{uri("spiffe://other.example/pact-journal/j1")}, true, false, ""},
		{"journal of no domain", []*url.URL{uri("spiffe:///pact-journal/j1")}, true, false, ""},
		{"no SPIFFE ID", nil, true, false,
			"pki: the server is not a journal: its certificate verifies against the domain roots but carries no SPIFFE ID, not spiffe://pact.local/pact-journal/ID or spiffe://new.example/pact-journal/ID"},
		{"two SPIFFE IDs", []*url.URL{uri("spiffe://pact.local/pact-journal/j1"), uri("spiffe://pact.local/pact-agent/n1")}, true, false, ""},
		{"deeper path", []*url.URL{uri("spiffe://pact.local/pact-journal/j1/x")}, true, false, ""},
		{"not verified", []*url.URL{uri("spiffe://pact.local/pact-journal/j1")}, false, false, "pki: the server's certificate was not verified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf := &x509.Certificate{URIs: tc.uris}
			cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
			if tc.verified {
				cs.VerifiedChains = [][]*x509.Certificate{{leaf}}
			}
			err := verify(cs)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var verr *tls.CertificateVerificationError
			if !errors.As(err, &verr) {
				t.Fatalf("err = %v, want a *tls.CertificateVerificationError", err)
			}
			var nj *NotJournalError
			if tc.verified && !errors.As(err, &nj) {
				t.Fatalf("err = %v, want a *NotJournalError", err)
			}
			if tc.msg != "" && verr.Err.Error() != tc.msg {
				t.Errorf("error = %q\nwant    %q", verr.Err, tc.msg)
			}
		})
	}
}

func TestTrustDomains(t *testing.T) {
	root := func(u string) *x509.Certificate {
		c := &x509.Certificate{}
		if u != "" {
			p, _ := url.Parse(u)
			c.URIs = []*url.URL{p}
		}
		return c
	}
	got := TrustDomains([]*x509.Certificate{root("spiffe://pact.local"), root(""), root("https://x.example"), root("spiffe://pact.local"), root("spiffe://new.example")})
	if len(got) != 2 || got[0] != "pact.local" || got[1] != "new.example" {
		t.Errorf("TrustDomains = %q, want [pact.local new.example]", got)
	}
}
