package cli

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/ceremony"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
)

// CACertView is one certificate in the JSON of the pact ca commands: what
// ceremony.Describe says (its fields, flattened) and its state at the time
// of the run. Field names are a contract with scripts: add, never rename.
type CACertView struct {
	ceremony.Description
	// State is valid, expired or not-yet-valid.
	State string `json:"state"`
}

// CAResultView is "pact ca init|sign-journal|issue-admin -o json": what was
// written and what it is.
type CAResultView struct {
	// Action is init, sign-journal or issue-admin.
	Action string `json:"action"`
	// CertFile is the certificate written; KeyFile the operator key
	// (issue-admin) and Key the root key's location (init).
	CertFile    string     `json:"cert_file"`
	KeyFile     string     `json:"key_file,omitempty"`
	Key         string     `json:"key,omitempty"`
	Certificate CACertView `json:"certificate"`
	// SignedBy is the root that signed (sign-journal, issue-admin).
	SignedBy *CACertView `json:"signed_by,omitempty"`
	// Capped is set when the lifetime asked for ran past the root's end.
	Capped bool `json:"capped_at_root"`
	// Warnings are differences between the request and what was signed.
	Warnings []string `json:"warnings"`
}

// CAShowView is "pact ca show FILE -o json".
type CAShowView struct {
	File         string       `json:"file"`
	Certificates []CACertView `json:"certificates"` // never null
	// Requests are certificate requests (pact-journal ca-request files).
	Requests []CARequestView `json:"requests"` // never null
}

// CARequestView is a journal CA's certificate request.
type CARequestView struct {
	JournalID   string   `json:"journal_id"`
	DNSNames    []string `json:"dns_names"`
	IPAddresses []string `json:"ip_addresses"`
	PublicKey   string   `json:"public_key"`
	SPKISHA256  string   `json:"spki_sha256"`
}

const caLong = `The ceremony that makes a domain's long-lived certificate authorities, so
the root key never has to be on a journal host (docs/ceremony.md has every
step to paste):

  domain root          made once, on an offline machine (pact ca init); its key
  │                    in a file there or in a PKCS#11 token, kept offline
  └── journal CA       one per journal host, a year by default; its key made on
      │                that host, in its TPM, a token or a 0600 file
      │                (pact-journal ca-request), signed here (pact ca sign-journal)
      └── the journal's intermediates, agents, servers, operators (online)

On the offline machine:
  pact ca init --dir /media/root-ca --domain hpc.example.org
On each journal host (only the key's owner signs the request):
  pact-journal ca-request --journal-id j1 --key tpm:/etc/pact/journal-ca.tpmkey \
      --names localhost,127.0.0.1,::1,j1,j1.hpc.example.org,10.0.0.1 --out j1.csr
Back on the offline machine, with j1.csr carried over:
  pact ca sign-journal --dir /media/root-ca --csr j1.csr --journal-id j1 \
      --names localhost,127.0.0.1,::1,j1,j1.hpc.example.org,10.0.0.1 --out j1-ca.pem
  pact ca issue-admin --dir /media/root-ca --name alice --out-dir ./alice
Then ca.pem and j1-ca.pem go to journal j1 (--root-cert, --journal-ca-cert),
ca.pem to every node image and operator; alice's two files to alice.

These commands need no journal and read none of its settings (--journal,
--ca, --cert, --key, PACT_*). The root key is opened where --key says:
file:PATH (the default, DIR/ca-key.pem, mode 0600), a pkcs11: URI (a
binary built with make build-pkcs11), or tpm:PATH. No command prints key
material. "pact ca show FILE" tells what any pact certificate is.`

