package raftfsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/hwid"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// The random command generator proposes the way journals do, from its own
// view of the registry (a replica it applies its commands to), but often
// wrongly: it draws from small pools so that commands collide, and it
// retries, reuses stale serials and reports other nodes' hardware. Once
// generated, the log is fixed; the view is not one of the replicas tested.
const (
	genNodes = 24
	genMACs  = 256
	genBMCs  = 128
)

type commandGen struct {
	r      *rand.Rand
	view   *raftfsm.FSM
	apply  *raftfsmtest.Applier
	now    int64 // proposer clock, Unix nanoseconds
	serial int
	fresh  int // node ids below this have been proposed for registration
}

func newCommandGen(seed int64) *commandGen {
	view := raftfsm.New()
	if err := raftfsmtest.Restore(view, genBase()); err != nil {
		panic(err)
	}
	return &commandGen{r: rand.New(rand.NewSource(seed)), view: view, apply: &raftfsmtest.Applier{FSM: view}, now: t0 * 1e9}
}

func genMAC(i int) string { return fmt.Sprintf("52:54:00:00:01:%02x", i) }

// genBase is the state random logs start from, so that the first commands
// already meet what otherwise takes many to build: a revoked node, an
// inactive one with its last sighting, and revoked serials, some due to be
// pruned.
func genBase() *pactv1.Snapshot {
	snap := &pactv1.Snapshot{
		Nodes: []*pactv1.Node{
			node("node-22", pactv1.NodeState_NODE_STATE_REVOKED, raftfsmtest.Hardware("S90", genMAC(1), genMAC(2)), cert("c-revoked", "spki-revoked")),
			node("node-23", pactv1.NodeState_NODE_STATE_INACTIVE, raftfsmtest.Hardware("S91", genMAC(3)), cert("c-inactive", "spki-inactive")),
		},
		LastSeen: []*pactv1.LastSeen{{NodeId: "node-23", AtUnixNano: (t0 - hour) * 1e9}},
	}
	for i := range 8 {
		snap.Revoked = append(snap.Revoked, &pactv1.RevokedSerial{Serial: fmt.Sprintf("r-%d", i), NotAfterUnix: t0 + int64(i)*6*hour})
	}
	snap.Revoked = append(snap.Revoked, &pactv1.RevokedSerial{Serial: "c-revoked", NotAfterUnix: t0 + 3*day})
	return snap
}

func (g *commandGen) commands(n int) []*pactv1.Command {
	out := make([]*pactv1.Command, n)
	for i := range out {
		out[i] = g.next()
		g.apply.Apply(out[i])
	}
	return out
}

func (g *commandGen) hardware() *pactv1.HardwareIdentity {
	var macs []string
	for range 1 + g.r.Intn(3) {
		macs = append(macs, genMAC(g.r.Intn(genMACs)))
	}
	bmc, ek := "", ""
	if g.r.Intn(4) != 0 {
		bmc = fmt.Sprintf("S%02d", g.r.Intn(genBMCs))
	}
	if g.r.Intn(5) == 0 {
		ek = fmt.Sprintf("%064x", g.r.Intn(8))
	}
	return normalHW(macs, bmc, ek)
}

func normalHW(macs []string, bmc, ek string) *pactv1.HardwareIdentity {
	id, err := hwid.Normalize(macs, bmc, ek)
	if err != nil {
		panic(err)
	}
	return &pactv1.HardwareIdentity{Macs: id.MACs, BmcSerial: id.BMCSerial, TpmEkHash: id.EKHash}
}

// newCert returns a new certificate for id, a third of the time for the key
// id already holds (a retry).
func (g *commandGen) newCert(id string, notAfter int64) *pactv1.CertificateInfo {
	g.serial++
	spki := fmt.Sprintf("spki-%d", g.serial)
	if n, ok := g.view.Node(id); ok && n.GetCert() != nil && g.r.Intn(3) == 0 {
		spki = n.GetCert().GetSpkiSha256()
	}
	return raftfsmtest.Cert(fmt.Sprintf("c-%d", g.serial), spki, notAfter)
}

