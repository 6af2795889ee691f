package ca

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// TestIssuedLeafIsAnX509SVID runs what the journal issues through
// go-spiffe's own parser and verifier, which enforce the X.509-SVID rules
// for leaves (one SPIFFE ID, not a CA, digitalSignature, no keyCertSign or
// cRLSign) and for the signing certificate (a CA with keyCertSign).
func TestIssuedLeafIsAnX509SVID(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ServerDNSNames = []string{"localhost", "j1.site.example"} })
	for _, kind := range []string{"P-256", "P-384", "Ed25519"} {
		t.Run(kind, func(t *testing.T) {
			key := newKey(t, kind)
			iss, err := f.ca.SignAgent(parseCSR(t, makeCSR(t, key, nil)), "node-7")
			if err != nil {
				t.Fatal(err)
			}
			var chain []byte
			for _, d := range iss.ChainDER {
				chain = append(chain, d...)
			}
			keyDER, err := x509.MarshalPKCS8PrivateKey(key)
			if err != nil {
				t.Fatal(err)
			}
			svid, err := x509svid.ParseRaw(chain, keyDER)
			if err != nil {
				t.Fatalf("go-spiffe refuses the issued certificate as an X.509-SVID: %v", err)
			}
			if got, want := svid.ID.String(), "spiffe://"+testDomain+"/pact-agent/node-7"; got != want {
				t.Errorf("SVID ID = %s, want %s", got, want)
			}
			td := spiffeid.RequireTrustDomainFromString(testDomain)
			bundle := x509bundle.FromX509Authorities(td, []*x509.Certificate{f.ca.Root()})
			if _, _, err := x509svid.Verify(svid.Certificates, bundle, x509svid.WithTime(testNow)); err != nil {
				t.Errorf("go-spiffe does not verify the issued chain against the root: %v", err)
			}
		})
	}
}

// TestIntermediateNameConstraints signs leaves with the intermediate's own
// key, as a bug in issuance (or a thief of the key) would, and checks that
// a verifier refuses every name outside the domain and the journal's names.
func TestIntermediateNameConstraints(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.ServerDNSNames = []string{"localhost", "j1.site.example"}
		c.ServerIPs = []net.IP{net.IPv4(10, 0, 0, 1)}
	})
	inter := f.ca.Intermediate()
	if len(inter.PermittedURIDomains) != 1 || inter.PermittedURIDomains[0] != testDomain {
		t.Errorf("PermittedURIDomains = %v, want [%s]", inter.PermittedURIDomains, testDomain)
	}
	if !inter.PermittedDNSDomainsCritical {
		t.Error("name constraints are not critical")
	}
	key := f.ca.cur.Load().key
	uri := func(s string) []*url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return []*url.URL{u}
	}
	for i, tc := range []struct {
		name string
		tmpl x509.Certificate
		ok   bool
	}{
		{"agent of the domain", x509.Certificate{URIs: uri("spiffe://pact.local/pact-agent/n1")}, true},
		{"journal server names", x509.Certificate{URIs: uri("spiffe://pact.local/pact-journal/j1"), DNSNames: []string{"j1.site.example", "localhost"}, IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}}, true},
		{"other trust domain", x509.Certificate{URIs: uri("spiffe://evil.example/pact-agent/n1")}, false},
		{"sub trust domain", x509.Certificate{URIs: uri("spiffe://x.pact.local/pact-agent/n1")}, false},
		{"foreign DNS name", x509.Certificate{URIs: uri("spiffe://pact.local/pact-agent/n1"), DNSNames: []string{"www.bank.example"}}, false},
		{"foreign IP", x509.Certificate{URIs: uri("spiffe://pact.local/pact-agent/n1"), IPAddresses: []net.IP{net.IPv4(192, 0, 2, 1)}}, false},
		{"e-mail", x509.Certificate{URIs: uri("spiffe://pact.local/pact-agent/n1"), EmailAddresses: []string{"root@pact.local"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := tc.tmpl
			tmpl.SerialNumber = big.NewInt(int64(100 + i))
			tmpl.Subject = pkix.Name{CommonName: "leaf"}
			tmpl.NotBefore, tmpl.NotAfter = testNow.Add(-time.Minute), testNow.Add(time.Hour)
			tmpl.KeyUsage = x509.KeyUsageDigitalSignature
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			der, err := x509.CreateCertificate(rand.Reader, &tmpl, inter, newKey(t, "P-256").Public(), key)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			err = f.verify(leaf, testNow, inter)
			if tc.ok && err != nil {
				t.Errorf("verify = %v, want success", err)
			}
			if !tc.ok && err == nil {
				t.Error("a leaf outside the intermediate's name constraints verified")
			}
		})
	}
	// The journal's own server certificate lies inside its constraints.
	srv := f.ca.ServerCertificate().Leaf
	if err := f.verify(srv, testNow, inter); err != nil {
		t.Errorf("server certificate outside the constraints: %v", err)
	}
}

func TestRenewDevAdmin(t *testing.T) {
	dir := t.TempDir()
	if _, err := InitDev(dir, testDomain, testNow); err != nil {
		t.Fatal(err)
	}
	old, err := readCerts(filepath.Join(dir, AdminCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := testNow.Add(DefaultOperatorLifetime); !old[0].NotAfter.Equal(want) {
		t.Errorf("dev admin NotAfter %v, want %v (days, not a year)", old[0].NotAfter, want)
	}
	if renewed, err := RenewDevAdmin(dir, testNow.Add(5*24*time.Hour)); err != nil || renewed {
		t.Errorf("two days before expiry: renewed %v, %v; want left alone", renewed, err)
	}
	later := testNow.Add(7*24*time.Hour + time.Hour)
	if renewed, err := RenewDevAdmin(dir, later); err != nil || !renewed {
		t.Fatalf("after expiry: renewed %v, %v", renewed, err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, AdminCertFile), filepath.Join(dir, AdminKeyFile))
	if err != nil {
		t.Fatalf("renewed pair does not load: %v", err)
	}
	if !pair.Leaf.NotAfter.After(later) || pair.Leaf.Subject.OrganizationalUnit[0] != "platform-admin" {
		t.Errorf("renewed: NotAfter %v OU %v", pair.Leaf.NotAfter, pair.Leaf.Subject.OrganizationalUnit)
	}
	if st, _ := os.Stat(filepath.Join(dir, AdminKeyFile)); st.Mode().Perm() != 0o600 {
		t.Errorf("renewed key mode %v", st.Mode().Perm())
	}
}