func (a *app) caCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "The offline ceremony: make the domain root, sign journal CAs, issue the first admin",
		Long:  caLong,
		Example: `  pact ca init --dir /media/root-ca --domain hpc.example.org
  pact ca sign-journal --dir /media/root-ca --csr j1.csr --journal-id j1 --names localhost,127.0.0.1,::1,j1,j1.hpc.example.org,10.0.0.1 --out j1-ca.pem
  pact ca issue-admin --dir /media/root-ca --name alice --out-dir ./alice
  pact ca show j1-ca.pem`,
	}
	a.group(cmd)
	cmd.AddCommand(a.caInitCommand(), a.caSignJournalCommand(), a.caIssueAdminCommand(), a.caShowCommand())
	return cmd
}

// rootKeyFlags are how a ca command finds the root: its directory and key.
type rootKeyFlags struct {
	dir, key, tpmDevice, pkcs11Label string
}

func (f *rootKeyFlags) register(cmd *cobra.Command, dirUsage string) {
	cmd.Flags().StringVar(&f.dir, "dir", "", dirUsage)
	cmd.Flags().StringVar(&f.key, "key", "", "where the root key is: file:PATH, tpm:PATH or a pkcs11: URI (default file:DIR/ca-key.pem)")
	cmd.Flags().StringVar(&f.tpmDevice, "tpm-device", "", "the TPM for a tpm: key: a device (default /dev/tpmrm0) or unix:PATH of a software TPM")
	cmd.Flags().StringVar(&f.pkcs11Label, "pkcs11-label", "", "the key's label in the token when the pkcs11: URI names no object")
}

// resolve checks the flags and gives the key location.
func (f *rootKeyFlags) resolve() (keystore.Spec, keystore.Options, []error) {
	var problems []error
	if strings.TrimSpace(f.dir) == "" {
		problems = append(problems, errors.New("--dir is required: the ceremony directory holding ca.pem"))
	}
	spec := ceremony.DefaultRootKey(f.dir)
	if f.key != "" {
		var err error
		if spec, err = keystore.Parse(f.key); err != nil {
			problems = append(problems, fmt.Errorf("--key: %w", err))
		}
	}
	return spec, keystore.Options{TPMDevice: f.tpmDevice, Label: f.pkcs11Label}, problems
}

// parseCALifetime reads --lifetime (7d, 8760h); empty is def.
func parseCALifetime(s string, def time.Duration) (time.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return def, nil
	}
	d, err := parseLifetime(s)
	if err != nil {
		return 0, err
	}
	return d, nil
}

// caError is a ceremony failure as the operator sees it: the command line
// or a local file is wrong (exit 2) unless the machine failed (exit 1).
func caError(cmd *cobra.Command, err error) error {
	for _, local := range []error{
		ceremony.ErrExists, ceremony.ErrInput, ceremony.ErrName, ceremony.ErrCSR, ceremony.ErrKeyPolicy, ceremony.ErrRoot,
		caprofile.ErrNames, caprofile.ErrProfile,
		keystore.ErrSpec, keystore.ErrExists, keystore.ErrNoKey, keystore.ErrNotBuilt, keystore.ErrKeyFile, keystore.ErrPermission,
	} {
		if errors.Is(err, local) {
			return &UsageError{Command: cmd.CommandPath(), Problems: []error{err}}
		}
	}
	return err
}

// rootKeyHint says where to look when the root key is not where --key
// (or its default) says.
func rootKeyHint(err error) error {
	if errors.Is(err, keystore.ErrNoKey) {
		return fmt.Errorf("%w; give --key where the root's key is (pact ca init printed it)", err)
	}
	return err
}

func (a *app) caOutput(cmd *cobra.Command) (string, error) {
	out, err := a.flags.resolveOutput()
	if err != nil {
		return "", newUsage(cmd.CommandPath(), err)
	}
	return out, nil
}

func (a *app) certView(c *x509.Certificate) CACertView {
	v := CACertView{Description: ceremony.Describe(c), State: "valid"}
	now := a.env.Now()
	switch {
	case now.Before(c.NotBefore):
		v.State = "not-yet-valid"
	case now.After(c.NotAfter):
		v.State = "expired"
	}
	return v
}

