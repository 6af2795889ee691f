package journal_test

// The SPIRE suite: a journal that trusts a SPIRE bundle (a file written from
// a CA made here, or the Workload API of a fake SPIRE agent) accepting and
// refusing X.509-SVIDs from node agents, over real TLS and gRPC, on the
// lifecycle suite's fake clock.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/identity/spire/spiretest"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// spireCA stands in for a SPIRE server's signing CA: a root, or an
// intermediate under one.
type spireCA struct {
	cert   *x509.Certificate
	key    crypto.Signer
	parent *spireCA // nil for a root
}

func newKeyP256(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serialNumber(t testing.TB) *x509.Certificate {
	t.Helper()
	n, err := pki.NewSerial()
	if err != nil {
		t.Fatal(err)
	}
	return &x509.Certificate{SerialNumber: n}
}

func signCert(t testing.TB, tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newSPIRECA makes a root CA for trust domain td, valid around now.
func newSPIRECA(t testing.TB, td string, now time.Time) *spireCA {
	t.Helper()
	key := newKeyP256(t)
	tmpl := serialNumber(t)
	tmpl.Subject = pkix.Name{CommonName: "SPIRE test root " + td}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(10*365*24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	tmpl.URIs = []*url.URL{{Scheme: "spiffe", Host: td}}
	return &spireCA{cert: signCert(t, tmpl, tmpl, key.Public(), key), key: key}
}

// intermediate makes a CA signed by ca, as a SPIRE server with an upstream
// authority has.
func (ca *spireCA) intermediate(t testing.TB, now time.Time) *spireCA {
	t.Helper()
	key := newKeyP256(t)
	tmpl := serialNumber(t)
	tmpl.Subject = pkix.Name{CommonName: "SPIRE test intermediate"}
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	tmpl.URIs = ca.cert.URIs
	return &spireCA{cert: signCert(t, tmpl, ca.cert, key.Public(), ca.key), key: key, parent: ca}
}

// svid is an X.509-SVID as an agent presents it.
type svid struct {
	leaf *x509.Certificate
	cert tls.Certificate // leaf, then the intermediates up to the root
}

func (s svid) serial() string { return pki.SerialHex(s.leaf.SerialNumber) }

// agent is the SVID as the lifecycle suite's agent (node is the node the
// SVID is expected to map to).
func (s svid) agent(node string) *agent {
	return &agent{node: node, serial: s.serial(), cert: s.cert}
}

// issue makes an SVID for the given SPIFFE IDs (one, normally) valid over
// [notBefore, notAfter].
func (ca *spireCA) issue(t testing.TB, notBefore, notAfter time.Time, ids ...string) svid {
	t.Helper()
	key := newKeyP256(t)
	tmpl := serialNumber(t)
	tmpl.NotBefore, tmpl.NotAfter = notBefore, notAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	for _, id := range ids {
		u, err := url.Parse(id)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	leaf := signCert(t, tmpl, ca.cert, key.Public(), ca.key)
	chain := [][]byte{leaf.Raw}
	for c := ca; c.parent != nil; c = c.parent {
		chain = append(chain, c.cert.Raw)
	}
	return svid{leaf: leaf, cert: tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}}
}

// writeBundle writes the roots as a PEM bundle file, with a modification
// time of mtime (distinct per write, as a real rewrite's is).
func writeBundle(t testing.TB, path string, mtime time.Time, cas ...*spireCA) {
	t.Helper()
	var certs []*x509.Certificate
	for _, ca := range cas {
		certs = append(certs, ca.cert)
	}
	if err := os.WriteFile(path+".tmp", identitytest.CertsPEM(certs...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path+".tmp", mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// spireEnv is a journal on a fake clock that trusts the SPIRE bundle in a
// file, initially holding ca's root.
type spireEnv struct {
	*env
	ca     *spireCA
	bundle string // the bundle file
}

func newSPIREEnv(t *testing.T, mutate ...func(*journal.Config)) *spireEnv {
	t.Helper()
	now := time.Now()
	ca := newSPIRECA(t, "pact.local", now)
	path := filepath.Join(t.TempDir(), "spire-bundle.pem")
	writeBundle(t, path, now.Add(-time.Hour), ca)
	e := newEnv(t, append([]func(*journal.Config){func(c *journal.Config) { c.SPIREBundleFile = path }}, mutate...)...)
	return &spireEnv{env: e, ca: ca, bundle: path}
}

// svidFor issues an SVID for id from the SPIRE CA, valid for an hour on the
// journal's clock.
func (e *spireEnv) svidFor(t testing.TB, id string) svid {
	t.Helper()
	now := e.fc.Now()
	return e.ca.issue(t, now.Add(-time.Minute), now.Add(time.Hour), id)
}

func agentID(node string) string { return "spiffe://pact.local/pact-agent/" + node }

func (e *spireEnv) registerSPIFFE(t testing.TB, node, spiffeID, bmc, mac string) *pactv1.Node {
	t.Helper()
	resp, err := e.admin.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: node, Hardware: hw(bmc, mac), SpiffeId: spiffeID})
	if err != nil {
		t.Fatalf("register %s with spiffe_id %q: %v", node, spiffeID, err)
	}
	return resp.GetNode()
}

func (e *spireEnv) ping(t testing.TB, a *agent) (*pactv1.PingResponse, error) {
	t.Helper()
	return e.agentClient(t, a).Ping(callCtx(t), &pactv1.PingRequest{})
}

// checkSVIDActive checks that node is active with s as its certificate,
// that the last audit entry says so, and that Ping names the node and SPIRE.
func (e *spireEnv) checkSVIDActive(t testing.TB, node string, s svid, action, detail string) {
	t.Helper()
	n := e.node(t, node)
	c := n.GetCert()
	if n.GetState() != stActive || c.GetSerial() != s.serial() || c.GetIssuerSerial() != "spire" || c.GetNotAfterUnix() != s.leaf.NotAfter.Unix() {
		t.Errorf("node %s = %v, want active with SVID %s (issuer spire, not after %d)", node, n, s.serial(), s.leaf.NotAfter.Unix())
	}
	if a := e.lastAudit(t, node); a.GetAction() != action || a.GetDetail() != detail || a.GetSerial() != s.serial() || a.GetActor() != "agent/"+node {
		t.Errorf("last audit entry %v, want %s (%s) of serial %s by agent/%s", a, action, detail, s.serial(), node)
	}
	resp, err := e.ping(t, s.agent(node))
	if err != nil {
		t.Fatalf("ping with the SVID: %v", err)
	}
	if resp.GetIdentitySource() != "spiffe" || resp.GetNodeId() != node || resp.GetSerial() != s.serial() {
		t.Errorf("ping = %v, want node %s, serial %s, identity source spiffe", resp, node, s.serial())
	}
}

// TestSVIDs is the table of SVIDs a journal accepts and refuses.
//
// Refusals: an SVID that does not verify (foreign trust domain, untrusted
// CA, expired, not yet valid, not an SVID) is UNAUTHENTICATED; a valid SVID
// whose SPIFFE ID maps to no node is PERMISSION_DENIED (authenticated by
// SPIRE, not authorised here), and one of a decommissioned node
// NODE_REVOKED.
func TestSVIDs(t *testing.T) {
	e := newSPIREEnv(t)
	now := e.fc.Now()
	inter := e.ca.intermediate(t, now)
	rogue := newSPIRECA(t, "pact.local", now)
	other := newSPIRECA(t, "other.org", now)
	e.register(t, "n-default", "SN1", "52:54:00:00:10:01")
	e.register(t, "n-inter", "SN2", "52:54:00:00:10:02")
	e.registerSPIFFE(t, "n-custom", "spiffe://pact.local/custom/x", "SN3", "52:54:00:00:10:03")
	e.register(t, "n-gone", "SN4", "52:54:00:00:10:04")
	if _, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n-gone"}); err != nil {
		t.Fatal(err)
	}
	e.register(t, "n-other", "SN5", "52:54:00:00:10:05")
	valid := func(ca *spireCA, ids ...string) func(t *testing.T) svid {
		return func(t *testing.T) svid { return ca.issue(t, now.Add(-time.Minute), now.Add(time.Hour), ids...) }
	}
	subscribe := func(t *testing.T, a *agent) error { return e.subscribeErr(t, &a.cert) }
	ping := func(t *testing.T, a *agent) error { _, err := e.ping(t, a); return err }

	tests := []struct {
		name string
		node string // the node the SVID should map to; "" for none
		svid func(t *testing.T) svid
		call func(t *testing.T, a *agent) error // nil: a stream that works
		code codes.Code
		want apierr.Reason
		msg  string
	}{
		{name: "registered node", node: "n-default", svid: valid(e.ca, agentID("n-default"))},
		{name: "through a SPIRE intermediate", node: "n-inter", svid: valid(inter, agentID("n-inter"))},
		{name: "per-node SPIFFE ID override", node: "n-custom", svid: valid(e.ca, "spiffe://pact.local/custom/x")},

		{name: "default ID of a node with an override", svid: valid(e.ca, agentID("n-custom")), call: subscribe,
			code: codes.PermissionDenied, want: apierr.SPIFFEIDUnmapped, msg: "maps to no node"},
		{name: "unknown node", svid: valid(e.ca, agentID("n-unknown")), call: subscribe,
			code: codes.PermissionDenied, want: apierr.SPIFFEIDUnmapped, msg: "SPIFFE ID spiffe://pact.local/pact-agent/n-unknown maps to no node in the registry"},
		{name: "unknown node, Ping", svid: valid(e.ca, agentID("n-unknown")), call: ping,
			code: codes.PermissionDenied, want: apierr.SPIFFEIDUnmapped, msg: "maps to no node"},
		{name: "decommissioned node", svid: valid(e.ca, agentID("n-gone")), call: subscribe,
			code: codes.PermissionDenied, want: apierr.NodeRevoked, msg: "n-gone was decommissioned"},
		{name: "another trust domain, signed by the trusted CA", svid: valid(e.ca, "spiffe://other.org/pact-agent/n-other"), call: subscribe,
			code: codes.Unauthenticated, want: apierr.TrustDomainNotAccepted, msg: "SPIFFE ID spiffe://other.org/pact-agent/n-other is of trust domain other.org; this journal accepts SVIDs of pact.local only"},
		{name: "another trust domain's CA", svid: valid(other, "spiffe://other.org/pact-agent/n-other"), call: ping,
			code: codes.Unauthenticated, want: apierr.TrustDomainNotAccepted},
		{name: "no SPIFFE ID of any domain", svid: valid(e.ca, "https://pact.local/x"), call: ping,
			code: codes.Unauthenticated, want: apierr.Unauthenticated, msg: "nor in SPIRE trust domain pact.local"},
		{name: "untrusted CA", svid: valid(rogue, agentID("n-other")), call: subscribe,
			code: codes.Unauthenticated, want: apierr.SPIREBundleUntrusted, msg: "SVID spiffe://pact.local/pact-agent/n-other is not signed by the SPIRE trust bundle of pact.local"},
		{name: "untrusted CA, an override", svid: valid(rogue, "spiffe://pact.local/custom/x"), call: ping,
			code: codes.Unauthenticated, want: apierr.SPIREBundleUntrusted, msg: "not signed by the SPIRE trust bundle"},
		{name: "expired", svid: func(t *testing.T) svid {
			return e.ca.issue(t, now.Add(-2*time.Hour), now.Add(-time.Minute), agentID("n-other"))
		}, call: subscribe, code: codes.Unauthenticated, want: apierr.Unauthenticated, msg: "expired"},
		{name: "expired override", svid: func(t *testing.T) svid {
			return e.ca.issue(t, now.Add(-2*time.Hour), now.Add(-time.Minute), "spiffe://pact.local/custom/x")
		}, call: ping, code: codes.Unauthenticated, want: apierr.Unauthenticated, msg: "expired"},
		{name: "not yet valid", svid: func(t *testing.T) svid {
			return e.ca.issue(t, now.Add(time.Hour), now.Add(2*time.Hour), "spiffe://pact.local/custom/x")
		}, call: subscribe, code: codes.Unauthenticated, want: apierr.CertNotYetValid, msg: "not valid before"},
		{name: "two SPIFFE IDs", svid: valid(e.ca, "spiffe://pact.local/custom/x", agentID("n-other")), call: subscribe,
			code: codes.Unauthenticated, want: apierr.Unauthenticated},
		{name: "RenewCert", svid: valid(e.ca, agentID("n-other")), call: func(t *testing.T, a *agent) error {
			key := newKeyP256(t)
			csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := e.agentClient(t, a).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: csr})
			if len(resp.GetCertChainDer()) > 0 {
				t.Error("a refused renewal returned a certificate")
			}
			return err
		}, code: codes.PermissionDenied, want: apierr.PermissionDenied, msg: "SVID-authenticated agents renew through SPIRE, not the journal"},
		{name: "admin RPC ListNodes", svid: valid(e.ca, agentID("n-other")), call: func(t *testing.T, a *agent) error {
			_, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &a.cert)).ListNodes(callCtx(t), &pactv1.ListNodesRequest{})
			return err
		}, code: codes.PermissionDenied, want: apierr.PermissionDenied, msg: "needs an operator credential"},
		{name: "admin RPC RegisterNode", svid: valid(e.ca, agentID("n-other")), call: func(t *testing.T, a *agent) error {
			_, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &a.cert)).RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: "n-evil", Hardware: hw("", "52:54:00:00:10:66")})
			return err
		}, code: codes.PermissionDenied, want: apierr.PermissionDenied},
		{name: "peer RPC", svid: valid(e.ca, agentID("n-other")), call: func(t *testing.T, a *agent) error {
			_, err := pactv1.NewJournalPeerServiceClient(e.h.Dial(t, &a.cert)).MemberStatus(callCtx(t), &pactv1.MemberStatusRequest{})
			return err
		}, code: codes.Unauthenticated, want: apierr.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.svid(t)
			a := s.agent(tt.node)
			if tt.call != nil {
				before := e.registry(t)
				pe := e.refused(t, before, nil, tt.call(t, a), tt.code, tt.want)
				if !strings.Contains(pe.Message, tt.msg) {
					t.Errorf("message %q, want it to say %q", pe.Message, tt.msg)
				}
				return
			}
			w := e.subscribe(t, a)
			if w.first.GetNodeId() != tt.node {
				t.Errorf("assignment %v, want node %s", w.first, tt.node)
			}
			if n := e.h.J.OpenStreams(tt.node); n != 1 {
				t.Errorf("the journal holds %d streams of %s, want 1", n, tt.node)
			}
			e.checkSVIDActive(t, tt.node, s, "enroll", "SPIRE SVID")
			w.close(t, e.env)
		})
	}
}

