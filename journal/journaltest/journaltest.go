// Package journaltest runs a real single-node journal in a test: real Raft
// with bbolt in a temp dir, real TLS and gRPC on loopback, in the
// production layout: a domain root made as the ceremony makes it, with its
// first admin credential, and a journal CA for each journal whose key is a
// 0600 file outside the data directory. The legacy layout (the root key
// on the journal host) is there too, for migration tests.
package journaltest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/atomicfile"
	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/porttest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Harness is a running journal and the credentials to talk to it.
type Harness struct {
	J     *journal.Journal
	Cfg   journal.Config
	Dir   string
	Addr  string
	Roots *x509.CertPool
	Admin tls.Certificate
}

// Config returns the configuration Start uses: journal j1 with its data in
// dir, on an ephemeral loopback port, with short Raft timeouts and quiet
// logs. It makes (unless there already) the domain root in dir (ca.pem;
// ca-key.pem stands for the ceremony's machine, the journal never reads
// it) with the first admin credential (admin.pem, admin-key.pem), and the
// journal CA of j1 (dir/journal-ca.pem, its key beside dir: outside the
// data directory). A test that changes NodeID, ListenAddr's host or
// ServerNames calls JournalCA again.
func Config(dir string) journal.Config {
	cfg := baseConfig(dir)
	if err := NewRoot(dir); err != nil {
		panic(err)
	}
	if err := JournalCA(&cfg, dir); err != nil {
		panic(err)
	}
	return cfg
}

// LegacyConfig is Config in the layout before journal CAs: the domain
// root's key (dir/ca-key.pem) on the journal host signs its intermediates.
func LegacyConfig(dir string) journal.Config {
	cfg := baseConfig(dir)
	if err := NewRoot(dir); err != nil {
		panic(err)
	}
	UseLegacyLayout(&cfg, dir)
	return cfg
}

// Domain is the domain of the roots the harness makes.
const Domain = "pact.local"

// NewRoot makes a domain root in dir as the ceremony does (caprofile.Root:
// ca.pem, its key ca-key.pem) with a first platform-admin credential it
// signs (admin.pem, admin-key.pem), unless dir holds a root already.
func NewRoot(dir string) error {
	_, err := ca.InitDev(dir, Domain, time.Now())
	return err
}

// JournalCA gives cfg a journal CA signed by the root in rootDir for its
// NodeID and the names it serves under (journal.ServerNames): the
// certificate at DATA_DIR/journal-ca.pem, the key a 0600 file beside the
// data directory (DATA_DIR.journal-ca-key.pem), kept if there. The legacy
// root key setting is cleared.
func JournalCA(cfg *journal.Config, rootDir string) error {
	root, err := ca.LoadKeyFileAuthority(filepath.Join(rootDir, ca.RootCertFile), filepath.Join(rootDir, ca.RootKeyFile))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	keyPath := filepath.Clean(cfg.DataDir) + ".journal-ca-key.pem"
	spec := keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}
	key, err := keystore.Open(spec, keystore.Options{})
	if errors.Is(err, keystore.ErrNoKey) {
		key, err = keystore.Generate(spec, keystore.Options{})
	}
	if err != nil {
		return err
	}
	defer key.Close()
	domain, err := ca.DomainOf(root.Root())
	if err != nil {
		return err
	}
	dnsNames, ips := journal.ServerNames(cfg.ListenAddr, cfg.ServerNames)
	cert, err := ca.SignJournalCA(root, key.Public(), caprofile.JournalCAParams{
		Domain: domain, JournalID: cfg.NodeID, DNSNames: dnsNames, IPs: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(caprofile.DefaultJournalCALifetime),
	})
	if err != nil {
		return err
	}
	certPath := filepath.Join(cfg.DataDir, ca.JournalCACertFile)
	if err := atomicfile.WriteFile(certPath, pki.EncodeCertsPEM(cert.Raw), 0o644); err != nil {
		return err
	}
	cfg.Dev = false
	cfg.RootCertFile = filepath.Join(rootDir, ca.RootCertFile)
	cfg.RootKeyFile = ""
	cfg.JournalCACertFile = certPath
	cfg.JournalCAKey = spec.String()
	return nil
}