func (a *app) caInitCommand() *cobra.Command {
	var f rootKeyFlags
	var domain, lifetime string
	cmd := &cobra.Command{
		Use:   "init --dir DIR --domain DOMAIN",
		Short: "Make the domain root (on the offline ceremony machine)",
		Long: `Make the domain root: a new key where --key says (by default
DIR/ca-key.pem, mode 0600) and DIR/ca.pem, the root certificate, valid 10
years unless --lifetime says otherwise. It refuses, writing nothing, if
DIR/ca.pem or the key exists: a root is made once.

Run it on the ceremony machine: offline, its disk encrypted, or with the
key in a PKCS#11 token (--key pkcs11:...). The key never leaves it: journal
hosts get their own journal CA (pact ca sign-journal) and never need it.

--domain is the site's name, the SPIFFE trust domain every certificate
carries (a DNS name the site owns, e.g. hpc.example.org); it cannot change
later. Record the printed fingerprint with the site's records: it is what
tells this root from any other.`,
		Example: `  pact ca init --dir /media/root-ca --domain hpc.example.org
  pact ca init --dir /media/root-ca --domain hpc.example.org \
      --key 'pkcs11:token=pact-root;object=root?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/media/pin'`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			spec, opts, problems := f.resolve()
			if domain == "" {
				problems = append(problems, errors.New("--domain is required: the site's trust domain, e.g. --domain hpc.example.org (it cannot change later)"))
			} else if err := pki.ValidateDomain(domain); err != nil {
				problems = append(problems, fmt.Errorf("--domain: %w", err))
			}
			life, err := parseCALifetime(lifetime, caprofile.DefaultRootLifetime)
			if err != nil {
				problems = append(problems, err)
			}
			out, err := a.caOutput(cmd)
			if err != nil {
				return err
			}
			if err := newUsage(cmd.CommandPath(), problems...); err != nil {
				return err
			}
			root, err := ceremony.InitRoot(f.dir, domain, spec, opts, life, a.env.Now())
			if err != nil {
				return caError(cmd, err)
			}
			certFile := filepath.Join(f.dir, ceremony.RootCertFile)
			v := CAResultView{Action: "init", CertFile: certFile, Key: spec.String(), Certificate: a.certView(root), Warnings: []string{}}
			if out == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			w := a.env.Stdout
			fmt.Fprintf(w, "created the domain root of %s: %s (key %s)\n", domain, certFile, spec)
			writeCertBlock(w, v.Certificate)
			fmt.Fprintf(w, `
Record the SHA-256 fingerprint above with the site's records: it is what
tells this root from any other.

Next:
  1. Copy %s (never the key) to every journal host, node image and operator.
  2. On each journal host, make its journal CA key and request:
       pact-journal ca-request --journal-id j1 --key tpm:/etc/pact/journal-ca.tpmkey \
           --names localhost,127.0.0.1,::1,j1,j1.%s,10.0.0.1 --out j1.csr
  3. Here, sign each request:
       pact ca sign-journal --dir %s --csr j1.csr --journal-id j1 --names localhost,127.0.0.1,::1,j1,j1.%s,10.0.0.1 --out j1-ca.pem
  4. Here, issue the first platform-admin credential:
       pact ca issue-admin --dir %s --name admin --out-dir ./admin
Then put the key (%s) away offline (docs/ceremony.md).
`, certFile, domain, f.dir, domain, f.dir, spec)
			return nil
		}),
	}
	f.register(cmd, "the ceremony directory: ca.pem is written there (created mode 0700 if absent)")
	cmd.Flags().StringVar(&domain, "domain", "", "the site's trust domain, e.g. hpc.example.org (required; cannot change later)")
	cmd.Flags().StringVar(&lifetime, "lifetime", "", "how long the root is valid, e.g. 87600h or 3650d (default 10 years)")
	return cmd
}