// livenessTimeout is the generator's node liveness timeout: takeovers and
// mark-inactive commands use now-livenessTimeout as their cutoff.
const livenessTimeout = 3 * hour

func (g *commandGen) vcluster() string {
	if g.r.Intn(4) == 0 {
		return "" // maintenance mode
	}
	return fmt.Sprintf("vc-%d", g.r.Intn(3))
}

// someNodes returns up to max node ids from the pool, perhaps one nobody
// registered and perhaps one twice.
func (g *commandGen) someNodes(max int) []string {
	var ids []string
	for range g.r.Intn(max + 1) {
		ids = append(ids, fmt.Sprintf("node-%02d", g.r.Intn(genNodes+2)))
	}
	return ids
}

func (g *commandGen) next() *pactv1.Command {
	g.now += g.r.Int63n(2*hour) * 1e9
	nowUnix := g.now / 1e9
	p := raftfsmtest.Proposer{
		Actor:         fmt.Sprintf("journal-%d", g.r.Intn(3)),
		AtUnixNano:    g.now,
		Source:        fmt.Sprintf("10.0.0.%d:443", g.r.Intn(4)),
		CorrelationID: fmt.Sprintf("req-%d", g.r.Intn(1000)),
	}
	id := fmt.Sprintf("node-%02d", g.r.Intn(genNodes))
	n, known := g.view.Node(id)
	switch k := g.r.Intn(100); {
	case k < 24:
		if g.fresh < genNodes && g.r.Intn(4) != 0 {
			id = fmt.Sprintf("node-%02d", g.fresh)
			g.fresh++
		}
		hw := g.hardware()
		switch g.r.Intn(12) {
		case 0:
			hw.Macs[0] = strings.ReplaceAll(hw.Macs[0], ":", "-") // not normalised
		case 1:
			id = "bad id"
		case 2:
			if known {
				hw = n.GetHardware() // another node's hardware, or its own again after a decommission
			}
		}
		if sid := g.registeredSPIFFEID(id); sid != "" {
			return p.RegisterNodeWithSPIFFEID(id, g.vcluster(), hw, sid)
		}
		return p.RegisterNode(id, g.vcluster(), hw)
	case k < 46:
		reported := n.GetHardware()
		switch {
		case !known || g.r.Intn(6) == 0:
			reported = g.hardware()
		case g.r.Intn(4) == 0: // an extra NIC, perhaps another node's
			reported = normalHW(append(slices.Clone(reported.GetMacs()), genMAC(g.r.Intn(genMACs))), reported.GetBmcSerial(), reported.GetTpmEkHash())
		}
		c := g.newCert(id, nowUnix+3*day)
		if n.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && g.r.Intn(2) == 0 {
			// A rebooted node enrolls again; the journal saw no stream
			// from it within the liveness timeout (or thinks so).
			return p.ActivateTakeover(id, reported, c, g.now-livenessTimeout*1e9)
		}
		return p.Activate(id, reported, c)
	case k < 62:
		prev := fmt.Sprintf("c-%d", g.r.Intn(g.serial+1))
		if known && g.r.Intn(5) != 0 {
			prev = n.GetCert().GetSerial()
		}
		return p.Renew(id, prev, g.newCert(id, nowUnix+3*day))
	case k < 70:
		in := raftfsmtest.Intermediate(fmt.Sprintf("journal-%d", g.r.Intn(3)), fmt.Sprintf("i-%d", g.r.Intn(12)), nowUnix-hour+g.r.Int63n(2*day))
		if g.r.Intn(10) == 0 {
			in.Der = nil
		}
		return p.PublishIntermediate(in)
	case k < 75:
		if g.r.Intn(8) == 0 {
			id = "node-99" // nobody's
		}
		return p.Decommission(id) // of any state, revoked ones included
	case k < 84:
		expect := n.GetVcluster()
		if g.r.Intn(6) == 0 {
			expect = g.vcluster() // a stale view
		}
		to := g.vcluster()
		switch g.r.Intn(12) {
		case 0:
			to = "vc 0" // not a valid name
		case 1:
			to = expect // already there
		}
		return p.Assign(id, to, expect)
	case k < 89:
		return p.LivenessDigest(fmt.Sprintf("journal-%d", g.r.Intn(3)), g.someNodes(6)...)
	case k < 95:
		return g.svidSeen(p, id, n)
	default:
		// The leader's sweep: the Active nodes it thinks are stale, with
		// a few others, some of which a digest has just reported.
		ids := g.someNodes(2)
		for _, id := range slices.Sorted(maps.Keys(g.view.ActiveLastSeen())) {
			if g.r.Intn(2) == 0 {
				ids = append(ids, id)
			}
		}
		return p.MarkInactive(g.now-livenessTimeout*1e9, ids...)
	}
}

