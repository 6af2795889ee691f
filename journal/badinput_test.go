package journal_test

// The bad-input suite: hostile or broken CSRs, hardware identities and
// credentials. Each is refused with a typed error, returns no certificate and
// changes neither the registry nor the audit trail.

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/google/go-tpm/tpm2"

	agenttpm "github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/cli"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/internal/tpmattest"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

var (
	oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtKeyUsage      = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidECDSAWithSHA1    = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 1}
	oidServerAuth       = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
)

func p256(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// makeCSR signs tmpl with key.
func makeCSR(t testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assembleCSR builds a CertificationRequest from its three parts, for
// signatures crypto/x509 will not make.
func assembleCSR(t testing.TB, tbs []byte, alg asn1.ObjectIdentifier, sig []byte) []byte {
	t.Helper()
	return mustMarshal(t, struct {
		TBS asn1.RawValue
		Alg pkix.AlgorithmIdentifier
		Sig asn1.BitString
	}{asn1.RawValue{FullBytes: tbs}, pkix.AlgorithmIdentifier{Algorithm: alg}, asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}})
}

// badCSRs are requests the CA must refuse, each built to be wrong in
// exactly one way.
var badCSRs = []struct {
	name string
	make func(testing.TB) []byte
}{
	{"DNS SAN", func(t testing.TB) []byte {
		return makeCSR(t, p256(t), &x509.CertificateRequest{DNSNames: []string{"login1.example.org"}})
	}},
	{"IP SAN", func(t testing.TB) []byte {
		return makeCSR(t, p256(t), &x509.CertificateRequest{IPAddresses: []net.IP{net.IPv4(10, 0, 0, 1)}})
	}},
	{"URI SAN naming another node", func(t testing.TB) []byte {
		id := pki.Identity{Kind: pki.KindAgent, Name: "other", Domain: "pact.local"}
		return makeCSR(t, p256(t), &x509.CertificateRequest{URIs: []*url.URL{id.SPIFFEID()}})
	}},
	{"basicConstraints CA:TRUE", func(t testing.TB) []byte {
		bc := mustMarshal(t, struct{ IsCA bool }{true})
		return makeCSR(t, p256(t), &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{{Id: oidBasicConstraints, Critical: true, Value: bc}}})
	}},
	{"keyUsage keyCertSign", func(t testing.TB) []byte {
		ku := mustMarshal(t, asn1.BitString{Bytes: []byte{0x04}, BitLength: 6})
		return makeCSR(t, p256(t), &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{{Id: oidKeyUsage, Critical: true, Value: ku}}})
	}},
	{"extKeyUsage serverAuth", func(t testing.TB) []byte {
		eku := mustMarshal(t, []asn1.ObjectIdentifier{oidServerAuth})
		return makeCSR(t, p256(t), &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{{Id: oidExtKeyUsage, Value: eku}}})
	}},
	{"RSA-1024 key", func(t testing.TB) []byte { return rsaCSR(t, 1024) }},
	{"RSA-2048 key", func(t testing.TB) []byte { return rsaCSR(t, 2048) }},
	{"P-224 key", func(t testing.TB) []byte {
		k, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return makeCSR(t, k, &x509.CertificateRequest{})
	}},
	{"ECDSA P-256 signed with SHA-1", func(t testing.TB) []byte {
		k := p256(t)
		req, err := x509.ParseCertificateRequest(makeCSR(t, k, &x509.CertificateRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(req.RawTBSCertificateRequest)
		sig, err := ecdsa.SignASN1(rand.Reader, k, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		der := assembleCSR(t, req.RawTBSCertificateRequest, oidECDSAWithSHA1, sig)
		// It is a well-formed, correctly signed SHA-1 request: only the
		// algorithm is wrong.
		got, err := x509.ParseCertificateRequest(der)
		if err != nil || got.SignatureAlgorithm != x509.ECDSAWithSHA1 || !ecdsa.VerifyASN1(&k.PublicKey, sum[:], got.Signature) {
			t.Fatalf("built a bad SHA-1 CSR: %v, algorithm %v", err, got.SignatureAlgorithm)
		}
		return der
	}},
	{"corrupted signature", func(t testing.TB) []byte {
		k := p256(t)
		req, err := x509.ParseCertificateRequest(makeCSR(t, k, &x509.CertificateRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		// Replace the signature by a well-formed one over other data.
		other := []byte("not this request")
		sig, err := ecdsa.SignASN1(rand.Reader, k, other)
		if err != nil {
			t.Fatal(err)
		}
		der := assembleCSR(t, req.RawTBSCertificateRequest, asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}, sig)
		got, err := x509.ParseCertificateRequest(der)
		if err != nil || got.SignatureAlgorithm != x509.ECDSAWithSHA256 || got.CheckSignature() == nil {
			t.Fatalf("built a bad corrupted CSR: %v", err)
		}
		return der
	}},
	{"flipped signature bit", func(t testing.TB) []byte {
		der := makeCSR(t, p256(t), &x509.CertificateRequest{})
		der[len(der)-1] ^= 0x01 // the last byte of the signature's s
		return der
	}},
	{"oversized (10 KiB)", func(t testing.TB) []byte {
		var orgs []string
		for i := range 10 {
			orgs = append(orgs, fmt.Sprintf("%d%s", i, strings.Repeat("x", 1000)))
		}
		der := makeCSR(t, p256(t), &x509.CertificateRequest{Subject: pkix.Name{Organization: orgs}})
		if len(der) <= ca.MaxCSRBytes || len(der) > 60<<10 {
			t.Fatalf("oversized CSR is %d bytes, want more than %d and within gRPC's 64 KiB", len(der), ca.MaxCSRBytes)
		}
		return der
	}},
	{"truncated", func(t testing.TB) []byte {
		der := makeCSR(t, p256(t), &x509.CertificateRequest{})
		return der[:len(der)/2]
	}},
	{"trailing garbage", func(t testing.TB) []byte {
		return append(makeCSR(t, p256(t), &x509.CertificateRequest{}), 0, 0)
	}},
	{"a certificate, not a request", func(t testing.TB) []byte {
		k := p256(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}},
	{"empty", func(testing.TB) []byte { return nil }},
}

func rsaCSR(t testing.TB, bits int) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return makeCSR(t, k, &x509.CertificateRequest{})
}

// TestBadCSR sends every bad CSR to Enroll (a registered node) and to
// RenewCert (an active node): INVALID_CSR, nothing written, nothing signed.
func TestBadCSR(t *testing.T) {
	e := newEnv(t)
	e.register(t, "n1", "SN1", mac1)
	a := e.activate(t, "n2", "SN2", mac2)
	renewer := e.agentClient(t, a)
	for _, c := range badCSRs {
		csr := c.make(t)
		t.Run("Enroll/"+c.name, func(t *testing.T) {
			before := e.registry(t)
			resp, err := e.enroll(t, journaltest.Key{CSR: csr}, "SN1", mac1)
			e.refused(t, before, resp, err, codes.InvalidArgument, apierr.InvalidCSR)
		})
		t.Run("RenewCert/"+c.name, func(t *testing.T) {
			before := e.registry(t)
			resp, err := renewer.RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: csr})
			e.refused(t, before, resp, err, codes.InvalidArgument, apierr.InvalidCSR)
		})
	}
	// The node enrolls with a good CSR after all that, and n2's
	// certificate is still its current one.
	e.enrollNew(t, "n1", "SN1", mac1)
	if _, err := e.renew(t, a); err != nil {
		t.Errorf("renew with a good CSR: %v", err)
	}
}

// The keys the CA does take, so the refusals above are about the CSRs.
func TestAcceptedCSRKeys(t *testing.T) {
	e := newEnv(t)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []crypto.Signer{p256(t), p384, ed} {
		t.Run(fmt.Sprintf("%T", k.Public()), func(t *testing.T) {
			node := fmt.Sprintf("n%d", i)
			e.register(t, node, "", mac(0x600+i))
			key := journaltest.Key{Signer: k, CSR: makeCSR(t, k, &x509.CertificateRequest{})}
			resp, err := e.enroll(t, key, "", mac(0x600+i))
			if err != nil {
				t.Fatalf("enroll: %v", err)
			}
			a := newAgent(node, key, resp.GetCertChainDer(), resp.GetSerial())
			e.subscribe(t, a).close(t, e)
		})
	}
}

func TestTooManyMACs(t *testing.T) {
	e := newEnv(t)
	e.register(t, "n1", "SN1", mac1)
	var sixtyFour []string
	for i := range 64 {
		sixtyFour = append(sixtyFour, mac(0x700+i))
	}
	sixtyFive := append(sixtyFour[:64:64], mac(0x7ff))
	t.Run("Enroll", func(t *testing.T) {
		before := e.registry(t)
		resp, err := e.enroll(t, journaltest.NewKey(t), "SN1", append([]string{mac1}, sixtyFour...)...)
		e.refused(t, before, resp, err, codes.InvalidArgument, apierr.InvalidArgument)
	})
	t.Run("RegisterNode", func(t *testing.T) {
		before := e.registry(t)
		_, err := e.admin.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "n2", Hardware: hw("", sixtyFive...)})
		e.refused(t, before, nil, err, codes.InvalidArgument, apierr.InvalidArgument)
	})
	t.Run("RegisterNodes row", func(t *testing.T) {
		before := e.registry(t)
		resp, err := e.admin.RegisterNodes(callCtx(t), &pactv1.RegisterNodesRequest{Nodes: []*pactv1.RegisterNodeRequest{
			{NodeId: "n2", Hardware: hw("", sixtyFour...)},
			{NodeId: "n3", Hardware: hw("", sixtyFive...)},
		}})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.GetResults()
		if len(r) != 2 || r[0].GetOutcome() != pactv1.RegisterOutcome_REGISTER_OUTCOME_OK || r[1].GetOutcome() != pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR || r[1].GetReason() != string(apierr.InvalidArgument) {
			t.Errorf("results %v, want 64 MACs registered and 65 refused INVALID_ARGUMENT", r)
		}
		if after := e.registry(t); len(after.nodes) != len(before.nodes)+1 || after.audit != before.audit+1 {
			t.Errorf("the batch added %d nodes and %d audit entries, want 1 and 1", len(after.nodes)-len(before.nodes), after.audit-before.audit)
		}
	})
	// 64 MACs are fine: n2 has them and enrolls.
	e.enrollNew(t, "n2", "", sixtyFour...)
}

