package ca

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
)

// newRootOf makes a domain root of domain as the ceremony does, in a fresh
// directory.
func newRootOf(t *testing.T, domain string) *KeyFileAuthority {
	t.Helper()
	dir := t.TempDir()
	if _, err := InitDev(dir, domain, testNow); err != nil {
		t.Fatal(err)
	}
	auth, err := LoadKeyFileAuthority(filepath.Join(dir, RootCertFile), filepath.Join(dir, RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return auth
}

func TestCheckRoots(t *testing.T) {
	a, b := newRootOf(t, testDomain), newRootOf(t, testDomain)
	other := newRootOf(t, "other.example")
	noDomain, _ := selfSignedCA(t, "https://site.example")
	for _, tc := range []struct {
		name  string
		roots []*x509.Certificate
		want  string // substring of the error; empty: accepted
	}{
		{"one root", []*x509.Certificate{a.Root()}, ""},
		{"two roots of the domain (rollover)", []*x509.Certificate{a.Root(), b.Root()}, ""},
		{"none", nil, "no domain root certificate"},
		{"three", []*x509.Certificate{a.Root(), b.Root(), a.Root()}, "3 root certificates; give one domain root, or two of the same domain"},
		{"two domains", []*x509.Certificate{a.Root(), other.Root()}, "the roots name two trust domains, pact.local and other.example"},
		{"a root naming no domain", []*x509.Certificate{noDomain}, "names no spiffe:// trust domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "roots.pem")
			var ders [][]byte
			for _, r := range tc.roots {
				ders = append(ders, r.Raw)
			}
			if err := os.WriteFile(path, pki.EncodeCertsPEM(ders...), 0o644); err != nil {
				t.Fatal(err)
			}
			domain, err := CheckRoots(tc.roots)
			loaded, ldomain, lerr := LoadRoots(path)
			if tc.want == "" {
				if err != nil || lerr != nil || domain != testDomain || ldomain != testDomain || len(loaded) != len(tc.roots) {
					t.Fatalf("CheckRoots = %q, %v; LoadRoots = %d, %q, %v", domain, err, len(loaded), ldomain, lerr)
				}
				return
			}
			if !errors.Is(err, ErrUpstream) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckRoots = %v, want ErrUpstream saying %q", err, tc.want)
			}
			if lerr == nil || (len(tc.roots) > 0 && !strings.Contains(lerr.Error(), tc.want)) {
				t.Errorf("LoadRoots = %v, want an error saying %q", lerr, tc.want)
			}
		})
	}
}