// genTrustDomain is the SPIRE trust domain of the generated SVIDs.
const genTrustDomain = "pact.local"

// genSPIFFE is the pool of SPIFFE ID overrides registrations draw from.
const genSPIFFE = 6

// registeredSPIFFEID returns the SPIFFE ID override a registration of id
// carries: usually none, sometimes one from a small pool (so registrations
// collide), its own default ID, or an invalid one.
func (g *commandGen) registeredSPIFFEID(id string) string {
	if g.r.Intn(4) != 0 {
		return ""
	}
	switch g.r.Intn(10) {
	case 0:
		return "spiffe://" + genTrustDomain + "/pact-agent/node-99" // another node's default
	case 1:
		return "https://" + genTrustDomain + "/custom" // not a SPIFFE ID
	case 2:
		return "spiffe://" + genTrustDomain + raftfsm.DefaultSPIFFEPath(id)
	}
	return fmt.Sprintf("spiffe://%s/custom/%d", genTrustDomain, g.r.Intn(genSPIFFE))
}

// svidSeen proposes as a journal does when an SVID opens a stream, mostly
// for the ID the node maps to, sometimes for another node's or one nobody
// holds, and with a new serial, the recorded one, or one that was revoked.
func (g *commandGen) svidSeen(p raftfsmtest.Proposer, id string, n *pactv1.Node) *pactv1.Command {
	sid := raftfsm.SPIFFEIDOf(n, genTrustDomain)
	switch g.r.Intn(8) {
	case 0:
		sid = fmt.Sprintf("spiffe://%s/custom/%d", genTrustDomain, g.r.Intn(genSPIFFE))
	case 1:
		sid = fmt.Sprintf("spiffe://%s/pact-agent/node-%02d", genTrustDomain, g.r.Intn(genNodes+2))
	}
	g.serial++
	serial := fmt.Sprintf("s-%d", g.serial)
	notAfter := g.now/1e9 + hour + g.r.Int63n(day)
	switch g.r.Intn(6) {
	case 0:
		serial = n.GetCert().GetSerial() // the stream opened again on the same SVID
	case 1:
		serial = "c-revoked"
	}
	return p.SVIDSeen(id, sid, serial, notAfter)
}

func encodeAll(t testing.TB, cmds []*pactv1.Command) []*raft.Log {
	t.Helper()
	logs := make([]*raft.Log, len(cmds))
	for i, c := range cmds {
		data, err := raftfsm.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}
	}
	return logs
}

func apply(f *raftfsm.FSM, l *raft.Log) *raftfsm.Result { return f.Apply(l).(*raftfsm.Result) }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func sameResult(x, y *raftfsm.Result) bool {
	return errText(x.Err) == errText(y.Err) && x.Idempotent == y.Idempotent && proto.Equal(x.Node, y.Node)
}

func outcome(res *raftfsm.Result) string {
	switch {
	case res.Err != nil:
		return raftfsm.ErrorCode(res.Err)
	case res.Idempotent:
		return "idempotent"
	}
	return "ok"
}