// UseLegacyLayout makes cfg a journal of the layout before journal CAs:
// the root in rootDir, key and all, signs its intermediates.
func UseLegacyLayout(cfg *journal.Config, rootDir string) {
	cfg.Dev = false
	cfg.RootCertFile = filepath.Join(rootDir, ca.RootCertFile)
	cfg.RootKeyFile = filepath.Join(rootDir, ca.RootKeyFile)
	cfg.JournalCACertFile, cfg.JournalCAKey = "", ""
}

// baseConfig is what every harness journal shares.
func baseConfig(dir string) journal.Config {
	cfg := journal.DefaultConfig()
	cfg.DataDir = dir
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.RaftTimeout = 100 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	// Every test client is 127.0.0.1: tests that walk through refusals
	// would otherwise trip the per-source limit. Rate-limit tests set
	// their own.
	cfg.RateLimit.PerSourceBurst = 100000
	cfg.RateLimit.GlobalBurst = 100000
	// Likewise for connections: a test dials a channel per helper call and
	// closes them at its end. Connection-limit tests set their own.
	cfg.Connections.MaxConnsPerSource = 4096
	return cfg
}

// Start runs a journal with cfg (see Config) and stops it at test end.
func Start(t testing.TB, cfg journal.Config) *Harness {
	t.Helper()
	j, err := journal.NewContext(context.Background(), cfg)
	if err != nil {
		t.Fatalf("journal.NewContext: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := j.Start(ctx); err != nil {
		_ = j.Close()
		t.Fatalf("journal.Start: %v", err)
	}
	h := &Harness{J: j, Cfg: cfg, Dir: cfg.DataDir, Addr: j.Addr()}
	t.Cleanup(func() { _ = h.J.Close() })
	if !cfg.Join && len(cfg.InitialCluster) <= 1 {
		// A quorum of one: nobody else to wait for.
		h.WaitFeatureLevel(t)
	}
	roots, _, err := pki.LoadCertPool(filepath.Join(cfg.DataDir, ca.RootCertFile))
	if err != nil {
		t.Fatal(err)
	}
	h.Roots = roots
	h.Admin, err = tls.LoadX509KeyPair(filepath.Join(cfg.DataDir, ca.AdminCertFile), filepath.Join(cfg.DataDir, ca.AdminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Restart closes the journal and starts a new one on the same data dir
// (and a new port).
func (h *Harness) Restart(t testing.TB) {
	t.Helper()
	if err := h.J.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	n := Start(t, h.Cfg)
	*h = *n
}

// Dial opens a channel presenting cert (nil: server-TLS only, as Enroll).
func (h *Harness) Dial(t testing.TB, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	return h.DialWith(t, cert)
}

// DialWith is Dial with extra dial options (a dialer that records the
// client's address, say).
func (h *Harness) DialWith(t testing.TB, cert *tls.Certificate, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: h.Roots}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, opts...)
	conn, err := grpc.NewClient("passthrough:///"+h.Addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// AdminClient is an AdminService client with the dev platform-admin cert.
func (h *Harness) AdminClient(t testing.TB) pactv1.AdminServiceClient {
	return pactv1.NewAdminServiceClient(h.Dial(t, &h.Admin))
}

// IssueAdmin makes an operator credential with role.
func (h *Harness) IssueAdmin(t testing.TB, name, role string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM := h.IssueAdminPEM(t, name, role)
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// IssueAdminPEM makes an operator credential with role, valid for an
// hour, as the PEM files an operator is handed (what the CLI reads with
// --cert and --key).
func (h *Harness) IssueAdminPEM(t testing.TB, name, role string) (certPEM, keyPEM []byte) {
	t.Helper()
	auth, err := ca.LoadKeyFileAuthority(filepath.Join(h.Dir, ca.RootCertFile), filepath.Join(h.Dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err = ca.IssueAdmin(auth, name, role, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// Register pre-registers a node as platform-admin.
//
// A NO_LEADER answer (nothing was written) is retried for up to 30 s: in
// a quorum on a loaded machine the leadership can move at any moment, and
// a test that registers a node as its set-up is not about that.
func (h *Harness) Register(t testing.TB, nodeID string, bmc string, macs ...string) *pactv1.Node {
	t.Helper()
	var node *pactv1.Node
	polltest.Until(t, 30*time.Second, 50*time.Millisecond, func() bool {
		resp, err := h.AdminClient(t).RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{
			NodeId:   nodeID,
			Hardware: &pactv1.HardwareIdentity{Macs: macs, BmcSerial: bmc},
		})
		if err != nil && apierr.FromError(err).Reason != apierr.NoLeader {
			t.Fatalf("register %s: %v", nodeID, err)
		}
		node = resp.GetNode()
		return err == nil // else a new leader is being elected
	}, "register %s: NO_LEADER for 30s", nodeID)
	return node
}

// Key is an agent key pair and its CSR.
type Key struct {
	Signer crypto.Signer
	CSR    []byte
}

// NewKey makes a P-256 agent key and CSR.
func NewKey(t testing.TB) Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
	if err != nil {
		t.Fatal(err)
	}
	return Key{Signer: k, CSR: csr}
}

// TLSCert combines a key with the chain Enroll or RenewCert returned.
func (k Key) TLSCert(chain [][]byte) tls.Certificate {
	return tls.Certificate{Certificate: chain, PrivateKey: k.Signer}
}

// Enroll calls Enroll with hardware and key.
func (h *Harness) Enroll(t testing.TB, key Key, bmc string, macs ...string) (*pactv1.EnrollResponse, error) {
	t.Helper()
	return pactv1.NewEnrollmentServiceClient(h.Dial(t, nil)).Enroll(context.Background(), &pactv1.EnrollRequest{
		Hardware: &pactv1.HardwareIdentity{Macs: macs, BmcSerial: bmc},
		CsrDer:   key.CSR,
	})
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago (the journal must bind it itself, so there is a small race).
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := porttest.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Cluster is a quorum of real journals in this process, talking Raft over
// mutual TLS on loopback, each with its own bbolt store.
type Cluster struct {
	Root    string // directory with the shared domain root and admin credential
	Configs []journal.Config
	Nodes   []*Harness // nil while a member is stopped
}

// ClusterConfigs makes configurations for an n-journal quorum sharing one
// domain root (made in a temp dir), each journal with its journal CA; edit
// them before StartCluster (UseLegacyLayout makes a member sign with the
// root key, as before journal CAs).
func ClusterConfigs(t testing.TB, n int) (string, []journal.Config) {
	t.Helper()
	root := t.TempDir()
	if err := NewRoot(root); err != nil {
		t.Fatal(err)
	}
	var peers []journal.Peer
	cfgs := make([]journal.Config, n)
	for i := range cfgs {
		cfg := baseConfig(t.TempDir())
		cfg.NodeID = fmt.Sprintf("j%d", i+1)
		cfg.ListenAddr = FreeAddr(t)
		cfg.RaftListen = FreeAddr(t)
		if err := JournalCA(&cfg, root); err != nil {
			t.Fatal(err)
		}
		// Raft's own defaults (1 s heartbeat and election timeouts): with
		// 300 ms a leader on a loaded machine, under -race, missed its
		// lease now and then and stepped down in the middle of a test that
		// is not about elections.
		cfg.RaftTimeout = time.Second
		peers = append(peers, journal.Peer{ID: cfg.NodeID, RaftAddr: cfg.RaftListen})
		cfgs[i] = cfg
	}
	for i := range cfgs {
		cfgs[i].InitialCluster = peers
	}
	return root, cfgs
}

// StartCluster starts every journal of cfgs concurrently (each waits for
// a leader) and returns when all serve.
func StartCluster(t testing.TB, root string, cfgs []journal.Config) *Cluster {
	t.Helper()
	c := &Cluster{Root: root, Configs: cfgs, Nodes: make([]*Harness, len(cfgs))}
	errs := make(chan error, len(cfgs))
	for i := range cfgs {
		go func(i int) {
			h, err := StartHarness(cfgs[i], root)
			c.Nodes[i] = h
			errs <- err
		}(i)
	}
	for range cfgs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, h := range c.Nodes {
			if h != nil {
				_ = h.J.Close()
			}
		}
	})
	for _, h := range c.Nodes {
		h.WaitFeatureLevel(t)
	}
	return c
}

// WaitFeatureLevel waits until the journal's registry records this
// release's quorum feature level: a quorum of this release starts at
// level 1 and its leader raises it once every member answers (within a
// second or two of the start), and the features of the level (the
// binding rules, record-ca) are refused until then.
func (h *Harness) WaitFeatureLevel(t testing.TB) {
	t.Helper()
	polltest.Until(t, 30*time.Second, 20*time.Millisecond, func() bool { return h.J.QuorumFeatureLevel() >= raftfsm.FeatureLevel },
		"journal %s to record quorum feature level %d (it records %d)", h.Cfg.NodeID, raftfsm.FeatureLevel, h.J.QuorumFeatureLevel())
}

// StartMember (re)starts member i with its configuration.
func (c *Cluster) StartMember(t testing.TB, i int) *Harness {
	t.Helper()
	h, err := StartHarness(c.Configs[i], c.Root)
	if err != nil {
		t.Fatal(err)
	}
	c.Nodes[i] = h
	return h
}

// StopMember closes member i.
func (c *Cluster) StopMember(t testing.TB, i int) {
	t.Helper()
	if err := c.Nodes[i].J.Close(); err != nil {
		t.Logf("close %s: %v", c.Configs[i].NodeID, err)
	}
	c.Nodes[i] = nil
}

// Leader returns the index of the member that leads, waiting until there
// is one and every running member knows it: right after an election a
// follower that has not heard from the new leader yet answers NO_LEADER.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	leader := -1
	polltest.Until(t, 20*time.Second, 20*time.Millisecond, func() bool {
		i, ok := c.agreedLeader()
		leader = i
		return ok
	}, "no leader known to every running member within 20s")
	return leader
}

func (c *Cluster) agreedLeader() (int, bool) {
	leader := -1
	for i, h := range c.Nodes {
		if h != nil && h.J.IsLeader() {
			leader = i
		}
	}
	if leader < 0 {
		return -1, false
	}
	for _, h := range c.Nodes {
		if h != nil && h.J.KnownLeader() != c.Configs[leader].NodeID {
			return -1, false
		}
	}
	return leader, true
}

// StartHarness starts one journal of a cluster whose credentials are in
// credDir, without a testing.TB (it may run on another goroutine).
func StartHarness(cfg journal.Config, credDir string) (*Harness, error) {
	j, err := journal.NewContext(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := j.Start(ctx); err != nil {
		_ = j.Close()
		return nil, err
	}
	h := &Harness{J: j, Cfg: cfg, Dir: credDir, Addr: j.Addr()}
	if h.Roots, _, err = pki.LoadCertPool(filepath.Join(credDir, ca.RootCertFile)); err != nil {
		return nil, err
	}
	if h.Admin, err = tls.LoadX509KeyPair(filepath.Join(credDir, ca.AdminCertFile), filepath.Join(credDir, ca.AdminKeyFile)); err != nil {
		return nil, err
	}
	return h, nil
}