func (a *app) caSignJournalCommand() *cobra.Command {
	var f rootKeyFlags
	var csrFile, journalID, names, lifetime, outFile string
	cmd := &cobra.Command{
		Use:   "sign-journal --dir DIR --csr FILE --journal-id ID --names NAME,IP,... --out FILE",
		Short: "Sign a journal host's CA request with the root (on the ceremony machine)",
		Long: `Sign the journal CA of journal ID for the key in --csr (the file
pact-journal ca-request wrote on that journal's host). Only the request's
key is used: the certificate says what these flags say. It is
name-constrained to the root's trust domain and to --names: every name
clients dial the journal by: the hosts of its --listen and --raft-listen,
its --server-names, the names its agents, operators and peers use, and
localhost, 127.0.0.1, ::1 or the host's name if clients on the host use
them. Its server certificates can carry no other. The journal refuses to
start with a journal CA that lacks its --listen host or one of its
--server-names (pact-journal --check-config names it); the names it adds
on its own (localhost, the host name, loopback and interface addresses)
it leaves out where the journal CA does not permit them.

Compare the printed SPKI SHA-256 with the one pact-journal ca-request
printed on the host: the same key is the request you meant. Copy --out to
the journal host as its --journal-ca-cert (default DATA_DIR/journal-ca.pem).

Renewal (before the printed end; a year unless --lifetime says otherwise):
run pact-journal ca-request again on the host (it reuses the key), sign the
new request here, replace the file on the host and run
"pact journal retire-intermediate ID": the journal re-keys its intermediate
under the new certificate without a restart. --out is never overwritten.`,
		Example: `  pact ca sign-journal --dir /media/root-ca --csr j1.csr --journal-id j1 \
      --names localhost,127.0.0.1,::1,j1,j1.hpc.example.org,10.0.0.1 --out j1-ca.pem`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			spec, opts, problems := f.resolve()
			if journalID == "" {
				problems = append(problems, errors.New("--journal-id is required: the journal's --node-id, e.g. j1"))
			} else if err := pki.ValidateName("journal id", journalID); err != nil {
				problems = append(problems, fmt.Errorf("--journal-id: %w", err))
			}
			var csrData []byte
			if csrFile == "" {
				problems = append(problems, errors.New("--csr is required: the request pact-journal ca-request wrote on the journal host"))
			} else {
				var err error
				if csrData, err = readLimited(csrFile, ceremony.MaxCSRBytes); err != nil {
					problems = append(problems, fmt.Errorf("--csr: %w", err))
				}
			}
			var csr *ceremony.CSR
			if csrData != nil {
				var err error
				if csr, err = ceremony.ParseCSR(csrData); err != nil {
					problems = append(problems, fmt.Errorf("--csr %s: %w", csrFile, err))
				}
			}
			var dns []string
			var ips []net.IP
			if strings.TrimSpace(names) == "" {
				hint := ""
				if csr != nil && len(csr.DNSNames)+len(csr.IPs) > 0 {
					hint = "; the request asks for " + strings.Join(requestNames(csr), ",")
				}
				problems = append(problems, fmt.Errorf("--names is required: every host name and address journal %s serves under, comma-separated%s", orUnknown(journalID), hint))
			} else {
				var err error
				if dns, ips, err = ceremony.ParseNames(strings.Split(names, ",")); err != nil {
					problems = append(problems, fmt.Errorf("--names: %w", err))
				} else if journalID != "" && pki.ValidateName("journal id", journalID) == nil {
					if err := ceremony.JournalIDNamed(journalID, dns, ips); err != nil {
						problems = append(problems, err)
					}
				}
			}
			life, err := parseCALifetime(lifetime, caprofile.DefaultJournalCALifetime)
			if err != nil {
				problems = append(problems, err)
			}
			if outFile == "" {
				problems = append(problems, errors.New("--out is required: where to write the journal CA certificate, e.g. j1-ca.pem"))
			} else if _, err := os.Lstat(outFile); err == nil {
				problems = append(problems, fmt.Errorf("--out %s already exists; remove it or choose another path", outFile))
			}
			out, err := a.caOutput(cmd)
			if err != nil {
				return err
			}
			if err := newUsage(cmd.CommandPath(), problems...); err != nil {
				return err
			}
			now := a.env.Now()
			root, key, err := ceremony.LoadRoot(filepath.Join(f.dir, ceremony.RootCertFile), spec, opts, now)
			if err != nil {
				return caError(cmd, rootKeyHint(err))
			}
			defer key.Close()
			cert, err := ceremony.SignJournalCA(root, key, csrData, journalID, dns, ips, life, now)
			if err != nil {
				return caError(cmd, err)
			}
			if err := ceremony.WriteNew(outFile, pki.EncodeCertsPEM(cert.Raw), 0o644); err != nil {
				return caError(cmd, err)
			}
			signer := a.certView(root)
			v := CAResultView{Action: "sign-journal", CertFile: outFile, Certificate: a.certView(cert), SignedBy: &signer,
				Capped: cert.NotAfter.Equal(root.NotAfter) && now.Add(life).After(root.NotAfter), Warnings: requestWarnings(csr, journalID, dns, ips)}
			for _, w := range v.Warnings {
				fmt.Fprintf(a.env.Stderr, "pact: warning: %s\n", w)
			}
			if out == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			w := a.env.Stdout
			fmt.Fprintf(w, "signed the journal CA of journal %s: %s\n", journalID, outFile)
			writeCertBlock(w, v.Certificate)
			if v.Capped {
				fmt.Fprintf(w, "(its end is the root's: a journal CA never outlives its root)\n")
			}
			fmt.Fprintf(w, "signed by the root %s, SHA-256 %s\n", root.Subject.CommonName, signer.SHA256Fingerprint)
			fmt.Fprintf(w, `
Check: the SPKI SHA-256 above must be the one pact-journal ca-request printed
on journal %s's host.

Next, on journal %s's host:
  copy %s to its --journal-ca-cert (default DATA_DIR/journal-ca.pem) and
  ca.pem to its --root-cert, then start pact-journal with --journal-ca-key
  naming the key ca-request used. A renewal: replace the file, then run
  pact journal retire-intermediate %s (no restart).
Renew it before %s (docs/ceremony.md).
`, journalID, journalID, outFile, journalID, v.Certificate.NotAfter)
			return nil
		}),
	}
	f.register(cmd, "the ceremony directory holding ca.pem (required)")
	cmd.Flags().StringVar(&csrFile, "csr", "", "the request pact-journal ca-request wrote (required)")
	cmd.Flags().StringVar(&journalID, "journal-id", "", "the journal's id, its --node-id (required)")
	cmd.Flags().StringVar(&names, "names", "", "every host name and address the journal serves under, comma-separated: j1.site.example,10.0.0.1 (required)")
	cmd.Flags().StringVar(&lifetime, "lifetime", "", "how long the journal CA is valid, e.g. 8760h or 365d (default a year; never past the root)")
	cmd.Flags().StringVar(&outFile, "out", "", "where to write the journal CA certificate (required; never overwritten)")
	return cmd
}