// randomRun applies a random log to a replica, and returns it with the
// outcomes seen per command kind: the result's outcome, and "audit:ACTION"
// for each audit entry the command recorded ("audit:none" for a successful
// command that recorded none).
func randomRun(t testing.TB, seed int64, n int) (*raftfsm.FSM, *commandGen, map[string]map[string]int) {
	t.Helper()
	g := newCommandGen(seed)
	f := raftfsm.New()
	restoreNodes(t, f, genBase())
	var recorded []*pactv1.AuditEntry
	f.SetObserver(func(ev raftfsm.Event) { recorded = append(recorded, ev.Audit...) })
	seen := map[string]map[string]int{}
	for _, l := range encodeAll(t, g.commands(n)) {
		cmd, _ := raftfsm.Decode(l.Data)
		kind := strings.TrimPrefix(fmt.Sprintf("%T", cmd.GetOp()), "*pactv1.Command_")
		if seen[kind] == nil {
			seen[kind] = map[string]int{}
		}
		recorded = recorded[:0]
		res := apply(f, l)
		seen[kind][outcome(res)]++
		for _, e := range recorded {
			seen[kind]["audit:"+e.GetAction()]++
		}
		if res.Err == nil && len(recorded) == 0 {
			seen[kind]["audit:none"]++
		}
	}
	f.SetObserver(nil)
	return f, g, seen
}

// sameEvent compares what two replicas reported for one entry.
func sameEvent(x, y raftfsm.Event) bool {
	return x.Index == y.Index && x.BundleChanged == y.BundleChanged && slices.Equal(x.NodeIDs, y.NodeIDs) &&
		slices.EqualFunc(x.Audit, y.Audit, func(p, q *pactv1.AuditEntry) bool { return proto.Equal(p, q) })
}

// TestDeterminism applies one random log to three replicas, one of which
// joins halfway from the others' snapshot: every result, every event and
// the final snapshot bytes must be identical. It runs with the default audit
// ring and with one small enough to wrap many times.
func TestDeterminism(t *testing.T) {
	for _, capacity := range []int{raftfsm.DefaultAuditCapacity, 17} {
		for seed := int64(1); seed <= 5; seed++ {
			t.Run(fmt.Sprintf("audit %d seed %d", capacity, seed), func(t *testing.T) {
				base := genBase()
				logs := encodeAll(t, newCommandGen(seed).commands(400))
				a, b, late := raftfsm.NewWithAuditCapacity(capacity), raftfsm.NewWithAuditCapacity(capacity), raftfsm.NewWithAuditCapacity(capacity)
				restoreNodes(t, a, base)
				restoreNodes(t, b, base)
				var evA, evB, evLate []raftfsm.Event
				a.SetObserver(func(ev raftfsm.Event) { evA = append(evA, ev) })
				b.SetObserver(func(ev raftfsm.Event) { evB = append(evB, ev) })
				half := len(logs) / 2
				for i, l := range logs {
					evA, evB, evLate = evA[:0], evB[:0], evLate[:0]
					ra, rb := apply(a, l), apply(b, l)
					if !sameResult(ra, rb) {
						t.Fatalf("entry %d: replicas disagree: %+v vs %+v", l.Index, ra, rb)
					}
					if !slices.EqualFunc(evA, evB, sameEvent) {
						t.Fatalf("entry %d: replicas report %v vs %v", l.Index, evA, evB)
					}
					switch {
					case i == half:
						if err := raftfsmtest.RestoreBytes(late, snapshotBytes(t, a)); err != nil {
							t.Fatal(err)
						}
						late.SetObserver(func(ev raftfsm.Event) { evLate = append(evLate, ev) })
					case i > half:
						if rl := apply(late, l); !sameResult(ra, rl) {
							t.Fatalf("entry %d: the replica restored at %d disagrees: %+v vs %+v", l.Index, half+1, ra, rl)
						}
						if !slices.EqualFunc(evA, evLate, sameEvent) {
							t.Fatalf("entry %d: the replica restored at %d reports %v vs %v", l.Index, half+1, evLate, evA)
						}
					}
				}
				sa := snapshotBytes(t, a)
				if !bytes.Equal(sa, snapshotBytes(t, b)) || !bytes.Equal(sa, snapshotBytes(t, late)) {
					t.Error("replicas that applied the same log have different snapshots")
				}
				if n := len(a.Audit("", 0, 2*capacity)); capacity < 100 && n != capacity {
					t.Errorf("the audit ring holds %d entries, want it full (%d)", n, capacity)
				}
			})
		}
	}
}

