package journal_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
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
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The migration: a quorum where j1 still signs with the domain root key
// (the legacy layout) and j2 and j3 with journal CAs serves agents of
// either, at any journal; Raft records who signed what, and the trust
// bundle holds the root, then the journal CAs, then the intermediates.
func TestMixedLayoutQuorumServesAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	var logs syncBuffer
	journaltest.UseLegacyLayout(&cfgs[0], root)
	cfgs[0].Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c := journaltest.StartCluster(t, root, cfgs)
	if !strings.Contains(logs.String(), "the domain root key is on this journal host; move it offline: docs/migration.md") {
		t.Errorf("the legacy journal did not warn about the root key on its host:\n%s", logs.String())
	}
	if c.Nodes[0].J.JournalCA() != nil || c.Nodes[1].J.JournalCA() == nil {
		t.Fatal("j1 should sign with the root, j2 with its journal CA")
	}
	leader := c.Leader(t)
	for i := range 3 {
		c.Nodes[leader].Register(t, fmt.Sprintf("n%d", i), fmt.Sprintf("SN%d", i), mac(i))
	}
	root0 := c.Nodes[0].J.Root()
	for i, h := range c.Nodes {
		key := journaltest.NewKey(t)
		resp, err := h.Enroll(t, key, fmt.Sprintf("SN%d", i), mac(i))
		if err != nil {
			t.Fatalf("enroll at %s: %v", h.Cfg.NodeID, err)
		}
		chain := resp.GetCertChainDer()
		inter, err := x509.ParseCertificate(chain[1])
		if err != nil {
			t.Fatal(err)
		}
		if jc := h.J.JournalCA(); jc == nil {
			if len(chain) != 2 || inter.CheckSignatureFrom(root0) != nil {
				t.Errorf("%s (legacy): chain of %d, want [leaf, intermediate] with the root's signature", h.Cfg.NodeID, len(chain))
			}
		} else if len(chain) != 3 || !bytes.Equal(chain[2], jc.Raw) || inter.CheckSignatureFrom(jc) != nil {
			t.Errorf("%s: chain of %d, want [leaf, intermediate, its journal CA]", h.Cfg.NodeID, len(chain))
		}
		// The bundle: the root, the two journal CAs, the three intermediates.
		bundle := resp.GetTrustBundleDer()
		if len(bundle) != 6 || !bytes.Equal(bundle[0], root0.Raw) {
			t.Fatalf("bundle of %d certificates, want root + 2 journal CAs + 3 intermediates", len(bundle))
		}
		for k, d := range bundle[1:3] {
			if jc, err := x509.ParseCertificate(d); err != nil || jc.CheckSignatureFrom(root0) != nil {
				t.Errorf("bundle[%d] is not a journal CA of the root", k+1)
			} else if _, _, ok := caprofile.JournalOf(jc); !ok {
				t.Errorf("bundle[%d] is %s, not a journal CA", k+1, jc.Subject.CommonName)
			}
		}
		// The agent streams at the next journal, of the other layout or
		// the same.
		other := c.Nodes[(i+1)%3]
		cert := key.TLSCert(chain)
		stream, err := pactv1.NewEnrollmentServiceClient(other.Dial(t, &cert)).Subscribe(context.Background(), &pactv1.SubscribeRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if err != nil {
			t.Errorf("a certificate of %s at %s: %v", h.Cfg.NodeID, other.Cfg.NodeID, err)
		}
	}
	// Each journal's TLS server presents its chain up to the root: with
	// its journal CA, or (legacy) without.
	for _, h := range c.Nodes {
		conn, err := tls.Dial("tcp", h.Addr, &tls.Config{RootCAs: h.Roots, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatalf("TLS to %s: %v", h.Cfg.NodeID, err)
		}
		peer := conn.ConnectionState().PeerCertificates
		conn.Close()
		want := 3
		if h.J.JournalCA() == nil {
			want = 2
		}
		if len(peer) != want || !bytes.Equal(peer[1].Raw, h.J.IntermediateCert().Raw) || (want == 3 && !bytes.Equal(peer[2].Raw, h.J.JournalCA().Raw)) {
			t.Errorf("%s presents %d certificates, want %d: [server, intermediate, journal CA]", h.Cfg.NodeID, len(peer), want)
		}
	}
	// Raft names the journal CA of each journal's intermediate (none for
	// the root's).
	for _, h := range c.Nodes {
		in, ok := c.Nodes[leader].J.IntermediateRecordForTest(h.J.Intermediate())
		want := ""
		if jc := h.J.JournalCA(); jc != nil {
			want = pki.SerialHex(jc.SerialNumber)
		}
		if !ok || in.GetIssuerSerial() != want {
			t.Errorf("intermediate of %s: recorded %v, issuer serial %q, want %q", h.Cfg.NodeID, ok, in.GetIssuerSerial(), want)
		}
	}
}

// During a root rollover --root-cert holds two roots of the domain: the
// trust bundle starts with both, and the bootstrap credential of either is
// recorded at start.
func TestTwoRoots(t *testing.T) {
	dir, newer := t.TempDir(), t.TempDir()
	cfg := journaltest.Config(dir)
	if err := journaltest.NewRoot(newer); err != nil {
		t.Fatal(err)
	}
	roots := filepath.Join(t.TempDir(), "roots.pem")
	var pemData []byte
	for _, d := range []string{dir, newer} {
		b, err := os.ReadFile(filepath.Join(d, ca.RootCertFile))
		if err != nil {
			t.Fatal(err)
		}
		pemData = append(pemData, b...)
	}
	if err := os.WriteFile(roots, pemData, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.RootCertFile = roots
	// The bootstrap credential in the data directory is the newer root's.
	for _, f := range []string{ca.AdminCertFile, ca.AdminKeyFile} {
		b, err := os.ReadFile(filepath.Join(newer, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := journaltest.Start(t, cfg)
	if got := h.J.Roots(); len(got) != 2 {
		t.Fatalf("the journal has %d roots, want 2", len(got))
	}
	// Calls as a platform-admin of the first root (the journal's auth
	// taking both roots is journal/auth's).
	alice := h.IssueAdmin(t, "alice", "platform-admin")
	admin := pactv1.NewAdminServiceClient(h.Dial(t, &alice))
	if _, err := admin.RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{NodeId: "n1", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac1}, BmcSerial: "SN1"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := h.Enroll(t, journaltest.NewKey(t), "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	bundle := resp.GetTrustBundleDer()
	if len(bundle) != 4 || !bytes.Equal(bundle[0], h.J.Roots()[0].Raw) || !bytes.Equal(bundle[1], h.J.Roots()[1].Raw) {
		t.Errorf("bundle of %d certificates, want both roots first, then the journal CA and the intermediate", len(bundle))
	}
	ops, err := admin.ListOperators(context.Background(), &pactv1.ListOperatorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recorded := false
	for _, o := range ops.GetOperators() {
		recorded = recorded || (o.GetName() == "admin" && o.GetIssuedBy() == "journal/j1")
	}
	if !recorded {
		t.Errorf("the bootstrap credential of the second root was not recorded: %v", ops.GetOperators())
	}
}

// A journal of the legacy layout (the root key on its host, --root-key)
// still runs as before, and warns: the root signs its intermediate and
// the operator credentials it issues, its chains end with the intermediate,
// and Raft records no journal CA for it.
func TestLegacyLayoutJournal(t *testing.T) {
	cfg := journaltest.LegacyConfig(t.TempDir())
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h := journaltest.Start(t, cfg)
	if !strings.Contains(logs.String(), "the domain root key is on this journal host; move it offline: docs/migration.md") {
		t.Errorf("no warning about the root key:\n%s", logs.String())
	}
	root := h.J.Root()
	if h.J.JournalCA() != nil || h.J.IntermediateCert().CheckSignatureFrom(root) != nil {
		t.Fatal("the legacy journal's intermediate is not the root's")
	}
	h.Register(t, "n1", "SN1", mac1)
	resp, err := h.Enroll(t, journaltest.NewKey(t), "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetCertChainDer()) != 2 || len(resp.GetTrustBundleDer()) != 2 {
		t.Errorf("chain of %d, bundle of %d; want [leaf, intermediate] and [root, intermediate]", len(resp.GetCertChainDer()), len(resp.GetTrustBundleDer()))
	}
	in, ok := h.J.IntermediateRecordForTest(h.J.Intermediate())
	if !ok || in.GetIssuerSerial() != "" {
		t.Errorf("intermediate record %v, want no issuer serial", in)
	}
	// An operator credential it issues is the root's, and works.
	key := journaltest.NewKey(t)
	issued, err := h.AdminClient(t).IssueOperator(context.Background(), &pactv1.IssueOperatorRequest{Name: "bob", Role: "viewer", CsrDer: key.CSR})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(issued.GetCertDer())
	if err != nil || cert.CheckSignatureFrom(root) != nil {
		t.Fatalf("the legacy journal's operator credential is not the root's: %v", err)
	}
	bob := tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key.Signer}
	if _, err := pactv1.NewAdminServiceClient(h.Dial(t, &bob)).ListNodes(context.Background(), &pactv1.ListNodesRequest{}); err != nil {
		t.Errorf("bob lists nodes: %v", err)
	}
}

// A journal takes a renewed journal CA certificate at its next re-key, with
// no restart: the one published with the new intermediate, the chains it
// hands out and its server's end with it. A certificate that does not fit
// is refused and logged, and the journal goes on with the one it has; it
// says so where the operator looks until a re-key takes a file: in its
// member status (pact journal status) and pact_journal_ca_file_refused.
func TestJournalCARenewalWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := journaltest.Config(dir)
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h := journaltest.Start(t, cfg)
	old := h.J.JournalCA()
	admin := h.AdminClient(t)
	reg := h.J.MetricsRegistry()
	member := func(t *testing.T) *pactv1.JournalMember {
		t.Helper()
		st, err := admin.JournalStatus(callCtx(t), &pactv1.JournalStatusRequest{})
		if err != nil || len(st.GetMembers()) != 1 {
			t.Fatalf("status: %v %v", st, err)
		}
		return st.GetMembers()[0]
	}
	if m := member(t); m.GetJournalCaSerial() != pki.SerialHex(old.SerialNumber) || m.GetJournalCaFileRefused() != "" {
		t.Errorf("status before: journal CA %q, refused %q; want %s and nothing", m.GetJournalCaSerial(), m.GetJournalCaFileRefused(), pki.SerialHex(old.SerialNumber))
	}
	if got := must(t, reg, "pact_journal_ca_file_refused"); got != 0 {
		t.Errorf("pact_journal_ca_file_refused = %v before any refusal", got)
	}

	// Renewal refused: a journal CA for another journal, same key.
	writeJournalCA(t, h, "j9")
	retire(t, admin, h.J.Intermediate())
	waitFor(t, "the refusal logged", func() bool {
		return strings.Contains(logs.String(), "the journal CA certificate file holds a certificate this journal cannot take")
	})
	if !bytes.Equal(h.J.JournalCA().Raw, old.Raw) {
		t.Fatal("a journal CA for another journal was taken")
	}
	if !strings.Contains(logs.String(), "is for journal j9") {
		t.Errorf("the refusal does not say why:\n%s", logs.String())
	}
	m := member(t)
	if why := m.GetJournalCaFileRefused(); !strings.Contains(why, "is for journal j9") || !strings.Contains(why, "still signing with journal CA "+pki.SerialHex(old.SerialNumber)) ||
		strings.Contains(why, ca.ErrJournalCAKept.Error()) {
		t.Errorf("status says the file was refused for %q; want why, and the journal CA still in use", why)
	}
	if m.GetJournalCaSerial() != pki.SerialHex(old.SerialNumber) {
		t.Errorf("status names journal CA %s, want the one kept, %s", m.GetJournalCaSerial(), pki.SerialHex(old.SerialNumber))
	}
	if got := must(t, reg, "pact_journal_ca_file_refused"); got != 1 {
		t.Errorf("pact_journal_ca_file_refused = %v after a refusal, want 1", got)
	}

	// Renewal taken: the same key, for this journal.
	renewed := writeJournalCA(t, h, cfg.NodeID)
	retire(t, admin, h.J.Intermediate())
	waitFor(t, "the renewed journal CA taken", func() bool { return bytes.Equal(h.J.JournalCA().Raw, renewed.Raw) })
	waitFor(t, "the refusal cleared", func() bool { return must(t, reg, "pact_journal_ca_file_refused") == 0 })
	if m := member(t); m.GetJournalCaSerial() != pki.SerialHex(renewed.SerialNumber) || m.GetJournalCaFileRefused() != "" {
		t.Errorf("status after the renewal: journal CA %q, refused %q; want %s and nothing", m.GetJournalCaSerial(), m.GetJournalCaFileRefused(), pki.SerialHex(renewed.SerialNumber))
	}
	waitFor(t, "the new intermediate published", func() bool { _, ok := h.J.IntermediateRecordForTest(h.J.Intermediate()); return ok })
	h.Register(t, "n1", "SN1", mac1)
	resp, err := h.Enroll(t, journaltest.NewKey(t), "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	if chain := resp.GetCertChainDer(); len(chain) != 3 || !bytes.Equal(chain[2], renewed.Raw) {
		t.Error("the chain handed out does not end with the renewed journal CA")
	}
	var sawOld, sawNew bool
	for _, d := range resp.GetTrustBundleDer() {
		sawOld = sawOld || bytes.Equal(d, old.Raw)
		sawNew = sawNew || bytes.Equal(d, renewed.Raw)
	}
	if !sawOld || !sawNew {
		t.Errorf("bundle holds the old journal CA: %v, the renewed one: %v; want both (the old one's intermediates are still live)", sawOld, sawNew)
	}
	in, ok := h.J.IntermediateRecordForTest(h.J.Intermediate())
	if !ok || in.GetIssuerSerial() != pki.SerialHex(renewed.SerialNumber) {
		t.Errorf("the new intermediate's record names issuer %q, want %s", in.GetIssuerSerial(), pki.SerialHex(renewed.SerialNumber))
	}
}

// writeJournalCA writes a journal CA for journal id, for the harness
// journal's key, where the journal reads it (its renewal in a ceremony).
func writeJournalCA(t *testing.T, h *journaltest.Harness, id string) *x509.Certificate {
	t.Helper()
	return writeJournalCAFor(t, h.Cfg, h.Dir, id, time.Now().Add(2*caprofile.DefaultJournalCALifetime))
}

// writeJournalCAFor writes a journal CA for journal id ending at notAfter,
// signed by the root in rootDir for cfg's journal CA key, at cfg's
// --journal-ca-cert.
func writeJournalCAFor(t *testing.T, cfg journal.Config, rootDir, id string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	root, err := ca.LoadKeyFileAuthority(filepath.Join(rootDir, ca.RootCertFile), filepath.Join(rootDir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := keystore.Parse(cfg.JournalCAKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := keystore.Open(spec, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	dnsNames, ips := journal.ServerNames(cfg.ListenAddr, cfg.ServerNames)
	cert, err := ca.SignJournalCA(root, key.Public(), caprofile.JournalCAParams{Domain: journaltest.Domain, JournalID: id, DNSNames: dnsNames, IPs: ips,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: notAfter})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.JournalCACertFile, pki.EncodeCertsPEM(cert.Raw), 0o644); err != nil {
		t.Fatal(err)
	}
	return cert
}

// A journal whose journal CA ends within 30 days says so at start; its
// intermediate, and every certificate under it, ends with the journal CA.
func TestJournalCAExpiryWarning(t *testing.T) {
	dir := t.TempDir()
	cfg := journaltest.Config(dir)
	jc := writeJournalCAFor(t, cfg, dir, cfg.NodeID, time.Now().Add(4*24*time.Hour))
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h := journaltest.Start(t, cfg)
	if !strings.Contains(logs.String(), "this journal's journal CA expires within 30 days: renew it (docs/ceremony.md)") ||
		!strings.Contains(logs.String(), pki.SerialHex(jc.SerialNumber)) {
		t.Errorf("no warning of the journal CA's end:\n%s", logs.String())
	}
	if inter := h.J.IntermediateCert(); !inter.NotAfter.Equal(jc.NotAfter) {
		t.Errorf("the intermediate ends %v, the journal CA %v: want it capped", inter.NotAfter, jc.NotAfter)
	}
}

// An operator credential the journal issues ends with the intermediate
// that signed it: asked for longer, the record answered (what pact admin
// issue prints) carries the real end, and the journal logs it.
func TestOperatorLifetimeCappedByTheIntermediate(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h := journaltest.Start(t, cfg)
	inter := h.J.IntermediateCert()
	resp, err := h.AdminClient(t).IssueOperator(context.Background(), &pactv1.IssueOperatorRequest{
		Name: "dave", Role: "viewer", LifetimeSeconds: int64((30 * 24 * time.Hour).Seconds()), CsrDer: journaltest.NewKey(t).CSR})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(resp.GetCertDer())
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(inter.NotAfter) || cert.CheckSignatureFrom(inter) != nil {
		t.Errorf("credential ends %v (signed by the intermediate: %v), want the intermediate's end %v", cert.NotAfter, cert.CheckSignatureFrom(inter), inter.NotAfter)
	}
	if got := resp.GetOperator().GetNotAfterUnix(); got != cert.NotAfter.Unix() {
		t.Errorf("the answer's record ends %d, the certificate %d", got, cert.NotAfter.Unix())
	}
	if !strings.Contains(logs.String(), "the operator credential ends with the journal intermediate that signed it, before the lifetime asked") {
		t.Errorf("the journal did not log the shorter lifetime:\n%s", logs.String())
	}
}

// retire retires this journal's intermediate now: the journal re-keys.
func retire(t *testing.T, admin pactv1.AdminServiceClient, serial string) {
	t.Helper()
	if _, err := admin.RetireIntermediate(context.Background(), &pactv1.RetireIntermediateRequest{Targets: []string{serial}, GraceSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
}

// A --dev journal makes its development set-up: a root and the admin
// credential, and a journal CA for itself from that root (its key a file in
// the data directory); it says it is a development set-up. A data
// directory from before journal CAs (a root only) gets its journal CA on
// the next start.
func TestDevSetUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before prepares the data directory.
		before func(t *testing.T, dir string)
	}{
		{"a new data directory", func(*testing.T, string) {}},
		{"a data directory with a root only", func(t *testing.T, dir string) {
			if _, err := ca.InitDev(dir, "pact.local", time.Now()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.before(t, dir)
			cfg := journal.DefaultConfig()
			cfg.DataDir, cfg.Dev, cfg.ListenAddr, cfg.RaftTimeout = dir, true, "127.0.0.1:0", 100*time.Millisecond
			var logs syncBuffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			h := journaltest.Start(t, cfg)
			for _, f := range []string{ca.RootCertFile, ca.RootKeyFile, ca.AdminCertFile, ca.AdminKeyFile, ca.JournalCACertFile, ca.JournalCAKeyFile} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("--dev did not make %s: %v", f, err)
				}
			}
			jc := h.J.JournalCA()
			if jc == nil {
				t.Fatal("a --dev journal signs with its root, not a journal CA")
			}
			dnsNames, ips := journal.ServerNames(cfg.ListenAddr, nil)
			if err := caprofile.CheckJournalCA(jc, h.J.Roots(), cfg.NodeID, h.J.Domain(), dnsNames, ips, time.Now()); err != nil {
				t.Errorf("the dev journal CA does not fit: %v", err)
			}
			if !strings.Contains(logs.String(), "this is a development set-up") {
				t.Errorf("the journal did not say it is a development set-up:\n%s", logs.String())
			}
			// The admin credential works; agents enroll.
			h.Register(t, "n1", "SN1", mac1)
			if _, err := h.Enroll(t, journaltest.NewKey(t), "SN1", mac1); err != nil {
				t.Fatal(err)
			}
			// A restart keeps the journal CA.
			h.Restart(t)
			if again := h.J.JournalCA(); !bytes.Equal(again.Raw, jc.Raw) {
				t.Error("a restart made a new dev journal CA")
			}
		})
	}
}

// A journal whose own intermediate an operator retires (the journal CA
// renewal and the root rollover do) stays a peer of the quorum once the
// grace is over: its channels to the other journals presented the old
// intermediate's certificate, and were refused on every call from the
// revocation on, so a follower could neither forward a write nor confirm a
// read, and answered NO_LEADER until restarted.
func TestRetiredOwnIntermediateKeepsTheJournalAPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-journal test; skipped with -short")
	}
	root, cfgs := journaltest.ClusterConfigs(t, 3)
	c := journaltest.StartCluster(t, root, cfgs)
	leader := c.Leader(t)
	f := c.Nodes[(leader+1)%3]
	// A write through the follower opens its channel to the leader.
	f.Register(t, "n0", "SN0", mac(0))
	old := f.J.Intermediate()
	if _, err := f.AdminClient(t).RetireIntermediate(context.Background(), &pactv1.RetireIntermediateRequest{Targets: []string{old}, GraceSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower's re-key", func() bool { return f.J.Intermediate() != old })
	for i, n := range c.Nodes {
		waitFor(t, fmt.Sprintf("the grace over: journal %d no longer trusts the old intermediate", i), func() bool { return !n.J.IntermediateTrustedForTest(old) })
	}
	if _, err := f.AdminClient(t).RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "n1", Hardware: &pactv1.HardwareIdentity{Macs: []string{mac(1)}, BmcSerial: "SN1"}}); err != nil {
		t.Errorf("a write through the follower after its old intermediate was revoked: %v", err)
	}
}
