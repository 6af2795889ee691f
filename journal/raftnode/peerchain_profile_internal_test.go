package raftnode

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/raftfsm"
)

// peerSignedCA is tmpl signed by parent, as a CA that signs in turn.
func peerSignedCA(parent *chaintest.CA, tmpl *x509.Certificate) *chaintest.CA {
	l := parent.Issue(tmpl)
	return &chaintest.CA{Domain: parent.Domain, Cert: l.Cert, Key: l.Key, Root: parent.Root, Path: l.Chain}
}

// A peer's chain through a journal CA that does not fit its profile, or
// through a root-signed CA that may sign CAs passed off as a legacy
// intermediate, is refused on the Raft port and the peer service as a
// wrong intermediate (caprofile.CheckChainShape), though x509 verifies it
// and Raft records nothing of the journal (whose first publish would
// otherwise pass on the chain alone).
func TestCheckJournalCertMisprofiledCAs(t *testing.T) {
	root := chaintest.NewRoot(peerDomain)
	j1Names := chaintest.Names{DNS: []string{"j1.pact.local"}}
	n := chainNode(t, peerCreds{cert: root.JournalCA("j1", j1Names).Intermediate("j1", j1Names).Server("j1", j1Names), roots: []*x509.Certificate{root.Cert}}, raftfsm.New())

	journalCA := func(id string, mutate func(*x509.Certificate)) *chaintest.CA {
		now := time.Now()
		tmpl := caprofile.JournalCA(caprofile.JournalCAParams{
			Domain: peerDomain, JournalID: id, DNSNames: []string{id, id + ".pact.local"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		})
		if mutate != nil {
			mutate(tmpl)
		}
		return peerSignedCA(root, tmpl)
	}
	rootSigned := func(pathLen int) *chaintest.CA {
		return peerSignedCA(root, &x509.Certificate{
			Subject:               pkix.Name{CommonName: "pact intermediate j5@" + peerDomain, Organization: []string{"pact"}},
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
			MaxPathLen:            pathLen,
			URIs:                  []*url.URL{{Scheme: "spiffe", Host: peerDomain}},
		})
	}
	under := func(jca *chaintest.CA, id string) []*x509.Certificate {
		return jca.Intermediate(id, chaintest.Names{}).Server(id, chaintest.Names{}).Chain
	}
	for _, tc := range []struct {
		name   string
		chain  []*x509.Certificate
		reason string // "" accepted
	}{
		{"a journal CA of its profile, not recorded yet", under(journalCA("j7", nil), "j7"), ""},
		{"a root-signed CA of path length 2 signing a journal directly", rootSigned(2).Server("j5", chaintest.Names{}).Chain, "has path length 2; an intermediate has path length 0"},
		{"a root-signed CA of path length 1 signing a journal directly", rootSigned(1).Server("j5", chaintest.Names{}).Chain, "has path length 1"},
		{"a root-signed CA of no path length limit signing a journal directly", rootSigned(-1).Server("j5", chaintest.Names{}).Chain, "has no path length limit"},
		{"a journal CA without name constraints", under(journalCA("j6", func(c *x509.Certificate) {
			c.PermittedDNSDomainsCritical = false
			c.PermittedDNSDomains, c.ExcludedDNSDomains, c.PermittedURIDomains, c.ExcludedURIDomains = nil, nil, nil, nil
			c.ExcludedIPRanges, c.ExcludedEmailAddresses = nil, nil
		}), "j6"), "no name constraints"},
		{"a journal CA with non-critical name constraints", under(journalCA("j6", func(c *x509.Certificate) { c.PermittedDNSDomainsCritical = false }), "j6"), "not critical"},
		{"a journal CA permitting the trust domain's names", under(journalCA("j6", func(c *x509.Certificate) { c.PermittedDNSDomains = []string{peerDomain} }), "j6"), "every host under the trust domain"},
		{"a journal CA permitting every URI", under(journalCA("j6", func(c *x509.Certificate) { c.PermittedURIDomains = nil }), "j6"), "permits URIs of every domain"},
		{"a journal CA permitting an address range", under(journalCA("j6", func(c *x509.Certificate) {
			c.PermittedIPRanges, c.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4(10, 0, 0, 0).To4(), Mask: net.CIDRMask(8, 32)}}, nil
		}), "j6"), "wider than one address"},
		{"a journal CA of path length 2", under(journalCA("j6", func(c *x509.Certificate) { c.MaxPathLen = 2 }), "j6"), "path length 2"},
		{"a journal CA of no path length limit", under(journalCA("j6", func(c *x509.Certificate) { c.MaxPathLen = -1 }), "j6"), "no path length limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.peerCerts.clear()
			err := n.CheckJournalCert(tc.chain)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrPeerWrongIntermediate) || !errors.Is(err, auth.ErrChainShape) || refusalReason(err) != refusedIntermediate {
				t.Fatalf("got %v (reason %s), want ErrPeerWrongIntermediate and ErrChainShape, counted as %s", err, refusalReason(err), refusedIntermediate)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("%q does not say %q", err, tc.reason)
			}
			if again := n.CheckJournalCert(tc.chain); again == nil {
				t.Error("accepted the second time (a cached chain)")
			}
		})
	}
}