// TestRandomLogInvariants checks the invariants after every command of
// random logs.
func TestRandomLogInvariants(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			f := raftfsm.New()
			restoreNodes(t, f, genBase())
			for _, l := range encodeAll(t, newCommandGen(seed).commands(300)) {
				apply(f, l)
				checkInvariants(t, f)
				if t.Failed() {
					cmd, _ := raftfsm.Decode(l.Data)
					t.Fatalf("after entry %d: %v", l.Index, cmd)
				}
			}
		})
	}
}

// TestRandomLogCoverage keeps the generator honest: the random log must
// reach both success and failure for every kind of command that can fail,
// and every audit action.
func TestRandomLogCoverage(t *testing.T) {
	_, _, seen := randomRun(t, 1, 600)
	for _, kind := range []string{"RegisterNode", "Activate", "Renew", "PublishIntermediate", "Decommission", "Assign", "SvidSeen"} {
		fails := 0
		for o, n := range seen[kind] {
			if o != "ok" && o != "idempotent" && !strings.HasPrefix(o, "audit:") {
				fails += n
			}
		}
		if seen[kind]["ok"] == 0 || fails == 0 {
			t.Errorf("%s: outcomes %v, want successes and failures", kind, seen[kind])
		}
	}
	for _, want := range []struct{ kind, outcome string }{
		{"Activate", "idempotent"}, {"Activate", "ALREADY_ACTIVE"}, {"Activate", "NODE_REVOKED"},
		{"Activate", "HARDWARE_IDENTITY_CONFLICT"}, {"RegisterNode", "HARDWARE_IDENTITY_CONFLICT"},
		{"RegisterNode", "INVALID_ARGUMENT"}, {"Renew", "STALE_CERTIFICATE"},

		{"Decommission", "NODE_REVOKED"}, {"Decommission", "NODE_NOT_ENROLLED"},
		{"Assign", "idempotent"}, {"Assign", "VCLUSTER_CHANGED"}, {"Assign", "INVALID_ARGUMENT"},
		{"Assign", "NODE_REVOKED"}, {"Assign", "NODE_NOT_ENROLLED"},

		{"RegisterNode", "audit:register"}, {"Activate", "audit:enroll"}, {"Activate", "audit:takeover"},
		{"Renew", "audit:renew"}, {"Decommission", "audit:decommission"},
		{"Assign", "audit:assign"}, {"Assign", "audit:unassign"}, {"Assign", "audit:move"},
		{"LivenessDigest", "audit:active"}, {"LivenessDigest", "audit:none"},
		{"MarkInactive", "audit:inactive"}, {"MarkInactive", "audit:none"},

		{"SvidSeen", "audit:enroll"}, {"SvidSeen", "audit:renew"}, {"SvidSeen", "idempotent"},
		{"SvidSeen", "NODE_REVOKED"}, {"SvidSeen", "NODE_NOT_ENROLLED"}, {"SvidSeen", "STALE_CERTIFICATE"},
	} {
		if seen[want.kind][want.outcome] == 0 {
			t.Errorf("%s never ended %s: %v", want.kind, want.outcome, seen[want.kind])
		}
	}
	t.Logf("outcomes: %v", seen)
}