// SPIRE rotates an SVID without telling the journal: the new SVID works at
// once (the binding is by SPIFFE ID, not serial), the stream opened with
// the old one stays open, and the registry's serial follows on the next
// stream open. An older SVID opening a stream later does not turn it back.
func TestSVIDRotation(t *testing.T) {
	e := newSPIREEnv(t)
	e.register(t, "n1", "SN1", mac1)
	old := e.svidFor(t, agentID("n1"))
	w := e.subscribe(t, old.agent("n1"))
	e.checkSVIDActive(t, "n1", old, "enroll", "SPIRE SVID")

	e.tick(t, 30*time.Minute)
	now := e.fc.Now()
	rotated := e.ca.issue(t, now.Add(-time.Minute), now.Add(time.Hour), agentID("n1"))
	resp, err := e.ping(t, rotated.agent("n1"))
	if err != nil || resp.GetSerial() != rotated.serial() {
		t.Fatalf("ping with the rotated SVID = %v, %v; want it accepted", resp, err)
	}
	if got := e.node(t, "n1").GetCert().GetSerial(); got != old.serial() {
		t.Errorf("a Ping changed the recorded serial to %s", got)
	}
	e.tick(t, e.cfg.StreamRecheckInterval)
	w.quiet(t)

	w2 := e.subscribe(t, rotated.agent("n1"))
	e.checkSVIDActive(t, "n1", rotated, "renew", "SPIRE rotation")
	e.tick(t, e.cfg.StreamRecheckInterval)
	w.quiet(t)
	w2.quiet(t)

	// The old SVID is still valid; a stream it opens changes nothing.
	entries := len(e.audit(t, "n1"))
	w3 := e.subscribe(t, old.agent("n1"))
	if got := e.node(t, "n1").GetCert().GetSerial(); got != rotated.serial() {
		t.Errorf("an older SVID turned the recorded serial back to %s", got)
	}
	if n := len(e.audit(t, "n1")); n != entries {
		t.Errorf("an older SVID recorded %d audit entries", n-entries)
	}
	for _, x := range []*watch{w, w2, w3} {
		x.cancel()
		<-x.done
	}
	eventually(t, "the journal to drop the streams of n1", func() bool { return e.h.J.OpenStreams("n1") == 0 })
}