// New takes a journal CA only if it fits this journal (caprofile's check)
// and the key is its own; the legacy root and a journal CA of the second
// root of a rollover are taken too.
func TestNewChecksTheIssuer(t *testing.T) {
	root, second := newRootOf(t, testDomain), newRootOf(t, testDomain)
	foreign := newRootOf(t, "other.example")
	names := []string{"localhost", "j1.site.example"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1)}
	year := testNow.Add(365 * 24 * time.Hour)
	good, goodKey := newJournalCA(t, root, testJournal, names, ips, year)
	bySecond, bySecondKey := newJournalCA(t, second, testJournal, names, ips, year)
	otherJournal, otherJournalKey := newJournalCA(t, root, "journal-2", names, ips, year)
	fewNames, fewNamesKey := newJournalCA(t, root, testJournal, []string{"localhost"}, ips, year)
	noIP, noIPKey := newJournalCA(t, root, testJournal, names, nil, year)
	expired, expiredKey := newJournalCA(t, root, testJournal, names, ips, testNow.Add(-time.Minute))
	ofForeign, ofForeignKey := newJournalCA(t, foreign, testJournal, names, ips, year)
	for _, tc := range []struct {
		name   string
		issuer Issuer
		roots  []*x509.Certificate
		want   error
		says   string
	}{
		{"a journal CA of the root", Issuer{good, goodKey}, []*x509.Certificate{root.Root()}, nil, ""},
		{"the root itself (legacy)", root.Issuer(), []*x509.Certificate{root.Root()}, nil, ""},
		{"a journal CA of the second root", Issuer{bySecond, bySecondKey}, []*x509.Certificate{root.Root(), second.Root()}, nil, ""},
		{"a journal CA of a root not given", Issuer{bySecond, bySecondKey}, []*x509.Certificate{root.Root()}, ErrJournalCA, "is not signed by the domain root this journal trusts"},
		{"another journal's", Issuer{otherJournal, otherJournalKey}, []*x509.Certificate{root.Root()}, ErrJournalCA, "is for journal journal-2 of domain pact.local, this is journal journal-1"},
		{"a name not permitted", Issuer{fewNames, fewNamesKey}, []*x509.Certificate{root.Root()}, caprofile.ErrNames, "serves as j1.site.example"},
		{"an address not permitted", Issuer{noIP, noIPKey}, []*x509.Certificate{root.Root()}, caprofile.ErrNames, "serves on 127.0.0.1"},
		{"expired", Issuer{expired, expiredKey}, []*x509.Certificate{root.Root()}, ErrJournalCA, "renew it"},
		{"another domain's", Issuer{ofForeign, ofForeignKey}, []*x509.Certificate{root.Root()}, ErrJournalCA, "of domain other.example"},
		{"another key", Issuer{good, newKey(t, "P-256")}, []*x509.Certificate{root.Root()}, ErrUpstream, "does not belong"},
		{"roots of two domains", Issuer{good, goodKey}, []*x509.Certificate{root.Root(), foreign.Root()}, ErrUpstream, "two trust domains"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.JournalID, cfg.Clock = testJournal, fakeclock.New(testNow)
			cfg.ServerDNSNames, cfg.ServerIPs = names, ips
			cfg.Issuer, cfg.Roots = tc.issuer, tc.roots
			c, err := New(cfg)
			if tc.want != nil {
				if c != nil || !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("New = %v, %v; want nil and %v saying %q", c, err, tc.want, tc.says)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if err := c.Intermediate().CheckSignatureFrom(tc.issuer.Certificate); err != nil {
				t.Errorf("intermediate not signed by the issuer: %v", err)
			}
		})
	}
}