// TestRenewRefusals presents certificates and serials RenewCert (and the
// stream) must not accept.
func TestRenewRefusals(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	b := e.activate(t, "n2", "SN2", mac2)
	stale := e.activate(t, "n3", "SN3", mac(0x803))
	if _, err := e.renew(t, stale); err != nil {
		t.Fatal(err)
	}
	revoked := e.activate(t, "n4", "SN4", mac(0x804))
	if _, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n4", Force: true}); err != nil {
		t.Fatal(err)
	}
	foreignAdmin, foreignAgent := foreignCredentials(t, "n1")
	selfSigned := selfSignedAgent(t, "n1")
	operator := e.h.Admin

	tests := []struct {
		name   string
		cert   *tls.Certificate
		serial string
		code   codes.Code
		reason apierr.Reason
	}{
		{"current_serial of another node", &a.cert, b.serial, codes.InvalidArgument, apierr.InvalidArgument},
		{"no current_serial", &a.cert, "", codes.InvalidArgument, apierr.InvalidArgument},
		{"stale certificate (renewed since)", &stale.cert, stale.serial, codes.PermissionDenied, apierr.StaleCertificate},
		{"revoked certificate", &revoked.cert, revoked.serial, codes.PermissionDenied, apierr.NodeRevoked},
		{"no client certificate", nil, a.serial, codes.Unauthenticated, apierr.Unauthenticated},
		{"operator certificate", &operator, a.serial, codes.PermissionDenied, apierr.PermissionDenied},
		// A chain to another root fails the TLS handshake itself: the
		// client sees Unavailable, with no pact reason.
		{"agent certificate from a foreign CA", &foreignAgent, a.serial, codes.Unavailable, ""},
		{"operator certificate from a foreign CA", &foreignAdmin, a.serial, codes.Unavailable, ""},
		{"self-signed certificate naming the node", &selfSigned, a.serial, codes.Unavailable, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			c := pactv1.NewEnrollmentServiceClient(e.h.Dial(t, tt.cert))
			resp, err := c.RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: tt.serial, CsrDer: journaltest.NewKey(t).CSR})
			e.refused(t, before, resp, err, tt.code, tt.reason)
			if tt.code == codes.Unavailable && !strings.Contains(fmt.Sprint(err), "bad certificate") {
				// The refusal reaches the client as the TLS alert, not as
				// a reset that would read like a journal that is down.
				t.Errorf("handshake refusal reads %v, want the bad_certificate alert", err)
			}
			if tt.reason == apierr.InvalidArgument {
				return // the stream takes no serial
			}
			e.refused(t, before, nil, e.subscribeErr(t, tt.cert), tt.code, tt.reason)
		})
	}
	// The refusals did not disturb the real agents.
	for _, ag := range []*agent{a, b} {
		if _, err := e.renew(t, ag); err != nil {
			t.Errorf("renew %s: %v", ag.node, err)
		}
	}
}