// Decommissioning an SVID node ends its stream with NODE_REVOKED, revokes
// the recorded serial, and refuses every SVID of its SPIFFE ID whatever the
// serial, until the node is registered again; the revoked serial stays
// refused after that.
func TestSVIDDecommission(t *testing.T) {
	e := newSPIREEnv(t)
	e.register(t, "n1", "SN1", mac1)
	s := e.svidFor(t, agentID("n1"))
	w := e.subscribe(t, s.agent("n1"))

	resp, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true})
	if err != nil {
		t.Fatalf("decommission: %v", err)
	}
	if n := resp.GetNode(); n.GetState() != stRevoked || n.GetCert().GetSerial() != s.serial() {
		t.Errorf("decommissioned node %v, want revoked holding serial %s", n, s.serial())
	}
	if a := e.lastAudit(t, "n1"); a.GetAction() != "decommission" || a.GetSerial() != s.serial() {
		t.Errorf("last audit entry %v, want the decommission of serial %s", a, s.serial())
	}
	evs, _, err := w.end(t)
	if len(evs) != 1 || evs[0].GetRevoked() == nil {
		t.Errorf("the stream delivered %v before ending, want one Revoked event", evs)
	}
	wantErr(t, err, codes.PermissionDenied, apierr.NodeRevoked)

	rotated := e.svidFor(t, agentID("n1"))
	for name, x := range map[string]svid{"the same SVID": s, "a rotated SVID": rotated} {
		t.Run(name, func(t *testing.T) {
			before := e.registry(t)
			e.refused(t, before, nil, e.subscribeErr(t, &x.cert), codes.PermissionDenied, apierr.NodeRevoked)
			_, err := e.ping(t, x.agent("n1"))
			e.refused(t, before, nil, err, codes.PermissionDenied, apierr.NodeRevoked)
		})
	}

	e.register(t, "n1", "SN1", mac1)
	before := e.registry(t)
	pe := e.refused(t, before, nil, e.subscribeErr(t, &s.cert), codes.PermissionDenied, apierr.NodeRevoked)
	if !strings.Contains(pe.Message, "revoked") {
		t.Errorf("message %q, want it to say the SVID was revoked", pe.Message)
	}
	e.subscribe(t, rotated.agent("n1")).close(t, e.env)
	e.checkSVIDActive(t, "n1", rotated, "enroll", "SPIRE SVID")
}

