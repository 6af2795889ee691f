package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

const testDomain = "test.pact"

// testPKI is a domain root made in code, a journal server certificate and
// admin credentials, written as PEM files to a temp dir.
type testPKI struct {
	t       *testing.T
	dir     string
	root    *x509.Certificate
	rootKey *ecdsa.PrivateKey
	pool    *x509.CertPool
	server  tls.Certificate

	caFile string
	admin  credFiles // platform-admin "alice"
}

// credFiles is an admin credential on disk.
type credFiles struct {
	certFile, keyFile string
	cert              *x509.Certificate
	keyPEM            []byte // to check it never reaches the output
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{t: t, dir: t.TempDir()}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "pact test root"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: testDomain}},
	}
	p.root, p.rootKey = sign(t, tmpl, nil, key, nil), key
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.root)
	p.caFile = p.write("ca.pem", pki.EncodeCertsPEM(p.root.Raw))

	skey := newKey(t)
	srv := sign(t, &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "pact-journal/j1@" + testDomain},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}, p.root, skey, p.rootKey)
	p.server = tls.Certificate{Certificate: [][]byte{srv.Raw}, PrivateKey: skey, Leaf: srv}

	p.admin = p.issueAdmin("admin", "alice", pki.RolePlatformAdmin, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	return p
}

// issueAdmin writes {prefix}.pem and {prefix}-key.pem for an operator.
func (p *testPKI) issueAdmin(prefix, name, role string, notBefore, notAfter time.Time) credFiles {
	t := p.t
	t.Helper()
	key := newKey(t)
	id := pki.Identity{Kind: pki.KindAdmin, Name: name, Domain: testDomain}
	cert := sign(t, &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: id.CommonName(), OrganizationalUnit: []string{role}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.SPIFFEID()},
	}, p.root, key, p.rootKey)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	return credFiles{
		certFile: p.write(prefix+".pem", pki.EncodeCertsPEM(cert.Raw)),
		keyFile:  p.write(prefix+"-key.pem", keyPEM),
		cert:     cert,
		keyPEM:   keyPEM,
	}
}

func (p *testPKI) write(name string, data []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// flags are the global flags for the default admin and the given journals.
func (p *testPKI) flags(addrs ...string) []string {
	return p.flagsFor(p.admin, addrs...)
}

func (p *testPKI) flagsFor(c credFiles, addrs ...string) []string {
	return []string{"--journal", strings.Join(addrs, ","), "--ca", p.caFile, "--cert", c.certFile, "--key", c.keyFile}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := pki.NewSerial()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sign creates tmpl for key, signed by parent/parentKey (self-signed when
// parent is nil).
func sign(t *testing.T, tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeAdmin is an in-memory AdminService. It records every call and the
// client certificate it saw; fail, when set, is returned by every call.
type fakeAdmin struct {
	pactv1.UnimplementedAdminServiceServer

	mu        sync.Mutex
	nodes     map[string]*pactv1.Node
	calls     []string
	peers     []*x509.Certificate
	lastState pactv1.NodeState
	fail      error
}

var fakeNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func newFakeAdmin() *fakeAdmin { return &fakeAdmin{nodes: map[string]*pactv1.Node{}} }

func (f *fakeAdmin) record(ctx context.Context, method string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method)
	who := ""
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			leaf := info.State.PeerCertificates[0]
			f.peers = append(f.peers, leaf)
			if id, err := pki.IdentityOf(leaf); err == nil {
				who = id.Name
			}
		}
	}
	return who, f.fail
}

func (f *fakeAdmin) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func (f *fakeAdmin) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeAdmin) put(n *pactv1.Node) {
	f.mu.Lock()
	f.nodes[n.GetNodeId()] = n
	f.mu.Unlock()
}

func (f *fakeAdmin) RegisterNode(ctx context.Context, req *pactv1.RegisterNodeRequest) (*pactv1.RegisterNodeResponse, error) {
	who, err := f.record(ctx, "RegisterNode")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.nodes[req.GetNodeId()]; ok {
		return nil, apierr.Status(apierr.NodeAlreadyEnrolled, 0, "node "+req.GetNodeId()+" is already registered").Err()
	}
	for _, n := range f.nodes {
		for _, m := range n.GetHardware().GetMacs() {
			for _, rm := range req.GetHardware().GetMacs() {
				if m == rm {
					return nil, apierr.Status(apierr.HardwareIdentityConflict, 0, "MAC "+m+" belongs to "+n.GetNodeId()).Err()
				}
			}
		}
	}
	n := &pactv1.Node{
		NodeId:               req.GetNodeId(),
		Hardware:             req.GetHardware(),
		State:                pactv1.NodeState_NODE_STATE_REGISTERED,
		Vcluster:             req.GetVcluster(),
		RegisteredAtUnixNano: fakeNow.UnixNano(),
		RegisteredBy:         who,
		UpdatedAtUnixNano:    fakeNow.UnixNano(),
	}
	f.nodes[n.NodeId] = n
	return &pactv1.RegisterNodeResponse{Node: n}, nil
}

func (f *fakeAdmin) ListNodes(ctx context.Context, req *pactv1.ListNodesRequest) (*pactv1.ListNodesResponse, error) {
	if _, err := f.record(ctx, "ListNodes"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastState = req.GetState()
	out := &pactv1.ListNodesResponse{}
	for _, n := range f.nodes { // map order: the CLI must sort
		if req.GetState() == pactv1.NodeState_NODE_STATE_UNSPECIFIED || n.GetState() == req.GetState() {
			out.Nodes = append(out.Nodes, n)
		}
	}
	return out, nil
}

func (f *fakeAdmin) InspectNode(ctx context.Context, req *pactv1.InspectNodeRequest) (*pactv1.InspectNodeResponse, error) {
	if _, err := f.record(ctx, "InspectNode"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[req.GetNodeId()]
	if !ok {
		return nil, apierr.Status(apierr.NodeNotEnrolled, 0, "node "+req.GetNodeId()+" is not in the registry").Err()
	}
	return &pactv1.InspectNodeResponse{Node: n}, nil
}

// startJournal serves fake over mTLS on loopback, requiring a client
// certificate from the test root, and returns its address.
func startJournal(t *testing.T, p *testPKI, fake *fakeAdmin) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{p.server},
		ClientCAs:    p.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	})))
	pactv1.RegisterAdminServiceServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// clearEnv hides the developer's own PACT_* variables from a test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{EnvJournal, EnvCA, EnvCert, EnvKey} {
		t.Setenv(k, "")
	}
}

// runCLI runs Main with captured output, and fails the test if any key
// material of p's credentials reached either stream.
func runCLI(t *testing.T, p *testPKI, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	stdout, stderr = out.String(), errb.String()
	if p != nil {
		assertNoKeyMaterial(t, stdout+stderr, p.admin.keyPEM)
	}
	return code, stdout, stderr
}

func assertNoKeyMaterial(t *testing.T, output string, keyPEM []byte) {
	t.Helper()
	if strings.Contains(output, "PRIVATE KEY") {
		t.Errorf("output mentions a PEM private key:\n%s", output)
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return
	}
	body := strings.Split(strings.TrimSpace(string(keyPEM)), "\n")
	for _, line := range body[1 : len(body)-1] {
		if len(line) >= 16 && strings.Contains(output, line[:16]) {
			t.Errorf("output contains key material %q", line[:16])
		}
	}
}