// At each Rotate the CA reads its journal CA certificate again: a renewed
// one (same key, fits the journal) is taken without a restart; anything
// else is refused with the reason, and the rotation goes on under the one
// in use.
func TestRotateRereadsTheJournalCA(t *testing.T) {
	names := []string{"localhost"}
	year := testNow.Add(365 * 24 * time.Hour)
	for _, tc := range []struct {
		name string
		// next is what the file holds at the rotation, given the journal
		// CA in use and its key.
		next  func(t *testing.T, root RootAuthority, cur *x509.Certificate, key crypto.Signer) (*x509.Certificate, error)
		taken bool
		says  string // in the refusal
	}{
		{"unchanged", func(t *testing.T, _ RootAuthority, cur *x509.Certificate, _ crypto.Signer) (*x509.Certificate, error) {
			return cur, nil
		}, false, ""},
		{"renewed for the same key", func(t *testing.T, root RootAuthority, _ *x509.Certificate, key crypto.Signer) (*x509.Certificate, error) {
			cert, err := SignJournalCA(root, key.Public(), caprofile.JournalCAParams{Domain: testDomain, JournalID: testJournal, DNSNames: names,
				NotBefore: testNow, NotAfter: testNow.Add(2 * 365 * 24 * time.Hour)})
			return cert, err
		}, true, ""},
		{"for another key", func(t *testing.T, root RootAuthority, _ *x509.Certificate, _ crypto.Signer) (*x509.Certificate, error) {
			cert, _ := newJournalCA(t, root, testJournal, names, nil, year)
			return cert, nil
		}, false, "is for another key than this journal's journal CA key"},
		{"for another journal", func(t *testing.T, root RootAuthority, _ *x509.Certificate, key crypto.Signer) (*x509.Certificate, error) {
			return SignJournalCA(root, key.Public(), caprofile.JournalCAParams{Domain: testDomain, JournalID: "journal-2", DNSNames: names, NotBefore: testNow, NotAfter: year})
		}, false, "is for journal journal-2"},
		{"signed by another root", func(t *testing.T, root RootAuthority, _ *x509.Certificate, key crypto.Signer) (*x509.Certificate, error) {
			return SignJournalCA(newRootOf(t, testDomain), key.Public(), caprofile.JournalCAParams{Domain: testDomain, JournalID: testJournal, DNSNames: names, NotBefore: testNow, NotAfter: year})
		}, false, "not signed by the domain root"},
		{"unreadable", func(t *testing.T, root RootAuthority, _ *x509.Certificate, _ crypto.Signer) (*x509.Certificate, error) {
			return nil, errors.New("open /etc/pact/journal-ca.pem: permission denied")
		}, false, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var next func() (*x509.Certificate, error)
			f := newFixture(t, func(c *Config) {
				c.ServerDNSNames = names
				c.ReloadIssuer = func() (*x509.Certificate, error) { return next() }
			})
			cur := f.journalCA
			renewed, renewedErr := tc.next(t, f.up, cur, f.jcaKey)
			next = func() (*x509.Certificate, error) { return renewed, renewedErr }
			before := f.ca.Intermediate()
			f.clk.Advance(time.Hour)
			err := f.ca.Rotate()
			if tc.says == "" && err != nil {
				t.Fatalf("Rotate: %v", err)
			}
			if tc.says != "" && (!errors.Is(err, ErrJournalCAKept) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "still signing with journal CA "+pki.SerialHex(cur.SerialNumber))) {
				t.Fatalf("Rotate = %v, want ErrJournalCAKept saying %q and naming the journal CA kept", err, tc.says)
			}
			if f.ca.Intermediate() == before {
				t.Error("Rotate did not re-key")
			}
			want := cur
			if tc.taken {
				want = renewed
			}
			if got := f.ca.JournalCA(); !bytes.Equal(got.Raw, want.Raw) {
				t.Errorf("journal CA after Rotate: serial %s, want %s", pki.SerialHex(got.SerialNumber), pki.SerialHex(want.SerialNumber))
			}
			if f.ca.JournalCASerial() != pki.SerialHex(want.SerialNumber) {
				t.Errorf("JournalCASerial = %s, want %s", f.ca.JournalCASerial(), pki.SerialHex(want.SerialNumber))
			}
			inter := f.ca.Intermediate()
			if err := inter.CheckSignatureFrom(want); err != nil {
				t.Errorf("the new intermediate is not signed by the journal CA in use: %v", err)
			}
			if sc := f.ca.ServerCertificate(); len(sc.Certificate) != 3 || !bytes.Equal(sc.Certificate[2], want.Raw) {
				t.Error("the server chain does not end with the journal CA in use")
			}
			iss, err := f.ca.SignAgent(parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil)), "node-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(iss.ChainDER) != 3 || !bytes.Equal(iss.ChainDER[2], want.Raw) {
				t.Error("an agent chain does not end with the journal CA in use")
			}
			if err := verifyClient(iss.Cert, f.ca.Root(), f.clk.Now(), inter, want); err != nil {
				t.Errorf("agent chain does not verify: %v", err)
			}
		})
	}
}

