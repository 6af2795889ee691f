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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
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
	keyPEM            []byte           // to check it never reaches the output
	tls               *tls.Certificate // for calls a test makes itself
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
		URIs:         []*url.URL{pki.Identity{Kind: pki.KindJournal, Name: "j1", Domain: testDomain}.SPIFFEID()},
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

// fakeJournal is a fake AdminService, kept only for what a real journal
// (liveJournal) cannot be made to do on demand. It knows no registry rules
// and no authorisation: a test that checks what the registry does runs
// against a liveJournal. Its users, and why each cannot use a real one:
//
//   - TestEnrollAnswers, TestNoInternalPrefixes, TestDecommissionWithoutALeader,
//     TestAuditDenied, TestListAnswerTooLargeIsNotARateLimit,
//     TestFailoverFromALeaderlessJournal: a given answer (NO_LEADER,
//     RATE_LIMITED with a retry-after, INTERNAL, an answer too large for
//     gRPC, a refusal no role gets): a real journal gives these only
//     under conditions a test cannot hold it in.
//   - TestEnrollBatch (its forced-reason cases), TestEnrollBatchRetries:
//     row answers a real journal never gives a row the CLI lets through
//     (INVALID_ARGUMENT, NODE_REVOKED, an unknown reason, NO_LEADER for
//     one row), and RATE_LIMITED for a chunk.
//   - TestEnrollBatchJournalLost: the journal dropping away after a given
//     chunk, mid-call, or while the CLI is interrupted.
//   - TestEnrollBatchStreams100k: the moment the first chunk arrives,
//     measured against the writer of 100,000 rows.
//   - TestConnectedTimeout, TestSaveSnapshotFirstMessageTimeout: a journal
//     that accepts a call and never answers (stall).
//   - TestSaveSnapshotFailover: a snapshot stream broken after its first
//     message.
//   - TestListPagesThroughALargeRegistry: 12,000 nodes listed page by page
//     (registering them for real costs more than the rest of the package).
//   - TestListStopsOnAPageTokenLoop: a page token that names itself.
//   - TestJournalCACommands: journal CAs in the registry (today's journals
//     publish only root-signed intermediates), listed and revoked.
//   - TestListStateMarksWithAnOlderJournal: a journal from before the
//     fenced and released filters, which ignores them.
//   - TestJournalStatusTable, TestJournalStatusJSON,
//     TestJournalStatusUnreachable, TestJournalAdd, TestJournalRemove,
//     TestVersion: a three-journal quorum with given versions, one
//     journal down, lagging or never heard from, and a follower naming
//     its leader.
type fakeJournal struct {
	pactv1.UnimplementedAdminServiceServer

	mu    sync.Mutex
	calls []string
	// below is the journals the status names as still to upgrade.
	below []string
	// fail, when set, is every call's answer.
	fail error
	// stall makes every call wait for its deadline (a journal that was
	// reached and did not answer in time).
	stall bool

	// nodes is what ListNodes lists (every one, whatever the filter, as a
	// journal from before the filter would) and InspectNode finds.
	nodes map[string]*pactv1.Node
	// lastList is the last ListNodes request; listPages counts the
	// answers; stuckToken makes every page name itself as the next.
	lastList   *pactv1.ListNodesRequest
	listPages  int
	stuckToken bool

	// chunks are the sizes of the RegisterNodes calls received; onChunk,
	// if set, runs at the start of each with the call's context and its
	// 0-based number, and an error it returns is the call's answer.
	chunks  []int
	onChunk func(ctx context.Context, n int) error
	// transient answers NO_LEADER for a row this many more times;
	// rowReason answers ERROR with this reason for a row; registered
	// are the rows answered OK, answered EXISTS when sent again (a re-run).
	transient  map[string]int
	rowReason  map[string]apierr.Reason
	registered map[string]bool

	// The journal this fake plays (served_by; empty as an older journal
	// says nothing), its applied index and the quorum JournalStatus
	// reports. Only the leader (quorum.leader == self) changes membership;
	// the others answer NO_LEADER naming it.
	self         string
	appliedIndex uint64
	quorum       fakeQuorum

	// snapshot is what SaveSnapshot streams, a message per chunk, then
	// snapshotErr ends the stream if set.
	snapshot    [][]byte
	snapshotErr error

	// intermediates and journalCAs are what ListIntermediates lists and
	// RevokeJournalCA revokes (at fakeNow), the last request of which is
	// revokeCA.
	intermediates []*pactv1.Intermediate
	journalCAs    []*pactv1.JournalCA
	revokeCA      *pactv1.RevokeJournalCARequest
	// current and nodeCerts are what ListIntermediates says of them: each
	// journal's current intermediate, and the nodes under each one.
	current   []string
	nodeCerts map[string]uint32
}

