package ca

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
)

// The journal's names in these tests: what its server certificate
// carries, and (with its id) all its journal CA may permit.
var (
	profileNames = []string{"localhost", "j1.site.example"}
	profileIPs   = []net.IP{net.IPv4(127, 0, 0, 1).To4()}
)

// signJournalCATemplate signs for pub, with root, the journal CA of
// testJournal as the ceremony makes it for its id and the journal's names,
// changed by mutate: what a root key signs when misused.
func signJournalCATemplate(t *testing.T, root RootAuthority, pub crypto.PublicKey, mutate func(*x509.Certificate)) *x509.Certificate {
	t.Helper()
	tmpl := caprofile.JournalCA(caprofile.JournalCAParams{
		Domain: testDomain, JournalID: testJournal, DNSNames: append([]string{testJournal}, profileNames...), IPs: profileIPs,
		Serial: nextTestSerial(), NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(365 * 24 * time.Hour),
	})
	if mutate != nil {
		mutate(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.Root(), pub, root.Signer())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

var testSerial int64

func nextTestSerial() *big.Int {
	testSerial++
	return big.NewInt(7000 + testSerial)
}

// widerJournalCAs are journal CAs of testJournal that permit more than the
// journal's names, or do not fit a journal CA's profile, each with what its
// refusal says.
var widerJournalCAs = []struct {
	name   string
	mutate func(*x509.Certificate)
	says   string
}{
	{"another journal's name", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "j2.site.example") }, "permits j2.site.example, which journal journal-1 does not serve under"},
	{"a zone", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "hpc.example.org") }, "permits hpc.example.org"},
	{"a parent of its name", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "site.example") }, `"site.example", a parent of "j1.site.example"`},
	{"the trust domain", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, testDomain) }, "every host under the trust domain"},
	{"an empty DNS constraint", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "") }, `"", which is not a host name`},
	{"another address", func(c *x509.Certificate) {
		c.PermittedIPRanges = append(c.PermittedIPRanges, &net.IPNet{IP: net.IPv4(10, 0, 0, 9).To4(), Mask: net.CIDRMask(32, 32)})
	}, "permits 10.0.0.9/32"},
	{"an address range", func(c *x509.Certificate) {
		c.PermittedIPRanges = []*net.IPNet{{IP: net.IPv4(127, 0, 0, 0).To4(), Mask: net.CIDRMask(8, 32)}}
	}, "127.0.0.0/8, wider than one address"},
	{"no name constraints", func(c *x509.Certificate) {
		c.PermittedDNSDomainsCritical = false
		c.PermittedDNSDomains, c.ExcludedDNSDomains, c.PermittedURIDomains, c.ExcludedURIDomains = nil, nil, nil, nil
		c.PermittedIPRanges, c.ExcludedIPRanges, c.ExcludedEmailAddresses = nil, nil, nil
	}, "no name constraints"},
	{"non-critical name constraints", func(c *x509.Certificate) { c.PermittedDNSDomainsCritical = false }, "not critical"},
	{"URIs of another domain", func(c *x509.Certificate) {
		c.PermittedURIDomains, c.ExcludedURIDomains = []string{"other.example"}, []string{".other.example"}
	}, "permits URIs of other.example"},
	{"URIs of every domain", func(c *x509.Certificate) { c.PermittedURIDomains = nil }, "permits URIs of every domain"},
	{"path length 0", func(c *x509.Certificate) { c.MaxPathLen, c.MaxPathLenZero = 0, true }, "path length 0"},
	{"path length 2", func(c *x509.Certificate) { c.MaxPathLen = 2 }, "path length 2"},
	{"no path length limit", func(c *x509.Certificate) { c.MaxPathLen = -1 }, "no path length limit"},
}

