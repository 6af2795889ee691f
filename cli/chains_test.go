package cli

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The CLI reaches a journal whose certificate comes [server, intermediate,
// journal CA] under either root of a --ca file holding two (a rollover),
// with an operator credential signed by a root or issued online ([op,
// intermediate, journal CA] in --cert); it refuses a journal under a root
// not in --ca and a name outside the journal CA's constraints.
func TestCLIChainsThroughJournalCAs(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keyPEM := func(l *chaintest.Leaf) []byte {
		t.Helper()
		der, err := x509.MarshalPKCS8PrivateKey(l.Key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	loop := chaintest.Names{DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	root, root2 := chaintest.NewRoot(testDomain), chaintest.NewRoot(testDomain)
	jca := root2.JournalCA("j1", loop)
	inter := jca.Intermediate("j1", loop)
	bothRoots := write("ca.pem", pki.EncodeCertsPEM(root.Cert.Raw, root2.Cert.Raw))
	firstRoot := write("ca1.pem", pki.EncodeCertsPEM(root.Cert.Raw))

	serve := func(server *chaintest.Leaf) string {
		t.Helper()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{server.TLS()},
			ClientCAs:    chaintest.Pool(root.Cert, root2.Cert),
			ClientAuth:   tls.RequireAndVerifyClientCert,
		})))
		pactv1.RegisterAdminServiceServer(srv, newFakeJournal())
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	good := serve(inter.Server("j1", loop))
	outside := serve(jca.UnconstrainedIntermediate("j1").Server("j1", chaintest.Names{DNS: []string{"evil.example"}, IPs: loop.IPs}))
	// A node's certificate that chains to the domain and names the
	// journal's address is no journal: only its SPIFFE ID tells.
	nodeID := pki.Identity{Kind: pki.KindAgent, Name: "n1", Domain: testDomain}
	node := serve(inter.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeID.CommonName()},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    loop.DNS,
		IPAddresses: loop.IPs,
		URIs:        []*url.URL{nodeID.SPIFFEID()},
	}))

	ceremonyOp := root.Operator("alice", pki.RolePlatformAdmin) // [op] -> first root
	onlineOp := inter.Operator("bob", pki.RoleViewer)           // [op, intermediate, journal CA] -> second root
	for _, tc := range []struct {
		name string
		addr string
		ca   string
		op   *chaintest.Leaf
		want int
		says string
	}{
		{"root-signed operator, journal under the second root", good, bothRoots, ceremonyOp, ExitOK, ""},
		{"operator issued online, under the second root", good, bothRoots, onlineOp, ExitOK, ""},
		{"--ca without the journal's root", good, firstRoot, ceremonyOp, ExitUsage, "no root in --ca " + firstRoot + " signed"},
		{"journal name outside its journal CA's", outside, bothRoots, ceremonyOp, ExitUnavailable, "not authorized to sign for this name"},
		{"a node's certificate for the journal's address", node, bothRoots, ceremonyOp, ExitUnavailable,
			"the server is not a journal: its certificate verifies against the domain roots but carries spiffe://" + testDomain + "/pact-agent/n1, not spiffe://" + testDomain + "/pact-journal/ID"},
		{"a node's certificate for the journal's address: the advice", node, bothRoots, ceremonyOp, ExitUnavailable,
			"answered with a certificate of the domain that is not a journal's: check that --journal (or PACT_JOURNAL) names journals, not nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := keyPEM(tc.op)
			name := pki.SerialHex(tc.op.Cert.SerialNumber)
			certFile := write(name+".pem", tc.op.PEM())
			keyFile := write(name+"-key.pem", key)
			code, _, stderr := runEnv(t, nil, runOpts{key: key}, "--journal", tc.addr, "--ca", tc.ca, "--cert", certFile, "--key", keyFile, "node", "list")
			if code != tc.want || !strings.Contains(stderr, tc.says) {
				t.Fatalf("exit %d, stderr %q; want %d saying %q", code, stderr, tc.want, tc.says)
			}
		})
	}
}