func sameResolution(x, y raftfsm.Resolution) bool {
	return x.Node.GetNodeId() == y.Node.GetNodeId() && x.Mismatch == y.Mismatch && raftfsm.ErrorCode(x.Err) == raftfsm.ErrorCode(y.Err)
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	a, g, _ := randomRun(t, 3, 400)
	data := snapshotBytes(t, a)
	b := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(b, data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, snapshotBytes(t, b)) {
		t.Fatal("Snapshot → Restore → Snapshot changed the bytes")
	}

	var idents []hwid.Identity
	for i := range genNodes + 1 {
		id := fmt.Sprintf("node-%02d", i)
		na, oka := a.Node(id)
		nb, okb := b.Node(id)
		if oka != okb || !proto.Equal(na, nb) {
			t.Errorf("Node(%s): %v, %v before; %v, %v after", id, na, oka, nb, okb)
		}
		if na != nil {
			idents = append(idents, ident(na.GetHardware()))
		}
	}
	for range 200 {
		idents = append(idents, ident(g.hardware()))
	}
	resolved := 0
	for _, id := range idents {
		ra, rb := a.Resolve(id), b.Resolve(id)
		if !sameResolution(ra, rb) {
			t.Errorf("Resolve(%v) = %v/%q/%v before, %v/%q/%v after", id, ra.Node.GetNodeId(), ra.Mismatch, ra.Err, rb.Node.GetNodeId(), rb.Mismatch, rb.Err)
		}
		if ra.Err == nil {
			resolved++
		}
	}
	if resolved == 0 {
		t.Error("no identity resolved: the comparison proves nothing")
	}
	for st := range pactv1.NodeState_name {
		state := pactv1.NodeState(st)
		na, nb := a.Nodes(raftfsm.Filter{State: state}), b.Nodes(raftfsm.Filter{State: state})
		if !slices.EqualFunc(na, nb, func(x, y *pactv1.Node) bool { return proto.Equal(x, y) }) {
			t.Errorf("Nodes(%v) differs after restore", state)
		}
	}
	for _, now := range []int64{0, t0, g.now / 1e9, g.now/1e9 + day} {
		if x, y := serials(a.Intermediates(now)), serials(b.Intermediates(now)); !slices.Equal(x, y) {
			t.Errorf("Intermediates(%d) = %v before, %v after", now, x, y)
		}
	}
	for i := range 8 {
		s := fmt.Sprintf("r-%d", i)
		if a.IsRevoked(s) != b.IsRevoked(s) {
			t.Errorf("IsRevoked(%s) differs after restore", s)
		}
	}
}

// TestSnapshotIsPointInTime: Raft persists a snapshot while Apply goes on;
// what it writes is the state when Snapshot was called.
func TestSnapshotIsPointInTime(t *testing.T) {
	f, a := newRegistry(t)
	want := snapshotBytes(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
	mustApply(t, a, journal.PublishIntermediate(raftfsmtest.Intermediate("journal-1", "i-1", t0+day)))
	mustApply(t, a, admin.RegisterNode("node-9", "", raftfsmtest.Hardware("S9", mac9)))
	var sink raftfsmtest.Sink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !sink.Closed || sink.Cancelled {
		t.Errorf("sink closed %v, cancelled %v; want closed", sink.Closed, sink.Cancelled)
	}
	if !bytes.Equal(sink.Bytes(), want) {
		t.Error("a snapshot persisted after later commands includes them")
	}
}

type failingSink struct{ raftfsmtest.Sink }

func (s *failingSink) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestPersistCancelsOnWriteError(t *testing.T) {
	f, _ := newRegistry(t)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink failingSink
	if err := snap.Persist(&sink); err == nil {
		t.Fatal("Persist succeeded into a sink that cannot be written")
	}
	if !sink.Cancelled || sink.Closed {
		t.Errorf("sink closed %v, cancelled %v; want cancelled", sink.Closed, sink.Cancelled)
	}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

func TestRestoreRejects(t *testing.T) {
	active := func(id string, hw *pactv1.HardwareIdentity) *pactv1.Node {
		return node(id, pactv1.NodeState_NODE_STATE_ACTIVE, hw, cert("c-"+id, "spki-"+id))
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"truncated", []byte{0x0a, 0x05, 'a'}},
		{"not protobuf", []byte{0xff, 0xff, 0xff, 0xff}},
		{"a node twice", mustMarshal(t, &pactv1.Snapshot{Nodes: []*pactv1.Node{active("node-1", hw1()), active("node-1", hw2())}})},
		{"a node twice, once revoked", mustMarshal(t, &pactv1.Snapshot{Nodes: []*pactv1.Node{
			node("node-1", pactv1.NodeState_NODE_STATE_REVOKED, hw1(), nil), active("node-1", hw1()),
		}})},
		{"a node without id", mustMarshal(t, &pactv1.Snapshot{Nodes: []*pactv1.Node{active("", hw1())}})},
		{"two live nodes share a MAC", mustMarshal(t, &pactv1.Snapshot{Nodes: []*pactv1.Node{
			active("node-1", hw1()), node("node-2", pactv1.NodeState_NODE_STATE_INACTIVE, raftfsmtest.Hardware("S2", mac2), nil),
		}})},
		{"two live nodes share a BMC serial", mustMarshal(t, &pactv1.Snapshot{Nodes: []*pactv1.Node{
			active("node-1", hw1()), node("node-2", pactv1.NodeState_NODE_STATE_REGISTERED, raftfsmtest.Hardware("S1", mac9), nil),
		}})},
		{"two live nodes share a TPM EK", mustMarshal(t, &pactv1.Snapshot{Nodes: []*pactv1.Node{
			active("node-2", hw2()), active("node-9", withEK(raftfsmtest.Hardware("S9", mac9), ekA)),
		}})},
		{"liveness of an unknown node", mustMarshal(t, &pactv1.Snapshot{
			Nodes:    []*pactv1.Node{active("node-1", hw1())},
			LastSeen: []*pactv1.LastSeen{{NodeId: "node-1", AtUnixNano: t0 * 1e9}, {NodeId: "node-9", AtUnixNano: t0 * 1e9}},
		})},
	}
	// The same states as a stream of records (format 2).
	for _, tt := range tests {
		if s, err := raftfsm.DecodeSnapshot(tt.data); err == nil {
			data, err := raftfsm.EncodeSnapshot(s)
			if err != nil {
				t.Fatal(err)
			}
			tests = append(tests, struct {
				name string
				data []byte
			}{tt.name + " (format 2)", data})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, a := newRegistry(t)
			before := snapshotBytes(t, f)
			err := raftfsmtest.RestoreBytes(f, tt.data)
			if err == nil {
				t.Fatal("Restore accepted it")
			}
			// The CLI's inspect refuses it the same way.
			checkAgrees(t, tt.data, err, 0)
			if !bytes.Equal(before, snapshotBytes(t, f)) {
				t.Error("a failed Restore changed the state")
			}
			// And the FSM still works.
			mustApply(t, a, journal.Activate("node-1", hw1(), cert("01", "spki-1")))
		})
	}
	t.Run("read error", func(t *testing.T) {
		f, _ := newRegistry(t)
		before := snapshotBytes(t, f)
		if err := f.Restore(io.NopCloser(errReader{})); err == nil {
			t.Fatal("Restore accepted a failed read")
		}
		if !bytes.Equal(before, snapshotBytes(t, f)) {
			t.Error("a failed Restore changed the state")
		}
	})
}

