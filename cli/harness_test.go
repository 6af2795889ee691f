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
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
// Its rules follow the journal's: EXISTS for an identical re-registration,
// NODE_STREAMING unless forced, pact-ops-V only touches V, VCLUSTER_CHANGED
// for an assign of an assigned node or a move of an unassigned one.
type fakeAdmin struct {
	pactv1.UnimplementedAdminServiceServer

	mu        sync.Mutex
	nodes     map[string]*pactv1.Node
	byMAC     map[string]string // MAC -> node, live nodes only
	byBMC     map[string]string
	calls     []string
	peers     []*x509.Certificate
	lastState pactv1.NodeState
	lastList  *pactv1.ListNodesRequest
	// listPages counts ListNodes answers; stuckToken makes every page
	// name itself as the next (a journal fault).
	listPages  int
	stuckToken bool
	lastAudit  *pactv1.ListAuditRequest
	lastForce  bool
	fail       error

	// streaming nodes hold an open stream: decommission needs force.
	streaming map[string]bool
	// audit is the trail ListAudit reads, oldest first.
	audit []*pactv1.AuditEntry
	// chunks are the sizes of the RegisterNodes calls received.
	chunks []int
	// onChunk, if set, runs at the start of each RegisterNodes call with
	// the call's context and its 0-based number; an error it returns is
	// the call's answer.
	onChunk func(ctx context.Context, n int) error
	// transient answers NO_LEADER for a node this many more times.
	transient map[string]int
	// rowReason forces an ERROR outcome with this reason for a node.
	rowReason map[string]apierr.Reason

	// The journal this fake plays, for served_by (ListNodes too: empty
	// says nothing, as an older journal would) and the quorum it sees.
	self         string
	appliedIndex uint64
	// quorum is what JournalStatus reports. Only the leader (quorum.leader
	// == self) changes membership; others answer NO_LEADER naming it.
	quorum fakeQuorum

	// stall makes every call wait for its deadline (a journal that was
	// reached and did not answer in time).
	stall bool
	// snapshot is what SaveSnapshot streams, a message per chunk, then
	// snapshotErr ends the stream if set.
	snapshot    [][]byte
	snapshotErr error
}

// fakeQuorum is the Raft side of the fake journal.
type fakeQuorum struct {
	leader, leaderAddr string
	term, commit       uint64
	members            []*pactv1.JournalMember
}

var fakeNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func newFakeAdmin() *fakeAdmin {
	return &fakeAdmin{
		nodes: map[string]*pactv1.Node{}, byMAC: map[string]string{}, byBMC: map[string]string{},
		streaming: map[string]bool{}, transient: map[string]int{}, rowReason: map[string]apierr.Reason{},
	}
}

// caller is who a call came from, as the fake's authorization sees it.
type caller struct{ name, role string }

func (f *fakeAdmin) record(ctx context.Context, method string) (string, error) {
	c, err := f.recordCaller(ctx, method)
	return c.name, err
}

func (f *fakeAdmin) recordCaller(ctx context.Context, method string) (caller, error) {
	f.mu.Lock()
	stall := f.stall
	f.mu.Unlock()
	if stall {
		<-ctx.Done()
		return caller{}, status.FromContextError(ctx.Err()).Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method)
	var who caller
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			leaf := info.State.PeerCertificates[0]
			f.peers = append(f.peers, leaf)
			if id, err := pki.IdentityOf(leaf); err == nil {
				who.name = id.Name
			}
			if ou := leaf.Subject.OrganizationalUnit; len(ou) > 0 {
				who.role = ou[0]
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

func (f *fakeAdmin) callsOf(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == method {
			n++
		}
	}
	return n
}

func (f *fakeAdmin) put(n *pactv1.Node) {
	f.mu.Lock()
	f.putLocked(n)
	f.mu.Unlock()
}

func (f *fakeAdmin) putLocked(n *pactv1.Node) {
	if old, ok := f.nodes[n.GetNodeId()]; ok {
		for _, m := range old.GetHardware().GetMacs() {
			delete(f.byMAC, m)
		}
		delete(f.byBMC, old.GetHardware().GetBmcSerial())
	}
	f.nodes[n.GetNodeId()] = n
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return
	}
	for _, m := range n.GetHardware().GetMacs() {
		f.byMAC[m] = n.GetNodeId()
	}
	if b := n.GetHardware().GetBmcSerial(); b != "" {
		f.byBMC[b] = n.GetNodeId()
	}
}

