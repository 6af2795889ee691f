package journalmain

import (
	"crypto/rand"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
)

// misprofiledJournalCAFiles is journalCAFiles for journal j1 on the default
// --listen, its id among its names, with the certificate's template
// changed by mutate before the root signs it: what a misused root key
// makes.
func misprofiledJournalCAFiles(t *testing.T, rootDir string, mutate func(*x509.Certificate)) (certPath, keyPath string) {
	t.Helper()
	root, err := ca.LoadKeyFileAuthority(filepath.Join(rootDir, ca.RootCertFile), filepath.Join(rootDir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	domain, _ := ca.DomainOf(root.Root())
	dnsNames, ips := journal.ServerNames(journal.DefaultConfig().ListenAddr, nil)
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "journal-ca.pem"), filepath.Join(dir, "journal-ca-key.pem")
	key, err := keystore.Generate(keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	serial, err := pki.NewSerial()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := caprofile.JournalCA(caprofile.JournalCAParams{Domain: domain, JournalID: "j1", DNSNames: append([]string{"j1"}, dnsNames...), IPs: ips,
		Serial: serial, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(caprofile.DefaultJournalCALifetime)})
	if mutate != nil {
		mutate(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.Root(), key.Public(), root.Signer())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pki.EncodeCertsPEM(der), 0o644); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// --check-config refuses a journal CA that does not fit a journal CA's
// profile, or permits a name or address the journal does not serve under,
// with the reason and what to do; the journal would refuse it at start.
func TestCheckConfigRefusesMisprofiledJournalCAs(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mutate func(*x509.Certificate)
		says   []string // empty: accepted
	}{
		{"its own names and id", nil, nil},
		{"no name constraints", func(c *x509.Certificate) {
			c.PermittedDNSDomainsCritical = false
			c.PermittedDNSDomains, c.ExcludedDNSDomains, c.PermittedURIDomains, c.ExcludedURIDomains = nil, nil, nil, nil
			c.PermittedIPRanges, c.ExcludedIPRanges, c.ExcludedEmailAddresses = nil, nil, nil
		}, []string{"journal CA j1 carries no name constraints"}},
		{"non-critical name constraints", func(c *x509.Certificate) { c.PermittedDNSDomainsCritical = false }, []string{"name constraints that are not critical"}},
		{"a DNS name of another journal", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "j2.site.example") },
			[]string{"the journal CA permits j2.site.example, which journal j1 does not serve under", "--names", "--server-names"}},
		{"a zone wider than the journal", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "hpc.example.org") },
			[]string{"the journal CA permits hpc.example.org, which journal j1 does not serve under"}},
		{"the trust domain", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "site.example") },
			[]string{`permits the DNS constraint "site.example", every host under the trust domain site.example`}},
		{"an empty DNS constraint", func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "") },
			[]string{`permits the DNS constraint "", which is not a host name`}},
		{"an address of another host", func(c *x509.Certificate) {
			c.PermittedIPRanges = append(c.PermittedIPRanges, &net.IPNet{IP: net.IPv4(192, 0, 2, 9).To4(), Mask: net.CIDRMask(32, 32)})
		}, []string{"the journal CA permits 192.0.2.9/32, which journal j1 does not serve under"}},
		{"an address range", func(c *x509.Certificate) {
			c.PermittedIPRanges = append(c.PermittedIPRanges, &net.IPNet{IP: net.IPv4(127, 0, 0, 0).To4(), Mask: net.CIDRMask(8, 32)})
		}, []string{"permits the IP range 127.0.0.0/8, wider than one address"}},
		{"URIs of another domain", func(c *x509.Certificate) {
			c.PermittedURIDomains, c.ExcludedURIDomains = []string{"other.example"}, []string{".other.example"}
		}, []string{"permits URIs of other.example, not the SPIFFE IDs of site.example alone"}},
		{"no URI constraint", func(c *x509.Certificate) { c.PermittedURIDomains = nil }, []string{"permits URIs of every domain"}},
		{"path length 0", func(c *x509.Certificate) { c.MaxPathLen, c.MaxPathLenZero = 0, true }, []string{"journal CA j1 has path length 0"}},
		{"path length 2", func(c *x509.Certificate) { c.MaxPathLen = 2 }, []string{"journal CA j1 has path length 2"}},
		{"no path length limit", func(c *x509.Certificate) { c.MaxPathLen = -1 }, []string{"journal CA j1 has no path length limit"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if _, err := ca.InitDev(root, "site.example", time.Now()); err != nil {
				t.Fatal(err)
			}
			data := filepath.Join(t.TempDir(), "data")
			file := "node-id: j1\ndata-dir: " + data + "\nroot-cert: " + filepath.Join(root, ca.RootCertFile) + "\n" +
				jcaSettings(misprofiledJournalCAFiles(t, root, tt.mutate))
			code, out, errOut := runWith(t, file, nil, "--check-config")
			if len(tt.says) == 0 {
				if code != 0 || !strings.Contains(out, "the settings are valid") {
					t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
				}
				return
			}
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout %s\nstderr %s", code, out, errOut)
			}
			for _, want := range append(tt.says, "1 configuration problem;", "--journal-ca-cert", "pact ca sign-journal") {
				if !strings.Contains(out+errOut, want) {
					t.Errorf("output lacks %q:\n%s%s", want, out, errOut)
				}
			}
		})
	}
}

// --check-config warns about a name clients dial that the server
// certificate cannot carry: a --listen loopback address or an --advertise
// address its journal CA does not permit, an --advertise host name not in
// --server-names. The settings still start a journal (exit 0), and
// nothing is said when the journal CA permits them.
func TestCheckConfigWarnsAboutNamesClientsDialOutsideTheCertificate(t *testing.T) {
	root := t.TempDir()
	if _, err := ca.InitDev(root, "site.example", time.Now()); err != nil {
		t.Fatal(err)
	}
	base := "node-id: j1\ndata-dir: " + filepath.Join(t.TempDir(), "data") + "\nroot-cert: " + filepath.Join(root, ca.RootCertFile) + "\n"
	defaults := jcaSettings(journalCAFiles(t, root, "j1", nil, nil, 0))
	dns, ips := journal.ServerNames("127.0.0.11:7443", nil)
	permitting := jcaSettings(journalCAFiles(t, root, "j1", append([]string{"j1"}, dns...), ips, 0))
	for _, tt := range []struct {
		name, file string
		warn       []string // empty: no warning
	}{
		{"a loopback --listen its journal CA does not permit", base + defaults + "listen: 127.0.0.11:7443\n",
			[]string{"pact-journal: warning:", "--listen 127.0.0.11:7443", "does not permit the address 127.0.0.11", "fail the TLS handshake", "pact ca sign-journal --names"}},
		{"a loopback --listen its journal CA permits", base + permitting + "listen: 127.0.0.11:7443\n", nil},
		{"an --advertise host name not in --server-names", base + defaults + "advertise: j1.site.example:7443\n",
			[]string{"pact-journal: warning:", "--advertise j1.site.example:7443", "leaves out j1.site.example", "--server-names"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runWith(t, tt.file, nil, "--check-config")
			if code != 0 || !strings.Contains(out, "the settings are valid") {
				t.Fatalf("exit %d, want 0\nstdout %s\nstderr %s", code, out, errOut)
			}
			if len(tt.warn) == 0 && strings.Contains(out, "warning") {
				t.Errorf("a warning where none is due:\n%s", out)
			}
			for _, w := range tt.warn {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