// Operator credentials the journal issues are signed by its current
// intermediate (never by the journal CA), capped at the intermediate's
// NotAfter; in the legacy layout by the root, as before.
func TestSignOperator(t *testing.T) {
	for _, layout := range layouts {
		t.Run(layout, func(t *testing.T) {
			f := newFixtureLayout(t, layout, nil)
			inter := f.ca.Intermediate()
			for _, lifetime := range []time.Duration{time.Hour, 30 * 24 * time.Hour} {
				cert, by, err := f.ca.SignOperator(parseCSR(t, makeCSR(t, newKey(t, "P-256"), nil)), "bob", pki.RoleViewer, lifetime)
				if err != nil {
					t.Fatal(err)
				}
				want := testNow.Add(lifetime)
				issuer := f.ca.Root()
				if wantBy := (OperatorIssuer{Root: true}); f.journalCA == nil && by != wantBy {
					t.Errorf("signed by %+v, want %+v", by, wantBy)
				}
				if f.journalCA != nil {
					issuer = inter
					if wantBy := (OperatorIssuer{IntermediateSerial: pki.SerialHex(inter.SerialNumber), JournalCASerial: pki.SerialHex(f.journalCA.SerialNumber)}); by != wantBy {
						t.Errorf("signed by %+v, want %+v", by, wantBy)
					}
					if want.After(inter.NotAfter) {
						want = inter.NotAfter
					}
					if cert.CheckSignatureFrom(f.journalCA) == nil {
						t.Error("the journal CA signed an operator credential")
					}
				}
				if err := cert.CheckSignatureFrom(issuer); err != nil {
					t.Errorf("%v credential not signed by %s: %v", lifetime, issuer.Subject.CommonName, err)
				}
				if !cert.NotAfter.Equal(want) {
					t.Errorf("%v credential NotAfter = %v, want %v", lifetime, cert.NotAfter, want)
				}
				if err := f.verify(cert, testNow, inter); err != nil {
					t.Errorf("%v credential does not verify with the bundle's certificates: %v", lifetime, err)
				}
				id, err := pki.IdentityOf(cert)
				if err != nil || id.Kind != pki.KindAdmin || id.Name != "bob" || cert.Subject.OrganizationalUnit[0] != pki.RoleViewer {
					t.Errorf("credential names %v, %v", id, err)
				}
			}
		})
	}
}

// --dev makes its journal CA from its development root, for the journal's
// names, keeps it while it fits, and makes it again (same key) when the
// journal's names change.
func TestDevJournalCA(t *testing.T) {
	dir := t.TempDir()
	if _, err := InitDev(dir, testDomain, testNow); err != nil {
		t.Fatal(err)
	}
	certPath, keyPath := filepath.Join(dir, JournalCACertFile), filepath.Join(dir, JournalCAKeyFile)
	names, ips := []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)}
	made, err := DevJournalCA(dir, certPath, keyPath, "j1", names, ips, testNow)
	if err != nil || !made {
		t.Fatalf("DevJournalCA = %v, %v", made, err)
	}
	roots, _, err := LoadRoots(filepath.Join(dir, RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := OpenJournalCA(certPath, keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := caprofile.CheckJournalCA(cert, roots, "j1", testDomain, names, ips, testNow); err != nil {
		t.Errorf("the dev journal CA does not fit: %v", err)
	}
	if st, err := os.Stat(keyPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file %v, %v; want mode 0600", st, err)
	}
	if made, err := DevJournalCA(dir, certPath, keyPath, "j1", names, ips, testNow.Add(time.Hour)); err != nil || made {
		t.Errorf("DevJournalCA again = %v, %v; want it kept", made, err)
	}
	more := []string{"localhost", "devbox.example"}
	if made, err := DevJournalCA(dir, certPath, keyPath, "j1", more, ips, testNow.Add(time.Hour)); err != nil || !made {
		t.Fatalf("DevJournalCA with a new name = %v, %v; want a new certificate", made, err)
	}
	again, err := ReadJournalCACert(certPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := caprofile.CheckJournalCA(again, roots, "j1", testDomain, more, ips, testNow.Add(time.Hour)); err != nil {
		t.Errorf("the re-made dev journal CA does not fit: %v", err)
	}
	if !publicKeysEqual(again.PublicKey, key.Public()) {
		t.Error("the re-made dev journal CA is for another key")
	}
}