// requestNames are the names a request asks for, as --names takes them.
func requestNames(csr *ceremony.CSR) []string {
	var out []string
	out = append(out, csr.DNSNames...)
	for _, ip := range csr.IPs {
		out = append(out, ip.String())
	}
	return out
}

// requestWarnings are what a request asked for that differs from what was
// signed: a journal CA for the wrong host is worth a second look.
func requestWarnings(csr *ceremony.CSR, journalID string, dns []string, ips []net.IP) []string {
	warnings := []string{}
	if csr.JournalID != "" && csr.JournalID != journalID {
		warnings = append(warnings, fmt.Sprintf("the request was made for journal %q, and you signed it for %q: check you carried the right file", printable(csr.JournalID), journalID))
	}
	asked := requestNames(csr)
	if len(asked) == 0 {
		return warnings
	}
	var given []string
	given = append(given, dns...)
	for _, ip := range ips {
		given = append(given, ip.String())
	}
	slices.Sort(asked)
	slices.Sort(given)
	if !slices.Equal(asked, given) {
		warnings = append(warnings, fmt.Sprintf("the request asked for names %s; the journal CA permits %s", printable(strings.Join(asked, ",")), strings.Join(given, ",")))
	}
	return warnings
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a certificate request", path, limit)
	}
	return data, nil
}

