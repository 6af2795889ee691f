package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/duration"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// OperatorView is the stable JSON form of one operator credential in
// "pact admin list -o json" (and of the credential "pact admin issue|renew"
// made). Times are RFC 3339 UTC; empty when unset.
type OperatorView struct {
	Name      string `json:"name"`
	Role      string `json:"role"`
	Serial    string `json:"serial"`
	NotBefore string `json:"not_before"`
	NotAfter  string `json:"not_after"`
	// IssuedBy is admin/NAME (through the journal: pact admin issue or
	// renew), journal/ID (the bootstrap credential) or first-use (signed
	// by the root itself, recorded at its first call). A credential a
	// journal intermediate signed authenticates only with an admin/NAME
	// record; a first-use record of one (made by a release before that
	// rule) authorizes nothing.
	IssuedBy   string `json:"issued_by"`
	RecordedAt string `json:"recorded_at"`
	RevokedAt  string `json:"revoked_at"`
	RevokedBy  string `json:"revoked_by"`
	// State is valid, expired or revoked.
	State string `json:"state"`
	// Issuer is what signed it: root (a domain root itself: pact ca
	// issue-admin, the bootstrap credential, the layout without journal
	// CAs), or the serial of the journal intermediate that signed it (pact
	// admin issue or renew); empty for a record made before the journal
	// kept it. JournalCASerial is the journal CA above that intermediate.
	// The credential is refused once either is revoked (pact journal
	// retire-intermediate, revoke-ca), or the root leaves the journals'
	// --root-cert: during a root rollover (docs/rollover.md) every
	// credential is renewed onto a journal CA of the new root.
	Issuer          string `json:"issuer"`
	JournalCASerial string `json:"journal_ca_serial"`
}

// OperatorsView is "pact admin list -o json".
type OperatorsView struct {
	Operators []OperatorView `json:"operators"` // never null
	// RevokedNames are names revoked as a whole: every credential of the
	// name issued before revoked_at is refused.
	RevokedNames []RevokedNameView `json:"revoked_names"` // never null
}

// RevokedNameView is one revoked operator name.
type RevokedNameView struct {
	Name      string `json:"name"`
	RevokedAt string `json:"revoked_at"`
	RevokedBy string `json:"revoked_by"`
}

// OperatorViewOf converts a record.
func OperatorViewOf(o *pactv1.Operator, now time.Time) OperatorView {
	v := OperatorView{
		Name: o.GetName(), Role: o.GetRole(), Serial: o.GetSerial(), IssuedBy: o.GetIssuedBy(),
		NotBefore:  formatTime(unixTime(o.GetNotBeforeUnix(), 0)),
		NotAfter:   formatTime(unixTime(o.GetNotAfterUnix(), 0)),
		RecordedAt: formatTime(unixTime(0, o.GetRecordedAtUnixNano())),
		RevokedAt:  formatTime(unixTime(0, o.GetRevokedAtUnixNano())),
		RevokedBy:  o.GetRevokedBy(),
		State:      "valid",
		Issuer:     o.GetIssuerSerial(), JournalCASerial: o.GetJournalCaSerial(),
	}
	if o.GetRootSigned() {
		v.Issuer = "root"
	}
	switch {
	case o.GetRevokedAtUnixNano() != 0:
		v.State = "revoked"
	case now.Unix() > o.GetNotAfterUnix():
		v.State = "expired"
	}
	return v
}

func (a *app) adminCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "List, issue, renew and revoke operator credentials",
		Long: `Operator credentials are client certificates with a role: platform-admin,
pact-ops-VCLUSTER or viewer. "pact admin issue" and "pact admin renew" have
a journal sign them and record them in the quorum's Raft log before they
are returned; a credential a journal's key signed that the quorum did not
record this way is refused (exit 5, OPERATOR_NOT_ISSUED). One signed by the
domain root itself ("pact ca issue-admin", "pact-journal admin issue") is
recorded at its first use. Every one can be revoked: a revoked credential is
refused on its next call, on every journal.

Credentials live days, not years (7 days by default): renew yours with
"pact admin renew" while it is still valid. A platform-admin issues
credentials for others with "pact admin issue".`,
		Example: `  pact admin list
  pact admin issue alice --role viewer --cert-out alice.pem --key-out alice-key.pem
  pact admin renew
  pact admin revoke alice`,
	}
	a.group(cmd)
	cmd.AddCommand(a.adminListCommand(), a.adminIssueCommand(), a.adminRenewCommand(), a.adminRevokeCommand())
	return cmd
}

