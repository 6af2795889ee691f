package journal_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Only journals of the domain may speak Raft: the TLS stream layer refuses
// agents, operators and certificates of another CA at the handshake.
func TestRaftPortRefusesAllButJournals(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.RaftListen = journaltest.FreeAddr(t)
	cfg.InitialCluster = []journal.Peer{{ID: cfg.NodeID, RaftAddr: cfg.RaftListen}}
	h := journaltest.Start(t, cfg)
	h.Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := h.Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	agent := key.TLSCert(resp.GetCertChainDer())

	// A second journal of the same domain, made with the real CA code.
	auth, err := ca.LoadKeyFileAuthority(filepath.Join(h.Dir, ca.RootCertFile), filepath.Join(h.Dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caCfg := ca.DefaultConfig()
	caCfg.Upstream, caCfg.JournalID = auth, "j9"
	peerCA, err := ca.New(caCfg)
	if err != nil {
		t.Fatal(err)
	}
	caCfg.JournalID = cfg.NodeID
	memberCA, err := ca.New(caCfg)
	if err != nil {
		t.Fatal(err)
	}

	qid := quorumStatus(t, h).GetQuorumId()
	tests := []struct {
		name   string
		cert   *tls.Certificate
		accept bool
	}{
		// A journal of the domain that is not a member of this quorum:
		// peer rights come with membership (TestPeerBinding has members).
		{"journal of the domain, not a member", peerCA.ServerCertificate(), false},
		// The member's own id from an intermediate not (yet) in Raft,
		// under the journal CA Raft binds it to, as for its fresh re-key.
		{"journal of the domain and a member, under its journal CA", journaltest.NewIntermediateUnder(t, cfg).JournalCert(t, cfg.NodeID, "pact.local"), true},
		// The member's own id from an intermediate the root signed: it is
		// bound to a journal CA, so no peer (issue 36).
		{"journal of the domain and a member, the root's intermediate", memberCA.ServerCertificate(), false},
		{"agent certificate", &agent, false},
		{"operator certificate", &h.Admin, false},
		{"foreign CA", foreignJournalCert(t), false},
		{"no certificate", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
			if tt.cert != nil {
				cc.Certificates = []tls.Certificate{*tt.cert}
			}
			// The handshake verifies the chain; Raft's records are checked
			// after the quorum hello, and a refusal is its answer.
			cert := tt.cert
			if cert == nil {
				cert = &tls.Certificate{}
			}
			reply, err := journaltest.RaftHello(t, cfg.RaftListen, cert, qid)
			accepted := err == nil && reply.GetRefused() == ""
			if accepted != tt.accept {
				t.Errorf("accepted = %v (%v %v), want %v", accepted, err, reply, tt.accept)
			}
		})
	}
	// The journal peer service is likewise closed to operators.
	_, err = pactv1.NewJournalPeerServiceClient(h.Dial(t, &h.Admin)).ReadIndex(context.Background(), &pactv1.ReadIndexRequest{})
	if err == nil {
		t.Error("an operator certificate called the journal peer service")
	}
}

func foreignJournalCert(t *testing.T) *tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse("spiffe://pact.local/pact-journal/j1")
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "pact-journal/j1@pact.local"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:        []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