// TestExpiredCertificates advances the journal's clock past the agent
// certificate's not_after.
func TestExpiredCertificates(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	viewer := e.h.IssueAdmin(t, "val", "viewer") // valid for an hour
	notAfter := time.Unix(e.node(t, "n1").GetCert().GetNotAfterUnix(), 0)

	// A minute before not_after the certificate still works.
	e.tick(t, notAfter.Sub(e.fc.Now())-time.Minute)
	e.subscribe(t, a).close(t, e)
	e.tick(t, 2*time.Minute)

	tests := []struct {
		name string
		call func(t *testing.T) (certCarrier, error)
	}{
		{"RenewCert", func(t *testing.T) (certCarrier, error) {
			r, err := e.agentClient(t, a).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: journaltest.NewKey(t).CSR})
			return r, err
		}},
		{"Subscribe", func(t *testing.T) (certCarrier, error) {
			return nil, e.subscribeErr(t, &a.cert)
		}},
		{"an expired operator certificate", func(t *testing.T) (certCarrier, error) {
			_, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &viewer)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
			return nil, err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			resp, err := tt.call(t)
			e.refused(t, before, resp, err, codes.Unauthenticated, apierr.Unauthenticated)
		})
	}
	// The way back is a fresh enrollment.
	e.enrollNew(t, "n1", "SN1", mac1)
}