func (a *app) adminListCommand() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the operator credentials recorded in the journal",
		Long: `List every operator credential the journal has recorded and that is still
valid: name, role, serial, expiry and who issued it. --all adds revoked and
expired ones. Names revoked as a whole are listed after the table. Any
operator role may list.

ISSUER is what signed the credential: root (a domain root itself), or the
journal intermediate that signed it (pact admin issue or renew), and
JOURNAL CA the journal CA above that intermediate ("-" for a credential
recorded before the journal kept them). A credential is refused once its
intermediate or journal CA is revoked (pact journal retire-intermediate,
revoke-ca) or its root leaves the journals: pact journal intermediates
--journal-cas shows which journal CAs are whose. Before such a change
(a root rollover, docs/rollover.md), each operator renews onto a chain that
stays: pact admin renew.`,
		Example: `  pact admin list
  pact admin list --all -o json | jq -r '.operators[] | select(.state=="valid") | .name'

  # Valid credentials still under a journal CA about to be revoked
  pact admin list -o json | jq -r '.operators[] | select(.journal_ca_serial=="3f2a9c...") | .name'`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) > 0 {
				problems = append(problems, fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0]))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.ListOperators(cmd.Context(), &pactv1.ListOperatorsRequest{All: all})
			if err != nil {
				return s.explain(action{verb: "list operator credentials", help: cmd.CommandPath()}, err)
			}
			now := a.env.Now()
			v := OperatorsView{Operators: []OperatorView{}, RevokedNames: []RevokedNameView{}}
			for _, o := range resp.GetOperators() {
				v.Operators = append(v.Operators, OperatorViewOf(o, now))
			}
			for _, n := range resp.GetRevokedNames() {
				v.RevokedNames = append(v.RevokedNames, RevokedNameView{Name: n.GetName(), RevokedAt: formatTime(unixTime(0, n.GetRevokedAtUnixNano())), RevokedBy: n.GetRevokedBy()})
			}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			return writeOperatorTable(a.env.Stdout, v)
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "include revoked and expired credentials")
	return cmd
}

func writeOperatorTable(w io.Writer, v OperatorsView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tSTATE\tEXPIRES\tISSUED BY\tSERIAL\tISSUER\tJOURNAL CA")
	for _, o := range v.Operators {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Name, o.Role, o.State, o.NotAfter, o.IssuedBy, o.Serial, cell(o.Issuer), cell(o.JournalCASerial))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range v.RevokedNames {
		if _, err := fmt.Fprintf(w, "name %s revoked at %s by %s: its credentials issued before then are refused\n", n.Name, n.RevokedAt, n.RevokedBy); err != nil {
			return err
		}
	}
	return nil
}

// parseLifetime reads 7d, 36h, 90m, 1d12h (duration.Parse: days are 24h).
func parseLifetime(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := duration.Parse(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("--lifetime: %w", err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("--lifetime %q: want a positive duration such as 7d or 36h", s)
	}
	return d, nil
}

// newOperatorKey makes a key and a CSR carrying only its public key.
func newOperatorKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, nil, err
	}
	return key, csr, nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

type issueOptions struct {
	role, certOut, keyOut, lifetime string
}

func (a *app) adminIssueCommand() *cobra.Command {
	var o issueOptions
	cmd := &cobra.Command{
		Use:   "issue NAME --role ROLE --cert-out FILE --key-out FILE",
		Short: "Issue an operator credential (platform-admin)",
		Long: `Make a key here, have the journal sign a credential for NAME with ROLE, and
write both. The private key never leaves this machine: the journal sees only
a certificate request. The journal records the credential in Raft before it
answers, so it shows in "pact admin list" and can be revoked. Existing files
are never overwritten. Hand the two files and ca.pem to the operator.

Roles: platform-admin (everything), pact-ops-VCLUSTER (assign nodes into and
out of VCLUSTER), viewer (read only). --lifetime defaults to the journal's
(7 days); the journal caps it (90 days by default).`,
		Example: `  pact admin issue alice --role viewer --cert-out alice.pem --key-out alice-key.pem
  pact admin issue ops-ml --role pact-ops-ml --lifetime 3d --cert-out ops.pem --key-out ops-key.pem`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			name := ""
			switch {
			case len(args) != 1:
				problems = append(problems, fmt.Errorf("%s takes one NAME, got %d arguments", cmd.CommandPath(), len(args)))
			default:
				name = args[0]
				if err := pki.ValidateName("operator name", name); err != nil {
					problems = append(problems, err)
				}
			}
			if o.role == "" {
				problems = append(problems, errors.New("--role is required: platform-admin, pact-ops-VCLUSTER or viewer"))
			}
			if o.certOut == "" || o.keyOut == "" {
				problems = append(problems, errors.New("--cert-out and --key-out are required"))
			}
			for _, p := range []string{o.certOut, o.keyOut} {
				if p == "" {
					continue
				}
				if _, err := os.Stat(p); err == nil {
					problems = append(problems, fmt.Errorf("%s already exists; remove it or choose another path", p))
				}
			}
			lifetime, err := parseLifetime(o.lifetime)
			if err != nil {
				problems = append(problems, err)
			}
			return a.issue(cmd, problems, &pactv1.IssueOperatorRequest{Name: name, Role: o.role, LifetimeSeconds: int64(lifetime / time.Second)}, o.certOut, o.keyOut, false)
		}),
	}
	cmd.Flags().StringVar(&o.role, "role", "", "platform-admin, pact-ops-VCLUSTER or viewer")
	cmd.Flags().StringVar(&o.certOut, "cert-out", "", "where to write the certificate")
	cmd.Flags().StringVar(&o.keyOut, "key-out", "", "where to write the private key (mode 0600)")
	cmd.Flags().StringVar(&o.lifetime, "lifetime", "", "validity, e.g. 7d or 36h (default: the journal's, 7d)")
	return cmd
}