func (f *fakeAdmin) node(id string) *pactv1.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[id]
}

func (f *fakeAdmin) chunkSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.chunks...)
}

// registerLocked applies the registry's rules to one registration. exists
// is set when the node is already registered exactly so.
func (f *fakeAdmin) registerLocked(req *pactv1.RegisterNodeRequest, who string) (exists bool, err error) {
	if old, ok := f.nodes[req.GetNodeId()]; ok && old.GetState() != pactv1.NodeState_NODE_STATE_REVOKED {
		if sameRegistration(old, req) {
			return true, nil
		}
		return false, apierr.Status(apierr.NodeAlreadyEnrolled, 0, "node "+req.GetNodeId()+" is already registered").Err()
	}
	for _, m := range req.GetHardware().GetMacs() {
		if o, ok := f.byMAC[m]; ok && o != req.GetNodeId() {
			return false, apierr.Status(apierr.HardwareIdentityConflict, 0, "MAC "+m+" belongs to "+o).Err()
		}
	}
	if b := req.GetHardware().GetBmcSerial(); b != "" {
		if o, ok := f.byBMC[b]; ok && o != req.GetNodeId() {
			return false, apierr.Status(apierr.HardwareIdentityConflict, 0, "BMC serial "+b+" belongs to "+o).Err()
		}
	}
	f.putLocked(&pactv1.Node{
		NodeId:               req.GetNodeId(),
		Hardware:             req.GetHardware(),
		State:                pactv1.NodeState_NODE_STATE_REGISTERED,
		Vcluster:             req.GetVcluster(),
		SpiffeId:             req.GetSpiffeId(),
		RegisteredAtUnixNano: fakeNow.UnixNano(),
		RegisteredBy:         who,
		UpdatedAtUnixNano:    fakeNow.UnixNano(),
	})
	return false, nil
}

// sameRegistration: same hardware (MACs as sent: normalised and sorted),
// the same vCluster and SPIFFE ID, whatever the node's state.
func sameRegistration(n *pactv1.Node, req *pactv1.RegisterNodeRequest) bool {
	a, b := n.GetHardware(), req.GetHardware()
	return n.GetVcluster() == req.GetVcluster() && n.GetSpiffeId() == req.GetSpiffeId() && a.GetBmcSerial() == b.GetBmcSerial() &&
		a.GetTpmEkHash() == b.GetTpmEkHash() && slices.Equal(a.GetMacs(), b.GetMacs())
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
	if _, err := f.registerLocked(req, who); err != nil {
		return nil, err
	}
	return &pactv1.RegisterNodeResponse{Node: f.nodes[req.GetNodeId()]}, nil
}

func (f *fakeAdmin) RegisterNodes(ctx context.Context, req *pactv1.RegisterNodesRequest) (*pactv1.RegisterNodesResponse, error) {
	who, err := f.recordCaller(ctx, "RegisterNodes")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	n := len(f.chunks)
	f.chunks = append(f.chunks, len(req.GetNodes()))
	hook := f.onChunk
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, n); err != nil {
			return nil, err
		}
	}
	if who.role != pki.RolePlatformAdmin {
		return nil, apierr.Status(apierr.PermissionDenied, 0, "role "+who.role+" may not register nodes").Err()
	}
	if len(req.GetNodes()) > 1000 {
		return nil, apierr.Status(apierr.InvalidArgument, 0, "too many rows").Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &pactv1.RegisterNodesResponse{}
	for _, row := range req.GetNodes() {
		res := &pactv1.RegisterNodeResult{NodeId: row.GetNodeId()}
		out.Results = append(out.Results, res)
		if f.transient[row.GetNodeId()] > 0 {
			f.transient[row.GetNodeId()]--
			res.Outcome, res.Reason, res.Message = pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR, string(apierr.NoLeader), "election in progress"
			continue
		}
		if r, ok := f.rowReason[row.GetNodeId()]; ok {
			res.Outcome, res.Reason, res.Message = pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR, string(r), "forced by the test"
			continue
		}
		exists, err := f.registerLocked(row, who.name)
		switch {
		case err != nil:
			e := apierr.FromError(err)
			res.Outcome, res.Reason, res.Message = pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR, string(e.Reason), e.Message
		case exists:
			res.Outcome = pactv1.RegisterOutcome_REGISTER_OUTCOME_EXISTS
		default:
			res.Outcome = pactv1.RegisterOutcome_REGISTER_OUTCOME_OK
		}
	}
	return out, nil
}