// foreignCredentials makes an operator credential and an agent certificate
// for node, both for domain pact.local but under another root.
func foreignCredentials(t testing.TB, node string) (admin, agent tls.Certificate) {
	t.Helper()
	dir := t.TempDir()
	if _, err := ca.InitDev(dir, "pact.local", time.Now()); err != nil {
		t.Fatal(err)
	}
	admin, err := tls.LoadX509KeyPair(filepath.Join(dir, ca.AdminCertFile), filepath.Join(dir, ca.AdminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	up, err := ca.LoadKeyFileAuthority(filepath.Join(dir, ca.RootCertFile), filepath.Join(dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg := ca.DefaultConfig()
	cfg.Upstream = up
	cfg.JournalID = "j1"
	foreign, err := ca.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	key := journaltest.NewKey(t)
	csr, err := ca.ParseCSR(key.CSR)
	if err != nil {
		t.Fatal(err)
	}
	issued, err := foreign.SignAgent(csr, node)
	if err != nil {
		t.Fatal(err)
	}
	return admin, tls.Certificate{Certificate: issued.ChainDER, PrivateKey: key.Signer}
}

// selfSignedAgent is a client certificate naming node that nobody issued.
func selfSignedAgent(t testing.TB, node string) tls.Certificate {
	t.Helper()
	k := p256(t)
	id := pki.Identity{Kind: pki.KindAgent, Name: node, Domain: "pact.local"}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(42),
		Subject:      pkix.Name{CommonName: id.CommonName()},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id.SPIFFEID()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
}

// ---------------------------------------------------------------------------
// Credentials on RPCs they may not call. The admin and peer RPCs are taken
// from the service descriptors, so an RPC added later is covered too.

// readRPCs are the admin RPCs every operator role may call.
var readRPCs = map[protoreflect.Name]bool{"ListNodes": true, "InspectNode": true, "ListAudit": true, "JournalStatus": true, "ListOperators": true, "ListIntermediates": true, "ListJoinTokens": true, "ListFederatedDomains": true}

// rpcRequests are requests that would change the registry if they got
// through; RPCs not listed get an empty request.
func rpcRequests() map[protoreflect.Name]proto.Message {
	row := &pactv1.RegisterNodeRequest{NodeId: "n9", Hardware: hw("", mac(0x909))}
	return map[protoreflect.Name]proto.Message{
		"RegisterNode":     row,
		"RegisterNodes":    &pactv1.RegisterNodesRequest{Nodes: []*pactv1.RegisterNodeRequest{row}},
		"ListNodes":        &pactv1.ListNodesRequest{},
		"InspectNode":      &pactv1.InspectNodeRequest{NodeId: "n1"},
		"DecommissionNode": &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true},
		"AssignNode":       &pactv1.AssignNodeRequest{NodeId: "free", Vcluster: "vc1"},
		"UnassignNode":     &pactv1.UnassignNodeRequest{NodeId: "n1"},
		"MoveNode":         &pactv1.MoveNodeRequest{NodeId: "n1", ToVcluster: "vc2"},
		"ListAudit":        &pactv1.ListAuditRequest{},
		"AddJournal":       &pactv1.AddJournalRequest{JournalId: "j9", RaftAddr: "127.0.0.1:1"},
		// Another operator's credential: only a platform-admin issues one.
		"IssueOperator":      &pactv1.IssueOperatorRequest{Name: "mallory", Role: "platform-admin", CsrDer: operatorCSR()},
		"RevokeOperator":     &pactv1.RevokeOperatorRequest{NameOrSerial: "admin"},
		"RetireIntermediate": &pactv1.RetireIntermediateRequest{Targets: []string{"j1"}, Now: true},
		"RevokeJournalCA":    &pactv1.RevokeJournalCARequest{Targets: []string{"j1"}, Reason: "test"},
		"RemoveJournal":      &pactv1.RemoveJournalRequest{JournalId: "j1"},
		"CreateJoinToken":    &pactv1.CreateJoinTokenRequest{NodeId: "n1"},
		"RevokeJoinTokens":   &pactv1.RevokeJoinTokensRequest{NodeId: "n1"},
		"FenceNode":          &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "test"},
		"UnfenceNode":        &pactv1.UnfenceNodeRequest{NodeId: "n1"},
	}
}

// rpcs lists the unary methods of a service.
func rpcs(t testing.TB, service protoreflect.FullName) []protoreflect.MethodDescriptor {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(service)
	if err != nil {
		t.Fatal(err)
	}
	ms := d.(protoreflect.ServiceDescriptor).Methods()
	var out []protoreflect.MethodDescriptor
	for i := range ms.Len() {
		m := ms.Get(i)
		if m.IsStreamingClient() || (m.IsStreamingServer() && m.Name() != "SaveSnapshot") {
			t.Fatalf("%s is a stream; extend this test", m.FullName())
		}
		out = append(out, m)
	}
	return out
}

func newMessage(t testing.TB, d protoreflect.MessageDescriptor) proto.Message {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

// invoke calls method m with cert.
func (e *env) invoke(t testing.TB, cert *tls.Certificate, m protoreflect.MethodDescriptor, req proto.Message) error {
	t.Helper()
	if req == nil {
		req = newMessage(t, m.Input())
	}
	method := fmt.Sprintf("/%s/%s", m.Parent().FullName(), m.Name())
	if m.IsStreamingServer() {
		// A server stream (SaveSnapshot): the refusal comes with the first
		// message.
		s, err := e.h.Dial(t, cert).NewStream(callCtx(t), &grpc.StreamDesc{ServerStreams: true}, method)
		if err != nil {
			return err
		}
		if err := s.SendMsg(req); err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		return s.RecvMsg(newMessage(t, m.Output()))
	}
	return e.h.Dial(t, cert).Invoke(callCtx(t), method, req, newMessage(t, m.Output()))
}

// credEnv is a registry with a node in vc1 (n1, active), one unassigned
// (free) and one in vc2 (in2), and credentials of every kind.
func credEnv(t *testing.T) (*env, map[string]*tls.Certificate) {
	t.Helper()
	e := newEnv(t)
	e.registerIn(t, "n1", "vc1", "SN1", mac1)
	a := e.enrollNew(t, "n1", "SN1", mac1)
	e.register(t, "free", "", mac2)
	e.registerIn(t, "in2", "vc2", "", mac(0x902))
	viewer := e.h.IssueAdmin(t, "val", "viewer")
	ops := e.h.IssueAdmin(t, "otto", "pact-ops-vc1")
	// Credentials signed offline are recorded at their first call; make
	// that call here, so the refusals below are measured against a
	// registry that no longer changes.
	for _, c := range []*tls.Certificate{&viewer, &ops} {
		if _, err := pactv1.NewAdminServiceClient(e.h.Dial(t, c)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	return e, map[string]*tls.Certificate{"agent": &a.cert, "viewer": &viewer, "pact-ops-vc1": &ops, "platform-admin": &e.h.Admin}
}

func TestAdminRPCsRefuseAgents(t *testing.T) {
	e, creds := credEnv(t)
	reqs := rpcRequests()
	for _, m := range rpcs(t, "pact.v1.AdminService") {
		t.Run(string(m.Name()), func(t *testing.T) {
			before := e.registry(t)
			err := e.invoke(t, creds["agent"], m, reqs[m.Name()])
			e.refused(t, before, nil, err, codes.PermissionDenied, apierr.PermissionDenied)
		})
	}
}

// Only journals speak the peer protocol: an agent or operator certificate
// cannot propose a command or read the journal's state through it.
func TestPeerRPCsRefuseAgentsAndOperators(t *testing.T) {
	e, creds := credEnv(t)
	cmd, err := raftfsm.Encode(&pactv1.Command{Actor: "admin/admin", AtUnixNano: e.now(), Op: &pactv1.Command_RegisterNode{RegisterNode: &pactv1.RegisterNodeOp{
		NodeId: "n9", Hardware: hw("", mac(0x909)),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	reqs := map[protoreflect.Name]proto.Message{"Propose": &pactv1.ProposeRequest{Command: cmd}}
	for _, who := range []string{"agent", "platform-admin"} {
		for _, m := range rpcs(t, "pact.v1.JournalPeerService") {
			t.Run(who+"/"+string(m.Name()), func(t *testing.T) {
				before := e.registry(t)
				err := e.invoke(t, creds[who], m, reqs[m.Name()])
				e.refused(t, before, nil, err, codes.Unauthenticated, apierr.Unauthenticated)
			})
		}
	}
}

func TestViewerMayOnlyRead(t *testing.T) {
	e, creds := credEnv(t)
	reqs := rpcRequests()
	for _, m := range rpcs(t, "pact.v1.AdminService") {
		t.Run(string(m.Name()), func(t *testing.T) {
			before := e.registry(t)
			err := e.invoke(t, creds["viewer"], m, reqs[m.Name()])
			switch {
			case !readRPCs[m.Name()]:
				e.refused(t, before, nil, err, codes.PermissionDenied, apierr.PermissionDenied)
			case m.Name() == "JournalStatus":
				// Readable by a viewer; its answer is another suite's.
			case err != nil:
				t.Errorf("a viewer may call %s: %v", m.Name(), err)
			}
		})
	}
}

// TestOpsRoleOutsideItsVCluster: pact-ops-vc1 may move nodes into and out of
// vc1 only (the allowed moves are in TestAssignmentRoles), and may not
// register, decommission or change the quorum.
func TestOpsRoleOutsideItsVCluster(t *testing.T) {
	e, creds := credEnv(t)
	opsConn := e.h.Dial(t, creds["pact-ops-vc1"])
	ops := pactv1.NewAdminServiceClient(opsConn)
	type opsCall struct {
		name string
		call func(context.Context) error
	}
	tests := []opsCall{
		{"assign an unassigned node into vc2", func(ctx context.Context) error {
			_, err := ops.AssignNode(ctx, &pactv1.AssignNodeRequest{NodeId: "free", Vcluster: "vc2"})
			return err
		}},
		{"move a vc1 node to vc2", func(ctx context.Context) error {
			_, err := ops.MoveNode(ctx, &pactv1.MoveNodeRequest{NodeId: "n1", ToVcluster: "vc2"})
			return err
		}},
		{"move a vc2 node to vc1", func(ctx context.Context) error {
			_, err := ops.MoveNode(ctx, &pactv1.MoveNodeRequest{NodeId: "in2", ToVcluster: "vc1"})
			return err
		}},
		{"move a vc2 node to vc2", func(ctx context.Context) error {
			_, err := ops.MoveNode(ctx, &pactv1.MoveNodeRequest{NodeId: "in2", ToVcluster: "vc2"})
			return err
		}},
		{"unassign a vc2 node", func(ctx context.Context) error {
			_, err := ops.UnassignNode(ctx, &pactv1.UnassignNodeRequest{NodeId: "in2"})
			return err
		}},
		{"assign a vc2 node into vc1", func(ctx context.Context) error {
			_, err := ops.AssignNode(ctx, &pactv1.AssignNodeRequest{NodeId: "in2", Vcluster: "vc1"})
			return err
		}},
	}
	reqs := rpcRequests()
	for _, m := range rpcs(t, "pact.v1.AdminService") {
		if readRPCs[m.Name()] || m.Name() == "AssignNode" || m.Name() == "UnassignNode" || m.Name() == "MoveNode" {
			continue
		}
		method := fmt.Sprintf("/%s/%s", m.Parent().FullName(), m.Name())
		req, resp := reqs[m.Name()], newMessage(t, m.Output())
		if req == nil {
			req = newMessage(t, m.Input())
		}
		tests = append(tests, opsCall{string(m.Name()), func(ctx context.Context) error {
			return opsConn.Invoke(ctx, method, req, resp)
		}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			err := tt.call(callCtx(t))
			e.refused(t, before, nil, err, codes.PermissionDenied, apierr.PermissionDenied)
		})
	}
}

func TestNoClientCertificate(t *testing.T) {
	e, _ := credEnv(t)
	reqs := rpcRequests()
	calls := map[string]func(t *testing.T) error{
		"RenewCert": func(t *testing.T) error {
			_, err := pactv1.NewEnrollmentServiceClient(e.h.Dial(t, nil)).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CsrDer: journaltest.NewKey(t).CSR})
			return err
		},
		"Subscribe": func(t *testing.T) error { return e.subscribeErr(t, nil) },
	}
	for _, m := range rpcs(t, "pact.v1.AdminService") {
		calls[string(m.Name())] = func(t *testing.T) error { return e.invoke(t, nil, m, reqs[m.Name()]) }
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			before := e.registry(t)
			e.refused(t, before, nil, call(t), codes.Unauthenticated, apierr.Unauthenticated)
		})
	}
}

// An open stream is re-checked on every wake-up. Once its certificate has
// expired the check must fail as a new call would (UNAUTHENTICATED);
// otherwise an agent whose certificate lapsed stays live, and keeps getting
// assignments, on a credential no journal accepts any more.
func TestOpenStreamEndsWhenItsCertificateExpires(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	w := e.subscribe(t, a)
	notAfter := time.Unix(e.node(t, "n1").GetCert().GetNotAfterUnix(), 0)
	e.tick(t, notAfter.Sub(e.fc.Now())-time.Minute)
	select {
	case <-w.done:
		t.Fatalf("the stream ended before its certificate expired: %v", w.err)
	default:
	}
	e.tick(t, 2*e.cfg.StreamRecheckInterval+time.Minute)
	_, _, err := w.end(t)
	wantErr(t, err, codes.Unauthenticated, apierr.Unauthenticated)
}

// tpmNode is a node registered with the EK hash of a real software TPM,
// and that TPM, ready to attest.
type tpmNode struct {
	id, bmc, mac string
	att          *agenttpm.Attestor
	key          journaltest.Key
}

func newTPMNode(t *testing.T, e *env, id, bmc, mac string) *tpmNode {
	t.Helper()
	att := startAttestor(t)
	h := hw(bmc, mac)
	h.TpmEkHash = att.EKHash()
	if _, err := e.admin.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: id, Hardware: h}); err != nil {
		t.Fatal(err)
	}
	return &tpmNode{id: id, bmc: bmc, mac: mac, att: att, key: journaltest.NewKey(t)}
}

// startAttestor starts a fresh software TPM and makes an AK in it.
func startAttestor(t *testing.T) *agenttpm.Attestor {
	t.Helper()
	sw := swtpmtest.Start(t)
	tr, err := agenttpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	att, err := agenttpm.NewAttestor(tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { att.Close() })
	return att
}

// request is round one as pact-agent sends it.
func (n *tpmNode) request() *pactv1.EnrollRequest {
	h := hw(n.bmc, n.mac)
	h.TpmEkHash = n.att.EKHash()
	return &pactv1.EnrollRequest{Hardware: h, CsrDer: n.key.CSR, Credentials: &pactv1.EnrollCredentials{Tpm: &pactv1.TpmAttestation{EkPublic: n.att.EKPublic(), AkPublic: n.att.AKPublic()}}}
}

func (e *env) enrollReq(t testing.TB, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, error) {
	t.Helper()
	return pactv1.NewEnrollmentServiceClient(e.h.Dial(t, nil)).Enroll(callCtx(t), req)
}

// challenge runs round one and returns the challenge.
func (n *tpmNode) challenge(t *testing.T, e *env) *pactv1.TpmChallenge {
	t.Helper()
	before := e.h.J.CommitIndex()
	resp, err := e.enrollReq(t, n.request())
	if err != nil {
		t.Fatalf("round one: %v", err)
	}
	if resp.GetTpmChallenge() == nil || len(resp.GetCertChainDer()) > 0 {
		t.Fatalf("round one answered %v, want a challenge and no certificate", resp)
	}
	if after := e.h.J.CommitIndex(); after != before {
		t.Fatalf("round one wrote to Raft: commit index %d -> %d", before, after)
	}
	return resp.GetTpmChallenge()
}

// answer is round two: the TPM activates the credential, the proof binds
// it to key's SPKI.
func (n *tpmNode) answer(t *testing.T, ch *pactv1.TpmChallenge, key journaltest.Key) *pactv1.EnrollRequest {
	t.Helper()
	secret, err := n.att.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
	if err != nil {
		t.Fatalf("activate: %v", err)
	}
	req := n.request()
	req.CsrDer = key.CSR
	req.Credentials.Tpm.ChallengeId = ch.GetChallengeId()
	req.Credentials.Tpm.Proof = tpmattest.Proof(secret, ch.GetChallengeId(), spkiHex(t, key.CSR))
	return req
}

func spkiHex(t testing.TB, csrDER []byte) string {
	t.Helper()
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		t.Fatal(err)
	}
	return pki.SPKIFingerprintRaw(csr.RawSubjectPublicKeyInfo)
}

// tweakAK re-encodes an AK public area with one attribute changed.
func tweakAK(t testing.TB, pub []byte, change func(*tpm2.TPMAObject)) []byte {
	t.Helper()
	p, err := tpm2.Unmarshal[tpm2.TPMTPublic](pub)
	if err != nil {
		t.Fatal(err)
	}
	change(&p.ObjectAttributes)
	return tpm2.Marshal(*p)
}

// TestTPMRefusals: a node registered with a TPM EK hash, against a real
// software TPM. Every way of failing the credential activation is refused
// with its own reason, returns no certificate, and writes nothing to Raft
// (registry, audit trail and commit index unchanged). The node still
// enrolls with the right TPM afterwards.
func TestTPMRefusals(t *testing.T) {
	e := newEnv(t)
	n := newTPMNode(t, e, "t1", "SN-T1", mac1)
	// Another machine's TPM, not registered.
	other := startAttestor(t)

	type refusal struct {
		name   string
		req    func(t *testing.T) *pactv1.EnrollRequest
		code   codes.Code
		reason apierr.Reason
		// exit is the exit status cli.ExitCode gives the refusal (by its
		// gRPC code). pact-agent, which is what meets these, exits 5 on
		// the final ones and starts over on the Aborted ones (docs/tpm.md,
		// agent.TestAgentTPMRefusals).
		exit int
	}
	refusals := []refusal{
		{"no TPM attestation", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials = nil
			return r
		}, codes.FailedPrecondition, apierr.TPMRequired, cli.ExitPrecondition},
		{"no TPM and no EK hash reported", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials, r.Hardware.TpmEkHash = nil, ""
			return r
		}, codes.FailedPrecondition, apierr.TPMRequired, cli.ExitPrecondition},
		{"another TPM's EK reporting the registered hash", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.EkPublic = other.EKPublic()
			return r
		}, codes.PermissionDenied, apierr.TPMEKMismatch, cli.ExitDenied},
		{"another TPM's EK and its hash", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.EkPublic, r.Hardware.TpmEkHash = other.EKPublic(), other.EKHash()
			return r
		}, codes.PermissionDenied, apierr.TPMEKMismatch, cli.ExitDenied},
		{"EK public area that is not a TPMT_PUBLIC", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.EkPublic = []byte("not a TPM structure")
			return r
		}, codes.PermissionDenied, apierr.TPMEKMismatch, cli.ExitDenied},
		{"the AK offered as EK", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.EkPublic = n.att.AKPublic()
			return r
		}, codes.PermissionDenied, apierr.TPMEKMismatch, cli.ExitDenied},
		{"AK not restricted", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.AkPublic = tweakAK(t, r.Credentials.Tpm.AkPublic, func(a *tpm2.TPMAObject) { a.Restricted = false })
			return r
		}, codes.InvalidArgument, apierr.TPMAKRefused, cli.ExitUsage},
		{"AK not fixedTPM", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.AkPublic = tweakAK(t, r.Credentials.Tpm.AkPublic, func(a *tpm2.TPMAObject) { a.FixedTPM = false })
			return r
		}, codes.InvalidArgument, apierr.TPMAKRefused, cli.ExitUsage},
		{"AK not fixedParent", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.AkPublic = tweakAK(t, r.Credentials.Tpm.AkPublic, func(a *tpm2.TPMAObject) { a.FixedParent = false })
			return r
		}, codes.InvalidArgument, apierr.TPMAKRefused, cli.ExitUsage},
		{"AK is a decryption key (the EK)", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.AkPublic = n.att.EKPublic()
			return r
		}, codes.InvalidArgument, apierr.TPMAKRefused, cli.ExitUsage},
		{"no AK", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.AkPublic = nil
			return r
		}, codes.InvalidArgument, apierr.TPMAKRefused, cli.ExitUsage},
		{"answer to a challenge never issued", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.ChallengeId, r.Credentials.Tpm.Proof = strings.Repeat("ab", 16), make([]byte, 32)
			return r
		}, codes.Aborted, apierr.TPMChallengeUnknown, cli.ExitConflict},
		{"malformed answer", func(t *testing.T) *pactv1.EnrollRequest {
			r := n.request()
			r.Credentials.Tpm.ChallengeId, r.Credentials.Tpm.Proof = "x", []byte{1}
			return r
		}, codes.PermissionDenied, apierr.TPMAttestationFailed, cli.ExitDenied},
		{"wrong proof", func(t *testing.T) *pactv1.EnrollRequest {
			ch := n.challenge(t, e)
			r := n.answer(t, ch, n.key)
			r.Credentials.Tpm.Proof[0] ^= 1
			return r
		}, codes.PermissionDenied, apierr.TPMAttestationFailed, cli.ExitDenied},
		{"answer with another CSR key than round one", func(t *testing.T) *pactv1.EnrollRequest {
			ch := n.challenge(t, e)
			return n.answer(t, ch, journaltest.NewKey(t))
		}, codes.PermissionDenied, apierr.TPMAttestationFailed, cli.ExitDenied},
		{"proof for round one's key sent with another CSR", func(t *testing.T) *pactv1.EnrollRequest {
			ch := n.challenge(t, e)
			r := n.answer(t, ch, n.key)
			r.CsrDer = journaltest.NewKey(t).CSR
			return r
		}, codes.PermissionDenied, apierr.TPMAttestationFailed, cli.ExitDenied},
		{"answer from another AK", func(t *testing.T) *pactv1.EnrollRequest {
			ch := n.challenge(t, e)
			r := n.answer(t, ch, n.key)
			r.Credentials.Tpm.AkPublic = other.AKPublic()
			return r
		}, codes.PermissionDenied, apierr.TPMAttestationFailed, cli.ExitDenied},
		{"replayed answer", func(t *testing.T) *pactv1.EnrollRequest {
			ch := n.challenge(t, e)
			r := n.answer(t, ch, n.key)
			bad := proto.Clone(r).(*pactv1.EnrollRequest)
			bad.Credentials.Tpm.Proof[0] ^= 1
			// The first try uses the challenge up, right or wrong.
			if _, err := e.enrollReq(t, bad); apierr.FromError(err).Reason != apierr.TPMAttestationFailed {
				t.Fatalf("first answer: %v, want TPM_ATTESTATION_FAILED", err)
			}
			return r
		}, codes.Aborted, apierr.TPMChallengeUnknown, cli.ExitConflict},
		{"late answer", func(t *testing.T) *pactv1.EnrollRequest {
			ch := n.challenge(t, e)
			r := n.answer(t, ch, n.key)
			e.fc.Advance(e.cfg.TPMChallenges.TTL + time.Millisecond)
			return r
		}, codes.Aborted, apierr.TPMChallengeExpired, cli.ExitConflict},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			req := c.req(t)
			before, idx := e.registry(t), e.h.J.CommitIndex()
			resp, err := e.enrollReq(t, req)
			e.refusedUnwritten(t, before, resp, err, c.code, c.reason)
			if got := cli.ExitCode(err); got != c.exit {
				t.Errorf("pact exits %d for it, want %d", got, c.exit)
			}
			if resp.GetTpmChallenge() != nil {
				t.Errorf("a refusal carried a challenge")
			}
			if after := e.h.J.CommitIndex(); after != idx {
				t.Errorf("the refusal wrote to Raft: commit index %d -> %d", idx, after)
			}
		})
	}

	// Someone who knows the registered EK's public key (it is public) but
	// not its TPM: the journal challenges the registered EK, and their own
	// TPM cannot activate the credential, so there is no proof to send.
	t.Run("another TPM cannot answer", func(t *testing.T) {
		r := n.request()
		r.Credentials.Tpm.AkPublic = other.AKPublic()
		resp, err := e.enrollReq(t, r)
		if err != nil || resp.GetTpmChallenge() == nil {
			t.Fatalf("round one: %v %v", resp, err)
		}
		if secret, err := other.Activate(resp.GetTpmChallenge().GetCredentialBlob(), resp.GetTpmChallenge().GetEncryptedSecret()); err == nil {
			t.Fatalf("a TPM without the registered EK activated the credential: %x", secret)
		}
	})

	// The right TPM, answering in time, enrolls; only that writes.
	ch := n.challenge(t, e)
	resp, err := e.enrollReq(t, n.answer(t, ch, n.key))
	if err != nil {
		t.Fatalf("enroll with the registered TPM: %v", err)
	}
	if len(resp.GetCertChainDer()) == 0 || resp.GetNodeId() != "t1" {
		t.Fatalf("enrolled %v, want t1's certificate", resp)
	}
	if got := e.node(t, "t1").GetState(); got != pactv1.NodeState_NODE_STATE_ACTIVE {
		t.Errorf("t1 is %v, want active", got)
	}
}