func (a *app) adminRenewCommand() *cobra.Command {
	var o issueOptions
	cmd := &cobra.Command{
		Use:   "renew",
		Short: "Renew your own operator credential before it expires",
		Long: `Have the journal issue a new credential with your name and role, authenticated
by the one you hold, and replace --cert and --key with it (each file is
replaced whole, never half-written). Any role may renew its own credential;
run it while the old one is valid. With --cert-out and --key-out the new
credential goes to new files instead. The old credential stays valid until
it expires; revoke it with "pact admin revoke SERIAL" if it may be lost.

The new credential is signed by the answering journal's current
intermediate, under that journal's current journal CA (pact admin list
shows each credential's ISSUER and JOURNAL CA): renewing moves a credential
onto the chain the journal signs under now, as a root rollover or a journal
CA revocation needs (docs/rollover.md); --journal picks the journal.`,
		Example: `  pact admin renew
  pact admin renew --lifetime 3d

  # Onto the chain journal j2 signs under
  pact admin renew --journal j2.hpc.example.org:7443`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) > 0 {
				problems = append(problems, fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0]))
			}
			if (o.certOut == "") != (o.keyOut == "") {
				problems = append(problems, errors.New("give both --cert-out and --key-out, or neither (to replace --cert and --key)"))
			}
			lifetime, err := parseLifetime(o.lifetime)
			if err != nil {
				problems = append(problems, err)
			}
			return a.issue(cmd, problems, &pactv1.IssueOperatorRequest{LifetimeSeconds: int64(lifetime / time.Second)}, o.certOut, o.keyOut, o.certOut == "")
		}),
	}
	cmd.Flags().StringVar(&o.certOut, "cert-out", "", "write the new certificate here instead of replacing --cert")
	cmd.Flags().StringVar(&o.keyOut, "key-out", "", "write the new key here instead of replacing --key")
	cmd.Flags().StringVar(&o.lifetime, "lifetime", "", "validity, e.g. 7d or 36h (default: the journal's, 7d)")
	return cmd
}

// issue asks the journal for a credential and writes it: to new files, or
// over the session's --cert and --key (replace).
func (a *app) issue(cmd *cobra.Command, problems []error, req *pactv1.IssueOperatorRequest, certOut, keyOut string, replace bool) error {
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()
	if replace {
		certOut, keyOut = s.cfg.CertFile, s.cfg.KeyFile
	}
	key, csr, err := newOperatorKey()
	if err != nil {
		return err
	}
	req.CsrDer = csr
	resp, err := s.client.IssueOperator(cmd.Context(), req)
	if err != nil {
		return s.explain(action{verb: "issue operator credentials", write: true, help: cmd.CommandPath(),
			denied: "only a platform-admin issues credentials for another name or role; any operator may renew its own (pact admin renew)"}, err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return err
	}
	cp := pki.EncodeCertsPEM(resp.GetCertDer())
	write := writeNewFile
	if replace {
		write = replaceFile
	}
	if err := write(keyOut, kp, 0o600); err != nil {
		return fmt.Errorf("the journal issued credential %s but it could not be saved: %w; revoke it with pact admin revoke %s", resp.GetOperator().GetSerial(), err, resp.GetOperator().GetSerial())
	}
	if err := write(certOut, cp, 0o644); err != nil {
		return fmt.Errorf("the journal issued credential %s but it could not be saved: %w; revoke it with pact admin revoke %s", resp.GetOperator().GetSerial(), err, resp.GetOperator().GetSerial())
	}
	v := OperatorViewOf(resp.GetOperator(), a.env.Now())
	if s.cfg.Output == outputJSON {
		return writeJSON(a.env.Stdout, v)
	}
	by := ""
	switch {
	case v.Issuer == "root":
		by = ", signed by the domain root"
	case v.JournalCASerial != "":
		by = fmt.Sprintf(", signed by intermediate %s under journal CA %s", v.Issuer, v.JournalCASerial)
	case v.Issuer != "":
		by = ", signed by intermediate " + v.Issuer
	}
	_, err = fmt.Fprintf(a.env.Stdout, "issued %s credential for %s, serial %s, valid until %s%s: %s, %s\n", v.Role, v.Name, v.Serial, v.NotAfter, by, certOut, keyOut)
	return err
}

// writeNewFile refuses to overwrite.
func writeNewFile(path string, data []byte, mode os.FileMode) error {
	return atomicfile.WriteNew(path, data, mode)
}

// replaceFile replaces path atomically and durably: a reader sees the old
// file or the new one, never half of one.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	return atomicfile.WriteFile(path, data, mode)
}