func TestRestoreAcceptsRevokedNodeSharingHardware(t *testing.T) {
	f := raftfsm.New()
	restoreNodes(t, f, &pactv1.Snapshot{Nodes: []*pactv1.Node{
		node("node-1", pactv1.NodeState_NODE_STATE_REVOKED, hw1(), cert("01", "spki-1")),
		node("node-7", pactv1.NodeState_NODE_STATE_REGISTERED, hw1(), nil),
		node("node-8", pactv1.NodeState_NODE_STATE_REVOKED, hw1(), nil),
	}})
	if r := f.Resolve(ident(hw1())); r.Err != nil || r.Node.GetNodeId() != "node-7" {
		t.Errorf("hardware resolves to %v (%v), want the live node-7", r.Node.GetNodeId(), r.Err)
	}
}

func TestRestoreReplacesState(t *testing.T) {
	f, _ := newRegistry(t)
	restoreNodes(t, f, &pactv1.Snapshot{Nodes: []*pactv1.Node{node("node-7", pactv1.NodeState_NODE_STATE_REGISTERED, raftfsmtest.Hardware("S9", mac9), nil)}})
	if _, ok := f.Node("node-1"); ok {
		t.Error("node-1 survived a Restore that does not contain it")
	}
	if r := f.Resolve(ident(hw1())); !errors.Is(r.Err, raftfsm.ErrNodeNotEnrolled) {
		t.Errorf("node-1's hardware still resolves after Restore: %v, %v", r.Node.GetNodeId(), r.Err)
	}
}