func (a *app) caIssueAdminCommand() *cobra.Command {
	var f rootKeyFlags
	var name, role, lifetime, outDir string
	cmd := &cobra.Command{
		Use:   "issue-admin --dir DIR --name NAME --out-dir OUT",
		Short: "Issue the first platform-admin credential with the root (on the ceremony machine)",
		Long: `Make a key and a credential for operator NAME signed by the root itself,
and write OUT/admin.pem (mode 0644) and OUT/admin-key.pem (mode 0600).
Existing files are never overwritten. This is the first credential, the one
that runs "pact admin issue" for everyone else once the quorum is up; the
journal records it at its first use, and "pact admin revoke NAME" revokes
it like any other.

It lives 7 days unless --lifetime says otherwise: once the quorum is up,
renew it with "pact admin renew" (the journal's intermediate signs the
renewal; the root stays offline).`,
		Example: `  pact ca issue-admin --dir /media/root-ca --name alice --out-dir ./alice
  pact ca issue-admin --dir /media/root-ca --name ops --role viewer --lifetime 2d --out-dir ./ops`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			spec, opts, problems := f.resolve()
			if name == "" {
				problems = append(problems, errors.New("--name is required: the operator's name, e.g. --name alice"))
			} else if err := pki.ValidateName("operator name", name); err != nil {
				problems = append(problems, fmt.Errorf("--name: %w", err))
			}
			if err := ceremony.ValidateRole(role); err != nil {
				problems = append(problems, fmt.Errorf("--role: %w", err))
			}
			life, err := parseCALifetime(lifetime, ceremony.DefaultAdminLifetime)
			if err != nil {
				problems = append(problems, err)
			}
			certFile, keyFile := filepath.Join(outDir, ceremony.AdminCertFile), filepath.Join(outDir, ceremony.AdminKeyFile)
			if outDir == "" {
				problems = append(problems, errors.New("--out-dir is required: where to write admin.pem and admin-key.pem"))
			} else {
				for _, p := range []string{certFile, keyFile} {
					if _, err := os.Lstat(p); err == nil {
						problems = append(problems, fmt.Errorf("%s already exists; remove it or choose another --out-dir", p))
					}
				}
			}
			out, err := a.caOutput(cmd)
			if err != nil {
				return err
			}
			if err := newUsage(cmd.CommandPath(), problems...); err != nil {
				return err
			}
			now := a.env.Now()
			root, key, err := ceremony.LoadRoot(filepath.Join(f.dir, ceremony.RootCertFile), spec, opts, now)
			if err != nil {
				return caError(cmd, rootKeyHint(err))
			}
			defer key.Close()
			certPEM, keyPEM, cert, err := ceremony.IssueAdmin(root, key, name, role, life, now)
			if err != nil {
				return caError(cmd, err)
			}
			if err := os.MkdirAll(outDir, 0o700); err != nil {
				return err
			}
			if err := ceremony.WriteNew(keyFile, keyPEM, 0o600); err != nil {
				return caError(cmd, err)
			}
			if err := ceremony.WriteNew(certFile, certPEM, 0o644); err != nil {
				_ = os.Remove(keyFile)
				return caError(cmd, err)
			}
			signer := a.certView(root)
			v := CAResultView{Action: "issue-admin", CertFile: certFile, KeyFile: keyFile, Certificate: a.certView(cert), SignedBy: &signer,
				Capped: cert.NotAfter.Equal(root.NotAfter) && now.Add(life).After(root.NotAfter), Warnings: []string{}}
			if out == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			w := a.env.Stdout
			fmt.Fprintf(w, "issued the %s credential of %s: %s, %s (mode 0600)\n", role, name, certFile, keyFile)
			writeCertBlock(w, v.Certificate)
			fmt.Fprintf(w, "signed by the root %s, SHA-256 %s\n", root.Subject.CommonName, signer.SHA256Fingerprint)
			fmt.Fprintf(w, `
Next: hand %s, %s and ca.pem to %s, who sets
  export PACT_CA=ca.pem PACT_CERT=%s PACT_KEY=%s PACT_JOURNAL=HOST:7443
and, once the quorum is up, renews it before %s with: pact admin renew
`, certFile, keyFile, name, ceremony.AdminCertFile, ceremony.AdminKeyFile, v.Certificate.NotAfter)
			return nil
		}),
	}
	f.register(cmd, "the ceremony directory holding ca.pem (required)")
	cmd.Flags().StringVar(&name, "name", "", "the operator's name (required)")
	cmd.Flags().StringVar(&role, "role", pki.RolePlatformAdmin, "platform-admin, pact-ops-VCLUSTER or viewer")
	cmd.Flags().StringVar(&lifetime, "lifetime", "", "how long the credential is valid, e.g. 7d or 36h (default 7d; renew with pact admin renew)")
	cmd.Flags().StringVar(&outDir, "out-dir", "", "where to write admin.pem and admin-key.pem (required; created mode 0700; files never overwritten)")
	return cmd
}