func (a *app) adminRevokeCommand() *cobra.Command {
	var unrecorded bool
	cmd := &cobra.Command{
		Use:   "revoke NAME|SERIAL",
		Short: "Revoke operator credentials (platform-admin)",
		Long: `Revoke operator credentials. A SERIAL (hex, from "pact admin list") revokes
that one credential. A NAME revokes every credential of that name issued
until now, recorded or not, including ones signed offline and never used;
a credential issued for the name afterwards is valid. The next call made
with a revoked credential is refused (exit 5, OPERATOR_REVOKED) on every
journal. There is no undo: issue a new credential instead.

A NAME that no recorded credential carries is refused (exit 3,
OPERATOR_NOT_FOUND) with the nearest recorded names: most likely it is
misspelt. A credential the root signed offline (pact ca issue-admin,
pact-journal admin issue) is recorded at its first use; to revoke the name
of one never used, pass --unrecorded.`,
		Example: `  pact admin revoke alice
  pact admin revoke 3f1c2a9be0d04c65a1f3e2d9c8b7a6f5

  # A credential signed offline for dave and never used
  pact admin revoke dave --unrecorded`,
		Args: cobra.ArbitraryArgs,
		RunE: a.action(func(cmd *cobra.Command, args []string) error {
			var problems []error
			if len(args) != 1 {
				problems = append(problems, fmt.Errorf("%s takes one NAME or SERIAL, got %d arguments", cmd.CommandPath(), len(args)))
			}
			s, err := a.connect(cmd, problems)
			if err != nil {
				return err
			}
			defer s.close()
			resp, err := s.client.RevokeOperator(cmd.Context(), &pactv1.RevokeOperatorRequest{NameOrSerial: args[0], Unrecorded: unrecorded})
			if err != nil {
				notFound := "no recorded credential has serial " + args[0] + "; pact admin list shows them, or revoke by name"
				if apierr.FromError(err).Reason == apierr.OperatorNotFound {
					// The journal's message names the nearest recorded names.
					notFound = "nothing revoked: no recorded operator credential has the name " + printable(args[0])
				}
				return s.explain(action{verb: "revoke operator credentials", write: true, help: cmd.CommandPath(), notFound: notFound}, err)
			}
			now := a.env.Now()
			v := OperatorsView{Operators: []OperatorView{}, RevokedNames: []RevokedNameView{}}
			for _, o := range resp.GetRevoked() {
				v.Operators = append(v.Operators, OperatorViewOf(o, now))
			}
			if n := resp.GetName(); n != nil {
				v.RevokedNames = append(v.RevokedNames, RevokedNameView{Name: n.GetName(), RevokedAt: formatTime(unixTime(0, n.GetRevokedAtUnixNano())), RevokedBy: n.GetRevokedBy()})
			}
			if s.cfg.Output == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			if len(v.RevokedNames) > 0 {
				fmt.Fprintf(a.env.Stdout, "revoked every credential of %s issued until %s (%d recorded)\n", args[0], v.RevokedNames[0].RevokedAt, len(v.Operators))
				return nil
			}
			fmt.Fprintf(a.env.Stdout, "revoked credential %s\n", args[0])
			return nil
		}),
	}
	cmd.Flags().BoolVar(&unrecorded, "unrecorded", false, "revoke a NAME even though no recorded credential carries it (one signed offline and never used)")
	return cmd
}