// ---------------------------------------------------------------------------
// Credentials beside the hardware match, fencing, one key per node: every
// refusal with its gRPC code, its reason, the exit status the pact CLI
// gives it (cli.ExitCode, docs/exit-codes.md), and no Raft write (the
// applied index, the registry and the audit trail are unchanged).

func TestCredentialRefusals(t *testing.T) {
	e := newEnv(t)
	e.registerWithToken(t, "tok", "SNT", mac(0xa01))
	e.registerWithToken(t, "other", "SNO", mac(0xa02))
	tok, _ := e.createToken(t, "tok", time.Hour)
	otherTok, _ := e.createToken(t, "other", time.Hour)
	revokedTok, revokedInfo := e.createToken(t, "tok", time.Hour)
	if _, err := e.admin.RevokeJoinTokens(callCtx(t), &pactv1.RevokeJoinTokensRequest{NodeId: "tok", Id: revokedInfo.GetId()}); err != nil {
		t.Fatal(err)
	}
	usedOn := e.registerWithToken(t, "used", "SNU", mac(0xa03))
	usedTok, _ := e.createToken(t, usedOn.GetNodeId(), time.Hour)
	if _, err := e.enrollToken(t, journaltest.NewKey(t), usedTok, "SNU", mac(0xa03)); err != nil {
		t.Fatal(err)
	}
	shortTok, _ := e.createToken(t, "tok", time.Minute)

	holder := e.activate(t, "holder", "SNH", mac(0xa04))
	renewer := e.activate(t, "renewer", "SNR", mac(0xa05))
	e.register(t, "fresh", "SNF", mac(0xa06))
	fenced := e.activate(t, "fenced", "SNX", mac(0xa07))
	if _, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "fenced", Reason: "INC-1"}); err != nil {
		t.Fatal(err)
	}
	gone := e.activate(t, "gone", "SNG", mac(0xa08))
	if _, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: gone.node, Force: true}); err != nil {
		t.Fatal(err)
	}
	e.tick(t, time.Minute) // shortTok expires; the others have an hour

	enrollTok := func(token, bmc, m string) func(*testing.T) (certCarrier, error) {
		return func(t *testing.T) (certCarrier, error) {
			return e.enrollToken(t, journaltest.NewKey(t), token, bmc, m)
		}
	}
	tests := []struct {
		name   string
		call   func(*testing.T) (certCarrier, error)
		code   codes.Code
		reason apierr.Reason
		exit   int
	}{
		{"Enroll without the required token", enrollTok("", "SNT", mac(0xa01)), codes.PermissionDenied, apierr.JoinTokenRequired, cli.ExitDenied},
		{"Enroll with a malformed token", enrollTok("pactjt_short", "SNT", mac(0xa01)), codes.PermissionDenied, apierr.JoinTokenInvalid, cli.ExitDenied},
		{"Enroll with an unknown token", enrollTok("pactjt_"+strings.Repeat("Q", 43), "SNT", mac(0xa01)), codes.PermissionDenied, apierr.JoinTokenInvalid, cli.ExitDenied},
		{"Enroll with another node's token", enrollTok(otherTok, "SNT", mac(0xa01)), codes.PermissionDenied, apierr.JoinTokenInvalid, cli.ExitDenied},
		{"Enroll with a used token", enrollTok(usedTok, "SNU", mac(0xa03)), codes.PermissionDenied, apierr.JoinTokenInvalid, cli.ExitDenied},
		{"Enroll with an expired token", enrollTok(shortTok, "SNT", mac(0xa01)), codes.PermissionDenied, apierr.JoinTokenInvalid, cli.ExitDenied},
		{"Enroll with a revoked token", enrollTok(revokedTok, "SNT", mac(0xa01)), codes.PermissionDenied, apierr.JoinTokenInvalid, cli.ExitDenied},
		{"Enroll of a fenced node", func(t *testing.T) (certCarrier, error) {
			return e.enroll(t, journaltest.NewKey(t), "SNX", mac(0xa07))
		}, codes.PermissionDenied, apierr.NodeFenced, cli.ExitDenied},
		{"RenewCert of a fenced node", func(t *testing.T) (certCarrier, error) {
			return e.agentClient(t, fenced).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: fenced.serial, CsrDer: journaltest.NewKey(t).CSR})
		}, codes.PermissionDenied, apierr.NodeFenced, cli.ExitDenied},
		{"Enroll with another node's key", func(t *testing.T) (certCarrier, error) {
			return e.enroll(t, holder.key, "SNF", mac(0xa06))
		}, codes.AlreadyExists, apierr.KeyInUse, cli.ExitConflict},
		{"RenewCert onto another node's key", func(t *testing.T) (certCarrier, error) {
			return e.agentClient(t, renewer).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: renewer.serial, CsrDer: holder.key.CSR})
		}, codes.AlreadyExists, apierr.KeyInUse, cli.ExitConflict},
		{"FenceNode without a reason", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "holder"})
			return nil, err
		}, codes.InvalidArgument, apierr.InvalidArgument, cli.ExitUsage},
		{"FenceNode of an unknown node", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "nobody", Reason: "r"})
			return nil, err
		}, codes.NotFound, apierr.NodeNotEnrolled, cli.ExitNotFound},
		{"FenceNode of a decommissioned node", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: gone.node, Reason: "r"})
			return nil, err
		}, codes.PermissionDenied, apierr.NodeRevoked, cli.ExitDenied},
		{"CreateJoinToken with a lifetime over 7 days", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.CreateJoinToken(callCtx(t), &pactv1.CreateJoinTokenRequest{NodeId: "tok", TtlSeconds: int64(8 * 24 * time.Hour / time.Second)})
			return nil, err
		}, codes.InvalidArgument, apierr.InvalidArgument, cli.ExitUsage},
		{"CreateJoinToken for an unknown node", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.CreateJoinToken(callCtx(t), &pactv1.CreateJoinTokenRequest{NodeId: "nobody"})
			return nil, err
		}, codes.NotFound, apierr.NodeNotEnrolled, cli.ExitNotFound},
		{"CreateJoinToken for a decommissioned node", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.CreateJoinToken(callCtx(t), &pactv1.CreateJoinTokenRequest{NodeId: gone.node})
			return nil, err
		}, codes.PermissionDenied, apierr.NodeRevoked, cli.ExitDenied},
		{"RevokeJoinTokens with nothing to revoke", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.RevokeJoinTokens(callCtx(t), &pactv1.RevokeJoinTokensRequest{NodeId: "holder"})
			return nil, err
		}, codes.NotFound, apierr.NotFound, cli.ExitNotFound},
		{"RevokeJoinTokens with a malformed id", func(t *testing.T) (certCarrier, error) {
			_, err := e.admin.RevokeJoinTokens(callCtx(t), &pactv1.RevokeJoinTokensRequest{NodeId: "tok", Id: "xyz"})
			return nil, err
		}, codes.InvalidArgument, apierr.InvalidArgument, cli.ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			resp, err := tt.call(t)
			e.refusedUnwritten(t, before, resp, err, tt.code, tt.reason)
			if got := cli.ExitCode(err); got != tt.exit {
				t.Errorf("pact exits %d for it, want %d", got, tt.exit)
			}
		})
	}
	// The refusals consumed nothing: the node's own unused token enrolls.
	if _, err := e.enrollToken(t, journaltest.NewKey(t), tok, "SNT", mac(0xa01)); err != nil {
		t.Fatalf("the right token after the refusals: %v", err)
	}
}

// operatorCSR is a valid CSR for an operator credential request.
func operatorCSR() []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		panic(err)
	}
	return der
}