func (a *app) caShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show FILE",
		Short: "Show what a pact certificate (or a journal CA request) is",
		Long: `Show what each certificate in FILE is: a domain root, a journal CA, a
journal intermediate, an agent, a journal server certificate or an operator
credential; its subject, serial, validity (and whether it is valid now),
names, constraints (what a CA may vouch for), SPKI SHA-256 and issuer.
A certificate request (pact-journal ca-request's file) shows its journal
id, the names it asks for and its key's SPKI SHA-256. It verifies nothing:
it reads. --json (or -o json) prints the same for scripts.`,
		Example: `  pact ca show /etc/pact/journal-ca.pem
  pact ca show j1.csr
  pact ca show ca.pem --json | jq -r '.certificates[0].sha256_fingerprint'`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			out, err := a.caOutput(cmd)
			if err != nil {
				return err
			}
			if asJSON {
				out = outputJSON
			}
			if len(args) != 1 {
				return newUsage(cmd.CommandPath(), fmt.Errorf("%s takes one FILE, got %d arguments", cmd.CommandPath(), len(args)))
			}
			v, err := a.readShow(args[0])
			if err != nil {
				return newUsage(cmd.CommandPath(), err)
			}
			if out == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			w := a.env.Stdout
			for i, c := range v.Certificates {
				if i > 0 {
					fmt.Fprintln(w)
				}
				fmt.Fprintf(w, "%s\n", c.Label)
				writeCertBlock(w, c)
			}
			for _, r := range v.Requests {
				fmt.Fprintf(w, "certificate request (only its key is signed)\n")
				tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
				fmt.Fprintf(tw, "  journal id:\t%s\n  asks for:\t%s\n  public key:\t%s\n  SPKI SHA-256:\t%s\n", cell(r.JournalID),
					cell(strings.Join(append(append([]string{}, r.DNSNames...), r.IPAddresses...), ", ")), r.PublicKey, r.SPKISHA256)
				tw.Flush()
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (the same as -o json)")
	return cmd
}

