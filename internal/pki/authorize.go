package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// An Authorizer decides whether a peer whose certificate chain verified is
// the peer the caller meant to reach, from the SPIFFE ID its leaf carries
// (go-spiffe's tlsconfig.Authorizer). Chain and host name verification
// say the peer is of the domain and serves the address dialled; only the
// authorizer says it is a journal, and not a node whose certificate
// happens to verify.
type Authorizer func(id Identity, verifiedChains [][]*x509.Certificate) error

// NotJournalError: a server's certificate verified against the domain's
// roots, but carries no SPIFFE ID of a journal of the trust domain.
type NotJournalError struct {
	// Domains are the trust domains a journal may be of.
	Domains []string
	// Got is the SPIFFE IDs the server's leaf carries (none, or not one
	// of a journal of Domains).
	Got []string
}

func (e *NotJournalError) Error() string {
	got := "no SPIFFE ID"
	if len(e.Got) > 0 {
		got = strings.Join(e.Got, ", ")
	}
	want := make([]string, len(e.Domains))
	for i, d := range e.Domains {
		want[i] = "spiffe://" + d + "/" + KindJournal + "/ID"
	}
	if len(want) == 0 {
		want = []string{"a journal's SPIFFE ID of the domain (the domain roots carry no trust domain)"}
	}
	return fmt.Sprintf("pki: the server is not a journal: its certificate verifies against the domain roots but carries %s, not %s", got, strings.Join(want, " or "))
}

// AuthorizeJournal accepts a peer whose leaf carries exactly one SPIFFE
// ID, that of a journal (spiffe://DOMAIN/pact-journal/ID) of one of
// domains. Journal server certificates carry such an ID (journal/ca
// issueServer); agent leaves carry spiffe://DOMAIN/pact-agent/ID and
// operator credentials spiffe://DOMAIN/pact-admin/NAME, so neither can
// serve as a journal though both verify against the domain's roots.
func AuthorizeJournal(domains ...string) Authorizer {
	domains = slices.Clone(domains)
	return func(id Identity, _ [][]*x509.Certificate) error {
		if id.Kind == KindJournal && id.Domain != "" && slices.Contains(domains, id.Domain) {
			return nil
		}
		return &NotJournalError{Domains: domains}
	}
}

// VerifyConnection returns a tls.Config.VerifyConnection for a client: it
// runs after Go has verified the server's chain against RootCAs and its
// name against ServerName, and hands the verified leaf's SPIFFE ID to
// authorize. A refusal is a *tls.CertificateVerificationError wrapping
// authorize's error, as Go reports a chain that does not verify, so
// callers that tell an untrusted server from an unreachable one need
// nothing new.
func VerifyConnection(authorize Authorizer) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || len(cs.VerifiedChains) == 0 {
			return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: errors.New("pki: the server's certificate was not verified")}
		}
		leaf := cs.PeerCertificates[0]
		if err := authorize(spiffeIdentity(leaf), cs.VerifiedChains); err != nil {
			var nj *NotJournalError
			if errors.As(err, &nj) && nj.Got == nil {
				nj.Got = spiffeIDs(leaf)
			}
			return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
		}
		return nil
	}
}

// spiffeIdentity is the pact identity of a leaf that carries exactly one
// URI SAN, as an X.509-SVID does; an identity with no Kind otherwise.
func spiffeIdentity(leaf *x509.Certificate) Identity {
	if len(leaf.URIs) != 1 {
		return Identity{}
	}
	id, _ := IdentityOf(leaf)
	return id
}

func spiffeIDs(leaf *x509.Certificate) []string {
	out := []string{}
	for _, u := range leaf.URIs {
		out = append(out, u.String())
	}
	return out
}

// TrustDomains returns the SPIFFE trust domains the certificates name (the
// host of each spiffe:// URI SAN), each once, in order. A domain root
// names its trust domain so (caprofile.Root).
func TrustDomains(certs []*x509.Certificate) []string {
	var out []string
	for _, c := range certs {
		for _, u := range c.URIs {
			if u.Scheme == "spiffe" && u.Host != "" && !slices.Contains(out, u.Host) {
				out = append(out, u.Host)
			}
		}
	}
	return out
}