// An SVID node is a node like any other for liveness: the digests keep it
// active while it streams, it goes inactive without a stream, and a new
// stream makes it active again.
func TestSVIDLiveness(t *testing.T) {
	e := newSPIREEnv(t)
	e.register(t, "n1", "SN1", mac1)
	s := e.svidFor(t, agentID("n1"))
	w := e.subscribe(t, s.agent("n1"))
	opened := e.now()
	e.tick(t, e.cfg.DigestInterval)
	n := e.waitNode(t, "n1", "to be seen by a digest", func(n *pactv1.Node) bool { return n.GetLastSeenUnixNano() > opened })
	if n.GetState() != stActive {
		t.Errorf("streaming SVID node is %v", n.GetState())
	}
	w.close(t, e.env)
	e.tick(t, e.cfg.NodeLivenessTimeout+e.cfg.DigestInterval)
	e.waitState(t, "n1", stInactive)

	w = e.subscribe(t, s.agent("n1"))
	e.waitState(t, "n1", stActive)
	e.checkSVIDActive(t, "n1", s, "enroll", "SPIRE SVID")
	w.close(t, e.env)
}

// A SPIRE CA rotation: the bundle file is replaced, and the journal trusts
// the new CA once it looks at the file again, 10s later on its clock.
func TestSPIREBundleFileRotation(t *testing.T) {
	e := newSPIREEnv(t)
	e.register(t, "n1", "SN1", mac1)
	oldSVID := e.svidFor(t, agentID("n1"))
	if _, err := e.ping(t, oldSVID.agent("n1")); err != nil {
		t.Fatalf("ping with an SVID of the first CA: %v", err)
	}
	next := newSPIRECA(t, "pact.local", e.fc.Now())
	newSVID := next.issue(t, e.fc.Now().Add(-time.Minute), e.fc.Now().Add(time.Hour), agentID("n1"))
	_, err := e.ping(t, newSVID.agent("n1"))
	wantErr(t, err, codes.Unauthenticated, apierr.SPIREBundleUntrusted)

	writeBundle(t, e.bundle, time.Now(), next)
	_, err = e.ping(t, newSVID.agent("n1"))
	wantErr(t, err, codes.Unauthenticated, apierr.SPIREBundleUntrusted) // not looked at yet
	e.tick(t, 10*time.Second)
	if _, err := e.ping(t, newSVID.agent("n1")); err != nil {
		t.Errorf("ping with an SVID of the new CA 10s after the rotation: %v", err)
	}
	_, err = e.ping(t, oldSVID.agent("n1"))
	wantErr(t, err, codes.Unauthenticated, apierr.SPIREBundleUntrusted)

	// A file that does not parse keeps the bundle in force.
	if err := os.WriteFile(e.bundle, []byte("not PEM"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.tick(t, 10*time.Second)
	if _, err := e.ping(t, newSVID.agent("n1")); err != nil {
		t.Errorf("ping after the bundle file broke: %v", err)
	}
}

// The bundle from the journal host's own SPIRE agent (--spire-socket):
// SVIDs are refused until the agent answers, then accepted.
func TestSPIREBundleFromWorkloadAPI(t *testing.T) {
	now := time.Now()
	root := identitytest.NewCA("pact.local", now)
	agentAPI := spiretest.New(t)
	agentAPI.Start() // no entry for the journal yet: PermissionDenied
	e := &spireEnv{env: newEnv(t, func(c *journal.Config) { c.SPIRESocket = agentAPI.Addr() })}
	e.register(t, "n1", "SN1", mac1)

	leafCA := &spireCA{cert: root.Cert, key: root.Key}
	s := leafCA.issue(t, now.Add(-time.Minute), now.Add(time.Hour), agentID("n1"))
	_, err := e.ping(t, s.agent("n1"))
	pe := wantErr(t, err, codes.Unauthenticated, apierr.SPIREBundleUntrusted)
	if !strings.Contains(pe.Message, "no SPIRE trust bundle for pact.local is loaded yet") {
		t.Errorf("message %q, want it to say no SPIRE bundle is loaded yet", pe.Message)
	}

	agentAPI.SetSVID(root.Issue(identity.SourceSPIRE, "spiffe://pact.local/pact-journal/j1", now.Add(-time.Minute), now.Add(time.Hour)))
	eventually(t, "the journal to take the bundle from the SPIRE agent", func() bool {
		_, err := e.ping(t, s.agent("n1"))
		return err == nil
	})
	w := e.subscribe(t, s.agent("n1"))
	e.checkSVIDActive(t, "n1", s, "enroll", "SPIRE SVID")

	// The agent goes away: the last bundle stays in force.
	agentAPI.Stop()
	if _, err := e.ping(t, s.agent("n1")); err != nil {
		t.Errorf("ping after the SPIRE agent went away: %v", err)
	}
	w.close(t, e.env)
}

func TestSPIREConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		set  func(*journal.Config)
		want []string // substrings of the error; none: valid
	}{
		{name: "bundle file", set: func(c *journal.Config) { c.SPIREBundleFile = "/etc/pact/spire-bundle.pem" }},
		{name: "socket and trust domain", set: func(c *journal.Config) {
			c.SPIRESocket, c.SPIRETrustDomain = "unix:///run/spire/agent.sock", "example.org"
		}},
		{name: "both sources", set: func(c *journal.Config) {
			c.SPIREBundleFile, c.SPIRESocket = "/b.pem", "unix:///run/spire/agent.sock"
		}, want: []string{"exclude each other"}},
		{name: "bad socket", set: func(c *journal.Config) { c.SPIRESocket = "/run/spire/agent.sock" }, want: []string{"--spire-socket"}},
		{name: "trust domain without a bundle", set: func(c *journal.Config) { c.SPIRETrustDomain = "example.org" }, want: []string{"needs --spire-bundle or --spire-socket"}},
		{name: "bad trust domain, every problem at once", set: func(c *journal.Config) {
			c.SPIRETrustDomain, c.SPIRESocket, c.SPIREBundleFile = "Example.ORG", "tcp://x", "/b.pem"
		}, want: []string{"not a trust domain name", "exclude each other", "--spire-socket"}},
		{name: "trust domain as a URI", set: func(c *journal.Config) {
			c.SPIRETrustDomain, c.SPIREBundleFile = "spiffe://example.org", "/b.pem"
		}, want: []string{"not a trust domain name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := journal.DefaultConfig()
			cfg.DataDir = t.TempDir()
			tt.set(&cfg)
			err := cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("Validate = %v, want valid", err)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want it to say %q", err, w)
				}
			}
		})
	}
}