func (f *fakeAdmin) ListNodes(ctx context.Context, req *pactv1.ListNodesRequest) (*pactv1.ListNodesResponse, error) {
	if _, err := f.record(ctx, "ListNodes"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastState = req.GetState()
	f.lastList = req
	out := &pactv1.ListNodesResponse{ServedBy: f.self, AppliedIndex: f.appliedIndex}
	for _, n := range f.nodes { // map order: the CLI must sort
		if req.GetState() != pactv1.NodeState_NODE_STATE_UNSPECIFIED && n.GetState() != req.GetState() {
			continue
		}
		if v := req.GetVcluster(); v != "" && n.GetVcluster() != v {
			continue
		}
		if req.GetUnassigned() && n.GetVcluster() != "" {
			continue
		}
		out.Nodes = append(out.Nodes, n)
	}
	f.listPages++
	if size := int(req.GetPageSize()); size > 0 {
		// Page as a journal does, in node ID order after the token (here
		// the plain ID; the CLI treats it as opaque), each page at the
		// next applied index.
		sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].GetNodeId() < out.Nodes[j].GetNodeId() })
		rest := out.Nodes[sort.Search(len(out.Nodes), func(i int) bool { return out.Nodes[i].GetNodeId() > req.GetPageToken() }):]
		out.Nodes = rest[:min(size, len(rest))]
		if len(rest) > size {
			out.NextPageToken = out.Nodes[len(out.Nodes)-1].GetNodeId()
		}
		if f.stuckToken {
			out.NextPageToken = "stuck"
		}
		out.AppliedIndex += uint64(f.listPages - 1)
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
		return nil, notEnrolled(req.GetNodeId())
	}
	return &pactv1.InspectNodeResponse{Node: n}, nil
}

func notEnrolled(id string) error {
	return apierr.Status(apierr.NodeNotEnrolled, 0, "node "+id+" is not in the registry").Err()
}