// bigRegistry is a registry of n nodes, each with two MACs, a BMC serial
// and, when active, a certificate of realistic size.
func bigRegistry(n int, state pactv1.NodeState) *pactv1.Snapshot {
	mac := func(i int) string {
		return fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", byte(i>>32), byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
	}
	snap := &pactv1.Snapshot{Nodes: make([]*pactv1.Node, n)}
	for i := range n {
		nd := &pactv1.Node{
			NodeId:               fmt.Sprintf("node-%06d", i),
			Hardware:             &pactv1.HardwareIdentity{Macs: []string{mac(2 * i), mac(2*i + 1)}, BmcSerial: fmt.Sprintf("BMC%08d", i)},
			State:                state,
			Vcluster:             fmt.Sprintf("vc-%d", i%16),
			RegisteredAtUnixNano: t0 * 1e9,
			RegisteredBy:         "admin-alice",
			UpdatedAtUnixNano:    t0 * 1e9,
		}
		if state == pactv1.NodeState_NODE_STATE_ACTIVE {
			nd.Cert = bigCert(i)
			nd.ActivatedAtUnixNano = t0 * 1e9
		}
		snap.Nodes[i] = nd
	}
	return snap
}

// bigDER stands in for a P-256 agent certificate (about 650 bytes of DER).
var bigDER = bytes.Repeat([]byte{0x30}, 650)

func bigCert(i int) *pactv1.CertificateInfo {
	return &pactv1.CertificateInfo{
		Serial:        fmt.Sprintf("%032x", i),
		SpkiSha256:    fmt.Sprintf("%064x", i),
		NotBeforeUnix: t0,
		NotAfterUnix:  t0 + 3*day,
		IssuerSerial:  fmt.Sprintf("%032x", 1<<40),
		Der:           bigDER,
	}
}

const benchNodes = 100_000

func BenchmarkSnapshotPersist(b *testing.B) {
	f := raftfsm.New()
	restoreNodes(b, f, bigRegistry(benchNodes, pactv1.NodeState_NODE_STATE_ACTIVE))
	var sink raftfsmtest.Sink
	b.ReportAllocs()
	for b.Loop() {
		sink.Reset()
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		if err := snap.Persist(&sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
	}
	b.SetBytes(int64(sink.Len()))
}

func BenchmarkSnapshotRestore(b *testing.B) {
	f := raftfsm.New()
	restoreNodes(b, f, bigRegistry(benchNodes, pactv1.NodeState_NODE_STATE_ACTIVE))
	data := snapshotBytes(b, f)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := raftfsmtest.RestoreBytes(f, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotRoundTrip persists and restores the same registry of
// benchNodes active nodes in each iteration and reports both times and
// their ratio: measured side by side, the ratio holds on a loaded machine
// where the absolute times do not (issue 11's target: restore/persist <= 1).
func BenchmarkSnapshotRoundTrip(b *testing.B) {
	f := raftfsm.New()
	restoreNodes(b, f, bigRegistry(benchNodes, pactv1.NodeState_NODE_STATE_ACTIVE))
	var sink raftfsmtest.Sink
	var persist, restore, persistCPU, restoreCPU time.Duration
	for b.Loop() {
		sink.Reset()
		runtime.GC() // the previous restore's garbage is neither's cost
		start, startCPU := time.Now(), cpuTime(b)
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		if err := snap.Persist(&sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
		mid, midCPU := time.Now(), cpuTime(b)
		if err := raftfsmtest.RestoreBytes(f, sink.Bytes()); err != nil {
			b.Fatal(err)
		}
		persist, restore = persist+mid.Sub(start), restore+time.Since(mid)
		persistCPU, restoreCPU = persistCPU+midCPU-startCPU, restoreCPU+cpuTime(b)-midCPU
	}
	b.ReportMetric(restoreCPU.Seconds()/persistCPU.Seconds(), "restore/persist_cpu")
	b.ReportMetric(persist.Seconds()/float64(b.N), "persist_s/op")
	b.ReportMetric(restore.Seconds()/float64(b.N), "restore_s/op")
	b.ReportMetric(restore.Seconds()/persist.Seconds(), "restore/persist")
}

// cpuTime is the CPU time this process has used, user and system: a
// measure the other work on a shared machine does not inflate.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