// A journal refuses to start on a bundle file it cannot read.
func TestSPIREBundleFileMissing(t *testing.T) {
	for name, content := range map[string]*string{"missing": nil, "empty": new(string)} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bundle.pem")
			if content != nil {
				if err := os.WriteFile(path, []byte(*content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cfg := journaltest.Config(t.TempDir())
			cfg.SPIREBundleFile = path
			j, err := journal.NewContext(context.Background(), cfg)
			if err == nil {
				j.Close()
				t.Fatal("journal.NewContext accepted an unusable SPIRE bundle file")
			}
			if !strings.Contains(err.Error(), "--spire-bundle") {
				t.Errorf("error %v, want it to name --spire-bundle", err)
			}
		})
	}
}

func TestRegisterNodeSPIFFEID(t *testing.T) {
	e := newSPIREEnv(t)
	e.registerSPIFFE(t, "n1", "spiffe://pact.local/custom/x", "SN1", "52:54:00:00:20:01")
	if n := e.node(t, "n1"); n.GetSpiffeId() != "spiffe://pact.local/custom/x" {
		t.Errorf("InspectNode spiffe_id %q", n.GetSpiffeId())
	}
	tests := []struct {
		name, node, id string
		code           codes.Code
		reason         apierr.Reason
		msg            string
	}{
		{"taken", "n2", "spiffe://pact.local/custom/x", codes.AlreadyExists, apierr.HardwareIdentityConflict, "registered to node n1"},
		{"another trust domain", "n2", "spiffe://other.org/custom/y", codes.InvalidArgument, apierr.InvalidArgument, "not in the SPIRE trust domain pact.local"},
		{"another node's default", "n2", "spiffe://pact.local/pact-agent/n1", codes.InvalidArgument, apierr.InvalidArgument, "default SPIFFE ID of node n1"},
		{"not a SPIFFE ID", "n2", "https://pact.local/x", codes.InvalidArgument, apierr.InvalidArgument, "not a SPIFFE ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			_, err := e.admin.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{NodeId: tt.node, Hardware: hw("", "52:54:00:00:20:02"), SpiffeId: tt.id})
			pe := e.refused(t, before, nil, err, tt.code, tt.reason)
			if !strings.Contains(pe.Message, tt.msg) {
				t.Errorf("message %q, want it to say %q", pe.Message, tt.msg)
			}
		})
	}
	// A batch re-run with the same override reports "exists"; with another
	// it is an error.
	resp, err := e.admin.RegisterNodes(callCtx(t), &pactv1.RegisterNodesRequest{Nodes: []*pactv1.RegisterNodeRequest{
		{NodeId: "n1", Hardware: hw("SN1", "52:54:00:00:20:01"), SpiffeId: "spiffe://pact.local/custom/x"},
		{NodeId: "n1", Hardware: hw("SN1", "52:54:00:00:20:01"), SpiffeId: "spiffe://pact.local/custom/z"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults(); r[0].GetOutcome() != pactv1.RegisterOutcome_REGISTER_OUTCOME_EXISTS || r[1].GetOutcome() != pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR {
		t.Errorf("batch results %v, want exists then error", r)
	}
}

// Journal-signed certificates work as before on a SPIRE site, and Ping
// tells the two apart. When the node's agent moves to its SVID (the
// identity cascade prefers SPIRE), the registry records the SVID and keeps
// the journal-signed certificate as the node's standby: its stream stands
// (the agent ends it itself), and a stream opened with it later (SPIRE
// stopped serving the node) makes it current again, with no enrollment.
func TestJournalCertificateAndSVID(t *testing.T) {
	e := newSPIREEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	w := e.subscribe(t, a)
	resp, err := e.ping(t, a)
	if err != nil || resp.GetIdentitySource() != "journal" || resp.GetSerial() != a.serial || resp.GetNodeId() != "n1" {
		t.Fatalf("ping with the journal-signed certificate = %v, %v; want n1, serial %s, identity source journal", resp, err, a.serial)
	}

	s := e.svidFor(t, agentID("n1"))
	w2 := e.subscribe(t, s.agent("n1"))
	e.checkSVIDActive(t, "n1", s, "renew", "SPIRE SVID replaces journal certificate "+a.serial+" (kept as standby)")
	if sb := e.node(t, "n1").GetStandbyCert(); sb.GetSerial() != a.serial {
		t.Errorf("standby %v, want the journal certificate %s", sb, a.serial)
	}
	if _, err := e.ping(t, a); err != nil {
		t.Errorf("ping with the standby: %v", err)
	}
	w.quiet(t)

	drops := e.h.J.StreamDrops("n1")
	w3 := e.subscribe(t, a)
	n := e.node(t, "n1")
	if n.GetCert().GetSerial() != a.serial || n.GetStandbyCert() != nil {
		t.Errorf("node %v: want the standby %s current, no standby left", n, a.serial)
	}
	if l := e.lastAudit(t, "n1"); l.GetAction() != "renew" || l.GetDetail() != "journal standby replaces SPIRE SVID "+s.serial() || l.GetSerial() != a.serial {
		t.Errorf("last audit entry %v, want renew (journal standby replaces SPIRE SVID %s)", l, s.serial())
	}
	for _, old := range []*watch{w, w2} {
		old.cancel()
		<-old.done
	}
	eventually(t, "the journal to hold the standby's stream only", func() bool { return e.h.J.OpenStreams("n1") == 1 })
	w3.quiet(t)
	if d := e.h.J.StreamDrops("n1"); d != drops {
		t.Errorf("the journal's streams of n1 dropped to none %d times across the moves", d-drops)
	}
}

// IssueStandby: an SVID-authenticated agent gets a journal certificate
// recorded as its node's standby, which authenticates at once; a new one
// replaces it (the old one is refused as replaced); only SVIDs may ask;
// a decommission revokes it.
func TestIssueStandby(t *testing.T) {
	e := newSPIREEnv(t)
	e.register(t, "n1", "SN1", mac1)
	s := e.svidFor(t, agentID("n1"))
	sa := s.agent("n1")
	issue := func(t *testing.T, from *agent, key journaltest.Key) (*agent, error) {
		t.Helper()
		resp, err := e.agentClient(t, from).IssueStandby(callCtx(t), &pactv1.IssueStandbyRequest{CsrDer: key.CSR})
		if err != nil {
			if len(resp.GetCertChainDer()) > 0 {
				t.Error("a refused standby returned a certificate")
			}
			return nil, err
		}
		if resp.GetNodeId() != "n1" || len(resp.GetTrustBundleDer()) == 0 {
			t.Errorf("response %v", resp)
		}
		// [standby, intermediate, journal CA], like every agent chain.
		if chain := resp.GetCertChainDer(); len(chain) != 3 || !bytes.Equal(chain[1], e.h.J.IntermediateCert().Raw) || !bytes.Equal(chain[2], e.h.J.JournalCA().Raw) {
			t.Errorf("standby chain of %d certificates, want [standby, intermediate, journal CA]", len(chain))
		}
		return newAgent("n1", key, resp.GetCertChainDer(), resp.GetSerial()), nil
	}

	// Before the SVID's stream recorded it, there is nothing to stand by for.
	before := e.registry(t)
	_, err := issue(t, sa, journaltest.NewKey(t))
	e.refused(t, before, nil, err, codes.PermissionDenied, apierr.StaleCertificate)

	w := e.subscribe(t, sa)
	sb1, err := issue(t, sa, journaltest.NewKey(t))
	if err != nil {
		t.Fatal(err)
	}
	n := e.node(t, "n1")
	if n.GetCert().GetSerial() != s.serial() || n.GetStandbyCert().GetSerial() != sb1.serial || n.GetStandbyCert().GetIssuerSerial() == "spire" {
		t.Errorf("node %v: want SVID %s current and standby %s", n, s.serial(), sb1.serial)
	}
	if l := e.lastAudit(t, "n1"); l.GetAction() != "standby" || l.GetSerial() != sb1.serial {
		t.Errorf("last audit %v, want standby of %s", l, sb1.serial)
	}
	if resp, err := e.ping(t, sb1); err != nil || resp.GetIdentitySource() != "journal" || resp.GetSerial() != sb1.serial {
		t.Errorf("ping with the standby = %v, %v", resp, err)
	}

	sb2, err := issue(t, sa, journaltest.NewKey(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.ping(t, sb1)
	pe := wantErr(t, err, codes.PermissionDenied, apierr.StaleCertificate)
	if !strings.Contains(pe.Message, "was replaced") {
		t.Errorf("message %q, want it to say the certificate was replaced", pe.Message)
	}

	refusals := []struct {
		name   string
		from   *agent
		csr    []byte
		code   codes.Code
		reason apierr.Reason
	}{
		{"a journal-signed caller", sb2, journaltest.NewKey(t).CSR, codes.PermissionDenied, apierr.PermissionDenied},
		{"a bad CSR", sa, []byte("not a CSR"), codes.InvalidArgument, apierr.InvalidCSR},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			resp, err := e.agentClient(t, tt.from).IssueStandby(callCtx(t), &pactv1.IssueStandbyRequest{CsrDer: tt.csr})
			e.refused(t, before, resp, err, tt.code, tt.reason)
		})
	}

	if _, err := e.admin.DecommissionNode(callCtx(t), &pactv1.DecommissionNodeRequest{NodeId: "n1", Force: true}); err != nil {
		t.Fatal(err)
	}
	_, _, err = w.end(t)
	wantErr(t, err, codes.PermissionDenied, apierr.NodeRevoked)
	_, err = e.ping(t, sb2)
	wantErr(t, err, codes.PermissionDenied, apierr.NodeRevoked)
}

// Reload (SIGHUP) trusts a replaced bundle file at once, without waiting
// for the journal to look at the file again; a broken file is an error
// and leaves the bundle in force.
func TestSPIREBundleReload(t *testing.T) {
	e := newSPIREEnv(t)
	e.register(t, "n1", "SN1", mac1)
	next := newSPIRECA(t, "pact.local", e.fc.Now())
	newSVID := next.issue(t, e.fc.Now().Add(-time.Minute), e.fc.Now().Add(time.Hour), agentID("n1"))
	writeBundle(t, e.bundle, time.Now(), next)
	_, err := e.ping(t, newSVID.agent("n1"))
	wantErr(t, err, codes.Unauthenticated, apierr.SPIREBundleUntrusted) // not looked at yet
	if err := e.h.J.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ping(t, newSVID.agent("n1")); err != nil {
		t.Errorf("ping with an SVID of the new CA right after Reload: %v", err)
	}
	if err := os.WriteFile(e.bundle, []byte("not PEM"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.h.J.Reload(); err == nil {
		t.Error("Reload of a broken bundle file must fail")
	}
	if _, err := e.ping(t, newSVID.agent("n1")); err != nil {
		t.Errorf("ping after a failed Reload: %v", err)
	}
}