func (f *fakeAdmin) DecommissionNode(ctx context.Context, req *pactv1.DecommissionNodeRequest) (*pactv1.DecommissionNodeResponse, error) {
	who, err := f.recordCaller(ctx, "DecommissionNode")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastForce = req.GetForce()
	if who.role != pki.RolePlatformAdmin {
		return nil, apierr.Status(apierr.PermissionDenied, 0, "role "+who.role+" may not decommission nodes").Err()
	}
	n, ok := f.nodes[req.GetNodeId()]
	if !ok {
		return nil, notEnrolled(req.GetNodeId())
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return nil, apierr.Status(apierr.NodeRevoked, 0, n.GetNodeId()+" is already decommissioned").Err()
	}
	if f.streaming[n.GetNodeId()] && !req.GetForce() {
		return nil, apierr.Status(apierr.NodeStreaming, 0, "node "+n.GetNodeId()+" is running (stream seen 0s ago); decommissioning cuts it off: re-run with --force").Err()
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.State = pactv1.NodeState_NODE_STATE_REVOKED
	next.RevokedAtUnixNano = fakeNow.UnixNano()
	next.RevokedBy = "admin/" + who.name
	f.putLocked(next)
	return &pactv1.DecommissionNodeResponse{Node: next}, nil
}

// setVCluster mirrors the journal: fromOK checks the node's current
// vCluster, and a pact-ops-V caller may only touch V.
func (f *fakeAdmin) setVCluster(ctx context.Context, method, id, to string, fromOK func(string) bool) (*pactv1.Node, string, error) {
	who, err := f.recordCaller(ctx, method)
	if err != nil {
		return nil, "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if who.role == pki.RoleViewer {
		return nil, "", apierr.Status(apierr.PermissionDenied, 0, "role viewer may not change assignments").Err()
	}
	n, ok := f.nodes[id]
	if !ok {
		return nil, "", notEnrolled(id)
	}
	if n.GetState() == pactv1.NodeState_NODE_STATE_REVOKED {
		return nil, "", apierr.Status(apierr.NodeRevoked, 0, id+" was decommissioned").Err()
	}
	from := n.GetVcluster()
	if fromOK != nil && !fromOK(from) {
		if from == "" {
			return nil, "", apierr.Status(apierr.VClusterChanged, 0, id+" is in maintenance (no vCluster); use assign").Err()
		}
		return nil, "", apierr.Status(apierr.VClusterChanged, 0, id+" is already in "+from+"; use move").Err()
	}
	if own, ok := strings.CutPrefix(who.role, pki.RoleOpsPrefix); ok {
		for _, v := range []string{from, to} {
			if v != "" && v != own {
				return nil, "", apierr.Status(apierr.PermissionDenied, 0, "role "+who.role+" may only move nodes into and out of "+own+"; "+id+" touches "+v).Err()
			}
		}
	}
	next := proto.Clone(n).(*pactv1.Node)
	next.Vcluster = to
	f.putLocked(next)
	return next, from, nil
}

func (f *fakeAdmin) AssignNode(ctx context.Context, req *pactv1.AssignNodeRequest) (*pactv1.AssignNodeResponse, error) {
	n, _, err := f.setVCluster(ctx, "AssignNode", req.GetNodeId(), req.GetVcluster(), func(from string) bool { return from == "" })
	if err != nil {
		return nil, err
	}
	return &pactv1.AssignNodeResponse{Node: n}, nil
}

func (f *fakeAdmin) UnassignNode(ctx context.Context, req *pactv1.UnassignNodeRequest) (*pactv1.UnassignNodeResponse, error) {
	n, prev, err := f.setVCluster(ctx, "UnassignNode", req.GetNodeId(), "", nil)
	if err != nil {
		return nil, err
	}
	return &pactv1.UnassignNodeResponse{Node: n, PreviousVcluster: prev}, nil
}

func (f *fakeAdmin) MoveNode(ctx context.Context, req *pactv1.MoveNodeRequest) (*pactv1.MoveNodeResponse, error) {
	n, prev, err := f.setVCluster(ctx, "MoveNode", req.GetNodeId(), req.GetToVcluster(), func(from string) bool { return from != "" })
	if err != nil {
		return nil, err
	}
	return &pactv1.MoveNodeResponse{Node: n, PreviousVcluster: prev}, nil
}

func (f *fakeAdmin) ListAudit(ctx context.Context, req *pactv1.ListAuditRequest) (*pactv1.ListAuditResponse, error) {
	if _, err := f.record(ctx, "ListAudit"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastAudit = req
	var out []*pactv1.AuditEntry
	for _, e := range f.audit {
		if req.GetNodeId() != "" && e.GetNodeId() != req.GetNodeId() {
			continue
		}
		if e.GetAtUnixNano() < req.GetSinceUnixNano() {
			continue
		}
		out = append(out, e)
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 1000
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return &pactv1.ListAuditResponse{Entries: out}, nil
}

func (f *fakeAdmin) cloneMembersLocked() []*pactv1.JournalMember {
	out := make([]*pactv1.JournalMember, len(f.quorum.members))
	for i, m := range f.quorum.members {
		out[i] = proto.Clone(m).(*pactv1.JournalMember)
	}
	return out
}

func (f *fakeAdmin) JournalStatus(ctx context.Context, _ *pactv1.JournalStatusRequest) (*pactv1.JournalStatusResponse, error) {
	if _, err := f.record(ctx, "JournalStatus"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.quorum
	return &pactv1.JournalStatusResponse{
		LeaderId: q.leader, Term: q.term, CommitIndex: q.commit, AppliedIndex: f.appliedIndex,
		ServedBy: f.self, Members: f.cloneMembersLocked(),
	}, nil
}

// membershipLocked applies the journal's rules before a membership
// change: platform-admin only, and only on the leader.
func (f *fakeAdmin) membershipLocked(who caller) error {
	if who.role != pki.RolePlatformAdmin {
		return apierr.Status(apierr.PermissionDenied, 0, "role "+who.role+" may not change the journal quorum").Err()
	}
	if f.quorum.leader == "" {
		return apierr.Status(apierr.NoLeader, 0, "no leader; a majority of the quorum must be up to change it").Err()
	}
	if f.quorum.leader != f.self {
		return apierr.Status(apierr.NoLeader, 0, "membership changes go to the leader, "+f.quorum.leader+" at "+f.quorum.leaderAddr).Err()
	}
	return nil
}

func (f *fakeAdmin) AddJournal(ctx context.Context, req *pactv1.AddJournalRequest) (*pactv1.AddJournalResponse, error) {
	who, err := f.recordCaller(ctx, "AddJournal")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if who.role == pki.RolePlatformAdmin {
		if err := pki.ValidateName("journal id", req.GetJournalId()); err != nil {
			return nil, apierr.Status(apierr.InvalidArgument, 0, err.Error()).Err()
		}
	}
	if err := f.membershipLocked(who); err != nil {
		return nil, err
	}
	found := false
	for _, m := range f.quorum.members {
		if m.GetJournalId() == req.GetJournalId() {
			m.RaftAddr, m.Voter, found = req.GetRaftAddr(), true, true
		}
	}
	if !found {
		f.quorum.members = append(f.quorum.members, &pactv1.JournalMember{
			JournalId: req.GetJournalId(), RaftAddr: req.GetRaftAddr(), Voter: true,
			Error: "its address is not published yet",
		})
	}
	f.quorum.commit++
	return &pactv1.AddJournalResponse{Members: f.cloneMembersLocked()}, nil
}

func (f *fakeAdmin) RemoveJournal(ctx context.Context, req *pactv1.RemoveJournalRequest) (*pactv1.RemoveJournalResponse, error) {
	who, err := f.recordCaller(ctx, "RemoveJournal")
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.membershipLocked(who); err != nil {
		return nil, err
	}
	i := slices.IndexFunc(f.quorum.members, func(m *pactv1.JournalMember) bool { return m.GetJournalId() == req.GetJournalId() })
	if i < 0 {
		return nil, apierr.Status(apierr.NotFound, 0, "no journal \""+req.GetJournalId()+"\" in the quorum; see pact journal status").Err()
	}
	f.quorum.members = slices.Delete(f.quorum.members, i, i+1)
	f.quorum.commit++
	return &pactv1.RemoveJournalResponse{Members: f.cloneMembersLocked()}, nil
}

// startJournal serves fake over mTLS on loopback, requiring a client
// certificate from the test root, and returns its address.
func startJournal(t *testing.T, p *testPKI, fake *fakeAdmin) string {
	t.Helper()
	_, addr := startJournalServer(t, p, fake)
	return addr
}

// startJournalServer is startJournal that also returns the server, so a
// test can stop it mid-call.
func startJournalServer(t *testing.T, p *testPKI, fake *fakeAdmin) (*grpc.Server, string) {
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
	return srv, lis.Addr().String()
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

// runOpts is the outside world of runEnv beyond the arguments.
type runOpts struct {
	stdin    io.Reader
	terminal bool // stderr (only) is a terminal
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
}

// runEnv runs Run with captured output and the given environment, and
// fails the test if any key material of p's credentials reached the output.
func runEnv(t *testing.T, p *testPKI, o runOpts, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	// Retry waits are deterministic in tests: every jitter draw is half
	// its range.
	half := func(n time.Duration) time.Duration { return n / 2 }
	env := Env{Stdin: o.stdin, Stdout: &out, Stderr: &errb, Now: o.now, Sleep: o.sleep, Jitter: half}
	if env.Sleep == nil {
		env.Sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	}
	if o.terminal {
		env.IsTerminal = func(w io.Writer) bool { return w == &errb }
	}
	code = Run(context.Background(), args, env)
	stdout, stderr = out.String(), errb.String()
	if p != nil {
		assertNoKeyMaterial(t, stdout+stderr, p.admin.keyPEM)
	}
	return code, stdout, stderr
}

func (f *fakeAdmin) SaveSnapshot(_ *pactv1.SaveSnapshotRequest, stream grpc.ServerStreamingServer[pactv1.SaveSnapshotResponse]) error {
	if _, err := f.record(stream.Context(), "SaveSnapshot"); err != nil {
		return err
	}
	f.mu.Lock()
	chunks, end := f.snapshot, f.snapshotErr
	f.mu.Unlock()
	for _, c := range chunks {
		if err := stream.Send(&pactv1.SaveSnapshotResponse{Data: c}); err != nil {
			return err
		}
	}
	return end
}