// fakeQuorum is the Raft side of the fake journal.
type fakeQuorum struct {
	leader, leaderAddr string
	term, commit       uint64
	members            []*pactv1.JournalMember
	// level is the quorum feature level the serving journal reports (0:
	// a journal of a release before feature levels).
	level uint32
}

var fakeNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func newFakeJournal() *fakeJournal {
	return &fakeJournal{
		nodes: map[string]*pactv1.Node{}, transient: map[string]int{}, rowReason: map[string]apierr.Reason{}, registered: map[string]bool{},
	}
}

// record notes a call and returns the answer a failing journal gives.
func (f *fakeJournal) record(ctx context.Context, method string) error {
	f.mu.Lock()
	stall := f.stall
	f.mu.Unlock()
	if stall {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method)
	return f.fail
}

func (f *fakeJournal) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func (f *fakeJournal) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeJournal) callsOf(method string) int {
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

func (f *fakeJournal) put(n *pactv1.Node) {
	f.mu.Lock()
	f.nodes[n.GetNodeId()] = n
	f.mu.Unlock()
}

func (f *fakeJournal) chunkSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.chunks...)
}

// RegisterNode answers with the node as asked.
func (f *fakeJournal) RegisterNode(ctx context.Context, req *pactv1.RegisterNodeRequest) (*pactv1.RegisterNodeResponse, error) {
	if err := f.record(ctx, "RegisterNode"); err != nil {
		return nil, err
	}
	return &pactv1.RegisterNodeResponse{Node: &pactv1.Node{NodeId: req.GetNodeId(), Hardware: req.GetHardware(), State: pactv1.NodeState_NODE_STATE_REGISTERED}}, nil
}

