package journaltest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"io"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Intermediate is a journal intermediate a test makes from the domain root
// in rootDir: it stands for an intermediate key an attacker read out of a
// journal's memory (or kept from a removed journal), a valid chain to the
// root in the wrong hands.
type Intermediate struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// JournalCA signed Cert (nil: the root did).
	JournalCA *x509.Certificate
}

// NewIntermediate signs a fresh intermediate with the root in rootDir.
func NewIntermediate(t testing.TB, rootDir string) Intermediate {
	t.Helper()
	auth, err := ca.LoadKeyFileAuthority(filepath.Join(rootDir, ca.RootCertFile), filepath.Join(rootDir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	domain, err := ca.DomainOf(auth.Root())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := pki.NewSerial()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "test intermediate"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
		URIs: []*url.URL{{Scheme: "spiffe", Host: domain}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, auth.Root(), key.Public(), auth.Signer())
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return Intermediate{Cert: cert, Key: key}
}

// NewIntermediateUnder signs a fresh intermediate with the journal CA of
// the journal cfg configures (its certificate and key files, as
// JournalCA made them): an intermediate key read out of that journal's
// memory, under the journal CA Raft binds it to.
func NewIntermediateUnder(t testing.TB, cfg journal.Config) Intermediate {
	t.Helper()
	data, err := os.ReadFile(cfg.JournalCACertFile)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pki.ParseCertsPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := keystore.Parse(cfg.JournalCAKey)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := keystore.Open(spec, keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer signer.Close()
	_, domain, _ := caprofile.JournalOf(certs[0])
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := pki.NewSerial()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "test intermediate"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
		URIs: []*url.URL{{Scheme: "spiffe", Host: domain}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, certs[0], key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return Intermediate{Cert: cert, Key: key, JournalCA: certs[0]}
}

// JournalCert mints a journal certificate naming journal id of domain.
func (in Intermediate) JournalCert(t testing.TB, id, domain string) *tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ident := pki.Identity{Kind: pki.KindJournal, Name: id, Domain: domain}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: ident.CommonName()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:        []*url.URL{ident.SPIFFEID()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, in.Cert, key.Public(), in.Key)
	if err != nil {
		t.Fatal(err)
	}
	chain := [][]byte{der, in.Cert.Raw}
	if in.JournalCA != nil {
		chain = append(chain, in.JournalCA.Raw)
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key}
}

// Record is the intermediate as Raft records it for journal id.
func (in Intermediate) Record(id string) *pactv1.Intermediate {
	r := &pactv1.Intermediate{JournalId: id, Serial: pki.SerialHex(in.Cert.SerialNumber), Der: in.Cert.Raw, NotAfterUnix: in.Cert.NotAfter.Unix()}
	if in.JournalCA != nil {
		r.IssuerSerial = pki.SerialHex(in.JournalCA.SerialNumber)
	}
	return r
}

// RaftHello dials a journal's Raft port with cert, says the quorum hello
// for a Raft connection as quorum, and returns the reply, or the error
// that ended the exchange (a certificate refused in the handshake arrives
// as an alert on the first read).
func RaftHello(t testing.TB, addr string, cert *tls.Certificate, quorum string) (*pactv1.QuorumHelloReply, error) {
	t.Helper()
	return RaftHelloKind(t, addr, cert, quorum, pactv1.QuorumHelloKind_QUORUM_HELLO_KIND_RAFT)
}

// RaftHelloKind is RaftHello with another kind of hello (a probe, as an
// empty journal sends before it bootstraps).
func RaftHelloKind(t testing.TB, addr string, cert *tls.Certificate, quorum string, kind pactv1.QuorumHelloKind) (*pactv1.QuorumHelloReply, error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: []string{"pact-raft/2"}, Certificates: []tls.Certificate{*cert}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if c.ConnectionState().NegotiatedProtocol != "pact-raft/2" {
		t.Fatalf("the Raft port at %s did not negotiate pact-raft/2", addr)
	}
	// As a journal of this release says it.
	b, _ := proto.Marshal(&pactv1.QuorumHello{QuorumId: quorum, Kind: kind, FeatureLevel: raftfsm.FeatureLevel})
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c, msg); err != nil {
		return nil, err
	}
	var reply pactv1.QuorumHelloReply
	if err := proto.Unmarshal(msg, &reply); err != nil {
		t.Fatal(err)
	}
	return &reply, nil
}