// New refuses, before it signs anything, a journal CA wider than its
// journal or of another profile than a journal CA's: the intermediate it
// would publish into Raft is never made.
func TestNewRefusesAJournalCAWiderThanItsJournal(t *testing.T) {
	root := newRootOf(t, testDomain)
	key := newKey(t, "P-256")
	newCA := func(cert *x509.Certificate) (*CA, error) {
		cfg := DefaultConfig()
		cfg.JournalID, cfg.Clock = testJournal, fakeclock.New(testNow)
		cfg.ServerDNSNames, cfg.ServerIPs = profileNames, profileIPs
		cfg.Issuer, cfg.Roots = Issuer{Certificate: cert, Signer: key}, []*x509.Certificate{root.Root()}
		return New(cfg)
	}
	t.Run("its own names and id", func(t *testing.T) {
		if _, err := newCA(signJournalCATemplate(t, root, key.Public(), nil)); err != nil {
			t.Fatalf("New: %v", err)
		}
	})
	t.Run("fewer names", func(t *testing.T) {
		if _, err := newCA(signJournalCATemplate(t, root, key.Public(), func(c *x509.Certificate) { c.PermittedDNSDomains = profileNames })); err != nil {
			t.Fatalf("New: %v", err)
		}
	})
	for _, tc := range widerJournalCAs {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newCA(signJournalCATemplate(t, root, key.Public(), tc.mutate))
			if c != nil || !errors.Is(err, ErrJournalCA) || !errors.Is(err, caprofile.ErrProfile) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New = %v, %v; want ErrJournalCA and ErrProfile saying %q", c, err, tc.says)
			}
			if !strings.Contains(err.Error(), "pact ca sign-journal") {
				t.Errorf("%q does not say what to do", err)
			}
		})
	}
}

// Rotate's re-read of the journal CA certificate refuses the same, and
// keeps signing under the journal CA in use.
func TestRotateRefusesAJournalCAWiderThanItsJournal(t *testing.T) {
	for _, tc := range widerJournalCAs {
		t.Run(tc.name, func(t *testing.T) {
			var next *x509.Certificate
			f := newFixture(t, func(c *Config) {
				c.ServerDNSNames, c.ServerIPs = profileNames, profileIPs
				c.ReloadIssuer = func() (*x509.Certificate, error) { return next, nil }
			})
			cur := f.journalCA
			next = signJournalCATemplate(t, f.up, f.jcaKey.Public(), tc.mutate)
			f.clk.Advance(time.Hour)
			err := f.ca.Rotate()
			if !errors.Is(err, ErrJournalCAKept) || !errors.Is(err, caprofile.ErrProfile) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Rotate = %v, want ErrJournalCAKept and ErrProfile saying %q", err, tc.says)
			}
			if got := f.ca.JournalCA(); !bytes.Equal(got.Raw, cur.Raw) {
				t.Error("the refused journal CA was taken")
			}
			if err := f.ca.Intermediate().CheckSignatureFrom(cur); err != nil {
				t.Errorf("the new intermediate is not signed by the journal CA in use: %v", err)
			}
		})
	}
}

// A --dev journal's journal CA wider than its names (made for names it no
// longer serves under) is made again, not kept.
func TestDevJournalCANarrowsToItsNames(t *testing.T) {
	dir := t.TempDir()
	if _, err := InitDev(dir, testDomain, testNow); err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, "journal-ca.pem"), filepath.Join(dir, "journal-ca-key.pem")
	wide := append([]string{"j9.site.example"}, profileNames...)
	if wrote, err := DevJournalCA(dir, certPath, keyPath, testJournal, wide, profileIPs, testNow); err != nil || !wrote {
		t.Fatalf("DevJournalCA = %v, %v", wrote, err)
	}
	wrote, err := DevJournalCA(dir, certPath, keyPath, testJournal, profileNames, profileIPs, testNow)
	if err != nil || !wrote {
		t.Fatalf("DevJournalCA with fewer names = %v, %v; want it made again", wrote, err)
	}
	cert, err := ReadJournalCACert(certPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := caprofile.CheckJournalCANames(cert, testJournal, profileNames, profileIPs); err != nil {
		t.Errorf("the new one: %v", err)
	}
}