// readShow reads every certificate and certificate request in a PEM file
// (or one DER certificate). It never prints a private key it meets.
func (a *app) readShow(path string) (CAShowView, error) {
	v := CAShowView{File: path, Certificates: []CACertView{}, Requests: []CARequestView{}}
	data, err := readLimited(path, 4<<20)
	if err != nil {
		return v, err
	}
	rest := data
	sawPEM := false
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		sawPEM = true
		switch b.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return v, fmt.Errorf("%s: a certificate does not parse: %v", path, err)
			}
			v.Certificates = append(v.Certificates, a.certView(c))
		case "CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST":
			csr, err := ceremony.ParseCSR(pem.EncodeToMemory(b))
			if err != nil {
				return v, fmt.Errorf("%s: %w", path, err)
			}
			r := CARequestView{JournalID: csr.JournalID, DNSNames: append([]string{}, csr.DNSNames...), IPAddresses: []string{}, SPKISHA256: csr.Fingerprint()}
			for _, ip := range csr.IPs {
				r.IPAddresses = append(r.IPAddresses, ip.String())
			}
			r.PublicKey = ceremony.PublicKeyName(csr.PublicKey)
			v.Requests = append(v.Requests, r)
		default:
			if strings.Contains(b.Type, "PRIVATE KEY") {
				return v, fmt.Errorf("%s holds a private key; pact ca show reads certificates only (nothing of it was printed)", path)
			}
		}
	}
	if !sawPEM {
		if c, err := x509.ParseCertificate(data); err == nil {
			v.Certificates = append(v.Certificates, a.certView(c))
		}
	}
	if len(v.Certificates)+len(v.Requests) == 0 {
		return v, fmt.Errorf("%s holds no certificate and no certificate request", path)
	}
	return v, nil
}

// writeCertBlock prints one certificate as aligned "key: value" lines.
func writeCertBlock(w io.Writer, c CACertView) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s:\t%s\n", k, v) }
	row("kind", c.Label)
	row("subject", cell(c.Subject))
	if c.SelfSigned {
		row("issuer", "itself (self-signed)")
	} else {
		row("issuer", cell(c.Issuer))
	}
	row("serial", c.Serial)
	row("valid", fmt.Sprintf("%s to %s (%s)", c.NotBefore, c.NotAfter, c.State))
	if c.Domain != "" {
		row("trust domain", c.Domain)
	}
	if c.JournalID != "" {
		row("journal", c.JournalID)
	}
	if c.Name != "" && c.Kind != ceremony.KindJournal {
		row("name", c.Name)
	}
	if c.Role != "" {
		row("role", c.Role)
	}
	if names := append(append(append([]string{}, c.DNSNames...), c.IPAddresses...), c.URIs...); len(names) > 0 {
		row("names", cell(strings.Join(names, ", ")))
	}
	if k := c.Constraints; k != nil {
		path := "no limit"
		if k.MaxPathLen >= 0 {
			path = fmt.Sprintf("%d CA below", k.MaxPathLen)
		}
		row("path length", path)
		if len(k.PermittedDNSDomains)+len(k.PermittedIPRanges)+len(k.PermittedURIDomains) > 0 {
			row("may vouch for", cell(strings.Join(slices.Concat(k.PermittedDNSDomains, k.PermittedIPRanges, prefixAll("spiffe://", k.PermittedURIDomains)), ", ")))
		} else {
			row("may vouch for", "any name")
		}
		var excluded []string
		for _, d := range k.ExcludedDNSDomains {
			if d == "" {
				d = "every DNS name"
			}
			excluded = append(excluded, d)
		}
		excluded = append(excluded, k.ExcludedIPRanges...)
		excluded = append(excluded, prefixAll("spiffe://*", k.ExcludedURIDomains)...)
		if len(k.ExcludedEmail) > 0 {
			excluded = append(excluded, "every e-mail address")
		}
		if len(excluded) > 0 {
			row("never", cell(strings.Join(excluded, ", ")))
		}
	}
	row("key usage", cell(strings.Join(append(append([]string{}, c.KeyUsage...), c.ExtKeyUsage...), ", ")))
	row("public key", c.PublicKey)
	row("SPKI SHA-256", c.SPKISHA256)
	row("SHA-256 fingerprint", c.SHA256Fingerprint)
	tw.Flush()
}

func prefixAll(prefix string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = prefix + s
	}
	return out
}
