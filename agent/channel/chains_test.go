package channel_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/chaintest"
)

// The journal trust bundle holds roots, journal CAs and intermediates: the
// channel takes its roots (self-signed) as anchors, and never a journal CA.
func TestClientTLSConfigJournalCAsAreNotRoots(t *testing.T) {
	root, root2 := chaintest.NewRoot("site.example"), chaintest.NewRoot("site.example")
	jca := root2.JournalCA("j1", chaintest.Names{})
	inter := jca.Intermediate("j1", chaintest.Names{})
	id := &identity.Identity{Source: identity.SourceJournal, Bundle: []*x509.Certificate{root.Cert, root2.Cert, jca.Cert, inter.Cert}}
	got := channel.ClientTLSConfig([]*x509.Certificate{root.Cert}, id, time.Now).RootCAs
	if !got.Equal(chaintest.Pool(root.Cert, root2.Cert)) {
		t.Error("RootCAs is not exactly the configured root and the bundle's two roots")
	}
}

// A journal's server chain [server, intermediate, journal CA] verifies
// under either root of a rollover, from --ca-file or from the bundle; the
// journal CA must be sent (the bundle's is no anchor); and a name outside
// the journal CA's constraints fails, whatever the intermediate says.
func TestClientTLSConfigVerifiesJournalCAChains(t *testing.T) {
	loop := chaintest.Names{DNS: []string{"j1.site.example"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	root, root2 := chaintest.NewRoot("site.example"), chaintest.NewRoot("site.example")
	jca := root2.JournalCA("j1", loop)
	inter := jca.Intermediate("j1", loop)
	server := inter.Server("j1", loop)
	withBundle := &identity.Identity{Source: identity.SourceJournal, Bundle: []*x509.Certificate{root2.Cert, jca.Cert, inter.Cert}}
	withJCAOnly := &identity.Identity{Source: identity.SourceJournal, Bundle: []*x509.Certificate{jca.Cert, inter.Cert}}
	bare := server.TLS()
	bare.Certificate = bare.Certificate[:2] // no journal CA sent
	outside := jca.UnconstrainedIntermediate("j1").Server("j1", chaintest.Names{DNS: []string{"evil.example"}, IPs: loop.IPs})
	for _, tc := range []struct {
		name   string
		served tls.Certificate
		roots  []*x509.Certificate
		id     *identity.Identity
		ok     bool
	}{
		{"both roots in --ca-file", server.TLS(), []*x509.Certificate{root.Cert, root2.Cert}, nil, true},
		{"the second root from the bundle", server.TLS(), []*x509.Certificate{root.Cert}, withBundle, true},
		{"root not trusted", server.TLS(), []*x509.Certificate{root.Cert}, nil, false},
		{"journal CA only in the bundle, not sent", bare, []*x509.Certificate{root.Cert}, withJCAOnly, false},
		{"journal CA in the bundle is no root", server.TLS(), []*x509.Certificate{root.Cert}, withJCAOnly, false},
		{"a name outside the journal CA's", outside.TLS(), []*x509.Certificate{root2.Cert}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.id != nil {
				client := root.Agent("n1") // any client certificate: the server asks none
				tc.id.Chain, tc.id.Key = client.Chain, client.Key
			}
			err := handshake(t, tc.served, channel.ClientTLSConfig(tc.roots, tc.id, time.Now))
			if (err == nil) != tc.ok {
				t.Fatalf("handshake: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// handshake runs a TLS handshake with a loopback server presenting served.
func handshake(t *testing.T, served tls.Certificate, client *tls.Config) error {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{served}})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		_ = c.(*tls.Conn).Handshake()
		c.Close()
	}()
	c, err := tls.Dial("tcp", lis.Addr().String(), client)
	if err != nil {
		return err
	}
	return c.Close()
}