func (f *fakeJournal) RegisterNodes(ctx context.Context, req *pactv1.RegisterNodesRequest) (*pactv1.RegisterNodesResponse, error) {
	if err := f.record(ctx, "RegisterNodes"); err != nil {
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
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &pactv1.RegisterNodesResponse{}
	for _, row := range req.GetNodes() {
		id := row.GetNodeId()
		res := &pactv1.RegisterNodeResult{NodeId: id, Outcome: pactv1.RegisterOutcome_REGISTER_OUTCOME_OK}
		out.Results = append(out.Results, res)
		switch r, forced := f.rowReason[id]; {
		case f.transient[id] > 0:
			f.transient[id]--
			res.Outcome, res.Reason, res.Message = pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR, string(apierr.NoLeader), "election in progress"
		case forced:
			res.Outcome, res.Reason, res.Message = pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR, string(r), "forced by the test"
		case f.registered[id]:
			res.Outcome = pactv1.RegisterOutcome_REGISTER_OUTCOME_EXISTS
		default:
			f.registered[id] = true
		}
	}
	return out, nil
}

func (f *fakeJournal) ListNodes(ctx context.Context, req *pactv1.ListNodesRequest) (*pactv1.ListNodesResponse, error) {
	if err := f.record(ctx, "ListNodes"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastList = req
	out := &pactv1.ListNodesResponse{ServedBy: f.self, AppliedIndex: f.appliedIndex}
	for _, n := range f.nodes { // map order: the CLI must sort
		out.Nodes = append(out.Nodes, n)
	}
	f.listPages++
	if size := int(req.GetPageSize()); size > 0 {
		// Pages in node ID order after the token (here the plain ID; the
		// CLI treats it as opaque), each at the next applied index, as a
		// journal written to between the pages answers.
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

func (f *fakeJournal) InspectNode(ctx context.Context, req *pactv1.InspectNodeRequest) (*pactv1.InspectNodeResponse, error) {
	if err := f.record(ctx, "InspectNode"); err != nil {
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

// DecommissionNode and ListAudit only ever give the answer set with
// setFail.
func (f *fakeJournal) DecommissionNode(ctx context.Context, _ *pactv1.DecommissionNodeRequest) (*pactv1.DecommissionNodeResponse, error) {
	if err := f.record(ctx, "DecommissionNode"); err != nil {
		return nil, err
	}
	return nil, status.Error(codes.Unimplemented, "the fake decommissions nothing")
}

func (f *fakeJournal) ListAudit(ctx context.Context, _ *pactv1.ListAuditRequest) (*pactv1.ListAuditResponse, error) {
	if err := f.record(ctx, "ListAudit"); err != nil {
		return nil, err
	}
	return nil, status.Error(codes.Unimplemented, "the fake keeps no audit trail")
}

func (f *fakeJournal) cloneMembersLocked() []*pactv1.JournalMember {
	out := make([]*pactv1.JournalMember, len(f.quorum.members))
	for i, m := range f.quorum.members {
		out[i] = proto.Clone(m).(*pactv1.JournalMember)
	}
	return out
}

func (f *fakeJournal) JournalStatus(ctx context.Context, _ *pactv1.JournalStatusRequest) (*pactv1.JournalStatusResponse, error) {
	if err := f.record(ctx, "JournalStatus"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.quorum
	return &pactv1.JournalStatusResponse{
		LeaderId: q.leader, Term: q.term, CommitIndex: q.commit, AppliedIndex: f.appliedIndex,
		ServedBy: f.self, Members: f.cloneMembersLocked(),
		QuorumFeatureLevel: q.level, FeatureLevel: speaks(q.level), BelowFeatureLevel: f.below,
	}, nil
}

// speaks is what a fake journal's binary speaks: 2, or nothing for one of
// a release before levels (quorum level 0).
func speaks(level uint32) uint32 {
	if level == 0 {
		return 0
	}
	return 2
}

// notLeaderLocked is the answer of a journal that is not the leader to a
// membership change.
func (f *fakeJournal) notLeaderLocked() error {
	if f.quorum.leader == "" {
		return apierr.Status(apierr.NoLeader, 0, "no leader; a majority of the quorum must be up to change it").Err()
	}
	if f.quorum.leader != f.self {
		return apierr.Status(apierr.NoLeader, 0, "membership changes go to the leader, "+f.quorum.leader+" at "+f.quorum.leaderAddr).Err()
	}
	return nil
}

// AddJournal adds the journal as a voter not heard from yet.
func (f *fakeJournal) AddJournal(ctx context.Context, req *pactv1.AddJournalRequest) (*pactv1.AddJournalResponse, error) {
	if err := f.record(ctx, "AddJournal"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.notLeaderLocked(); err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(f.quorum.members, func(m *pactv1.JournalMember) bool { return m.GetJournalId() == req.GetJournalId() }); i >= 0 {
		f.quorum.members[i].RaftAddr, f.quorum.members[i].Voter = req.GetRaftAddr(), true
	} else {
		f.quorum.members = append(f.quorum.members, &pactv1.JournalMember{
			JournalId: req.GetJournalId(), RaftAddr: req.GetRaftAddr(), Voter: true,
			Error: "its address is not published yet",
		})
	}
	f.quorum.commit++
	return &pactv1.AddJournalResponse{Members: f.cloneMembersLocked()}, nil
}

func (f *fakeJournal) RemoveJournal(ctx context.Context, req *pactv1.RemoveJournalRequest) (*pactv1.RemoveJournalResponse, error) {
	if err := f.record(ctx, "RemoveJournal"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.notLeaderLocked(); err != nil {
		return nil, err
	}
	f.quorum.members = slices.DeleteFunc(f.quorum.members, func(m *pactv1.JournalMember) bool { return m.GetJournalId() == req.GetJournalId() })
	f.quorum.commit++
	return &pactv1.RemoveJournalResponse{Members: f.cloneMembersLocked()}, nil
}

func (f *fakeJournal) ListIntermediates(ctx context.Context, _ *pactv1.ListIntermediatesRequest) (*pactv1.ListIntermediatesResponse, error) {
	if err := f.record(ctx, "ListIntermediates"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &pactv1.ListIntermediatesResponse{ServerTimeUnixNano: fakeNow.UnixNano(), CurrentIntermediates: f.current, NodeCertificates: f.nodeCerts}
	for _, in := range f.intermediates {
		out.Intermediates = append(out.Intermediates, proto.CloneOf(in))
	}
	for _, jc := range f.journalCAs {
		out.JournalCas = append(out.JournalCas, proto.CloneOf(jc))
	}
	return out, nil
}

// RevokeJournalCA revokes, all or nothing, the journal CAs named by serial
// or journal id, and their intermediates, as a journal does.
func (f *fakeJournal) RevokeJournalCA(ctx context.Context, req *pactv1.RevokeJournalCARequest) (*pactv1.RevokeJournalCAResponse, error) {
	if err := f.record(ctx, "RevokeJournalCA"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revokeCA = proto.CloneOf(req)
	var named []*pactv1.JournalCA
	for _, t := range req.GetTargets() {
		n := len(named)
		for _, jc := range f.journalCAs {
			if jc.GetSerial() == t || jc.GetJournalId() == t {
				named = append(named, jc)
			}
		}
		if len(named) == n {
			return nil, apierr.Status(apierr.NotFound, 0, "no journal CA "+t).Err()
		}
	}
	out := &pactv1.RevokeJournalCAResponse{}
	var journals []string
	for _, jc := range named {
		if jc.GetRevokedAtUnixNano() == 0 {
			jc.RevokedAtUnixNano, jc.RevokedBy, jc.RevokeReason = fakeNow.UnixNano(), "admin/alice", req.GetReason()
		}
		if !slices.Contains(journals, jc.GetJournalId()) {
			journals = append(journals, jc.GetJournalId())
		}
		out.Revoked = append(out.Revoked, proto.CloneOf(jc))
		for _, in := range f.intermediates {
			if in.GetIssuerSerial() == jc.GetSerial() {
				if at := in.GetRevokeAtUnixNano(); at == 0 || at > fakeNow.UnixNano() {
					in.RevokeAtUnixNano = fakeNow.UnixNano()
				}
				out.Intermediates = append(out.Intermediates, proto.CloneOf(in))
			}
		}
	}
	// Each journal's bound journal CA: the one recorded last.
	for _, id := range journals {
		var bound *pactv1.JournalCA
		for _, jc := range f.journalCAs {
			if jc.GetJournalId() == id && (bound == nil || jc.GetRecordedAtUnixNano() > bound.GetRecordedAtUnixNano()) {
				bound = jc
			}
		}
		out.Bound = append(out.Bound, proto.CloneOf(bound))
	}
	return out, nil
}

func (f *fakeJournal) SaveSnapshot(_ *pactv1.SaveSnapshotRequest, stream grpc.ServerStreamingServer[pactv1.SaveSnapshotResponse]) error {
	if err := f.record(stream.Context(), "SaveSnapshot"); err != nil {
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

// startJournal serves fake over mTLS on loopback, requiring a client
// certificate from the test root, and returns its address.
func startJournal(t *testing.T, p *testPKI, fake *fakeJournal) string {
	t.Helper()
	_, addr := startJournalServer(t, p, fake)
	return addr
}

// startJournalServer is startJournal that also returns the server, so a
// test can stop it mid-call.
func startJournalServer(t *testing.T, p *testPKI, fake *fakeJournal) (*grpc.Server, string) {
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

// silentAddr is an address whose listener takes connections and never
// answers, as a journal does before it serves; closed at test end.
func silentAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return lis.Addr().String()
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
	rec      *recorder // notes the calls made, when set
	key      []byte    // a key PEM that must not reach the output
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
	a := &app{env: env.withDefaults()}
	a.newClient = a.dial
	if o.rec != nil {
		recordWith(a, o.rec)
	}
	code = a.run(context.Background(), args)
	stdout, stderr = out.String(), errb.String()
	if p != nil {
		assertNoKeyMaterial(t, stdout+stderr, p.admin.keyPEM)
	}
	if o.key != nil {
		assertNoKeyMaterial(t, stdout+stderr, o.key)
	}
	return code, stdout, stderr
}
