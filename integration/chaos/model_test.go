package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is a compact way to write one call of a hand-made history.
type op struct {
	call, ret int64 // milliseconds; ret < 0: unknown outcome
	node      string
	in        Input
	out       Output
}

func history(ops ...op) []porcupine.Operation {
	var h []porcupine.Operation
	for i, o := range ops {
		in := o.in
		in.Node = o.node
		r := &Record{ID: i, Client: 0, In: in, Out: o.out, Call: o.call * 1e6, Return: o.ret * 1e6}
		if o.ret < 0 {
			r.Out.Result = ResultUnknown
		}
		h = append(h, r.Operation(0))
	}
	return h
}

// check runs porcupine on h. Its time limit is a hang guard: these
// histories take milliseconds, and a model whose search blows up runs far
// past a minute, so it answers Unknown and the test fails, however loaded
// the machine.
func check(t *testing.T, sp Spec, h []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(sp.PorcupineModel(), h, time.Minute)
}

var (
	register = Input{Kind: OpRegister}
	decomm   = Input{Kind: OpDecommission}
	read     = Input{Kind: OpRead}
	ok       = Output{Result: ResultOK}
)

func enrollIn(key string) Input   { return Input{Kind: OpEnroll, Key: key} }
func movedIn(key string) Input    { return Input{Kind: OpEnroll, Key: key, Moved: true} }
func takeoverIn(key string) Input { return Input{Kind: OpTakeover, Key: key} }
func renewIn(prev, key string) Input {
	return Input{Kind: OpRenew, Prev: prev, Key: key}
}
func cert(serial, key string) Output { return Output{Result: ResultOK, Serial: serial, Key: key} }
func fail(reason string) Output      { return Output{Result: ResultFailed, Reason: reason} }
func retryable(reason string) Output {
	return Output{Result: ResultFailed, Reason: reason, Retryable: true}
}
func unknown() Output { return Output{Result: ResultUnknown, Reason: "OUTCOME_UNKNOWN"} }
func readOut(state, serial, key string) Output {
	return Output{Result: ResultOK, State: state, Serial: serial, Key: key}
}

func TestModelLinearizable(t *testing.T) {
	cases := map[string][]op{
		"the whole life of a node": {
			{0, 10, "n1", read, fail("NODE_NOT_ENROLLED")},
			{11, 20, "n1", register, ok},
			{21, 30, "n1", enrollIn("k1"), cert("s1", "k1")},
			{31, 40, "n1", enrollIn("k1"), cert("s1", "k1")}, // retry: same certificate
			{41, 50, "n1", enrollIn("k9"), fail("ALREADY_ACTIVE")},
			{51, 60, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
			{61, 70, "n1", renewIn("s1", "k3"), fail("STALE_CERTIFICATE")},
			{71, 80, "n1", read, readOut(StateActive, "s2", "k2")},
			{81, 90, "n1", decomm, ok},
			{91, 100, "n1", renewIn("s2", "k4"), fail("NODE_REVOKED")},
			{101, 110, "n1", enrollIn("k5"), fail("NODE_REVOKED")},
			{111, 120, "n1", read, readOut(StateRevoked, "s2", "k2")},
			{121, 130, "n1", register, ok},
			{131, 140, "n1", read, readOut(StateRegistered, "", "")},
			{141, 150, "n1", renewIn("s2", "k6"), fail("NODE_REVOKED")},
		},
		"concurrent register and read": {
			{0, 100, "n1", register, ok},
			{10, 20, "n1", read, fail("NODE_NOT_ENROLLED")},
			{30, 40, "n1", read, readOut(StateRegistered, "", "")},
		},
		"an unknown enrollment that took effect, found by a retry": {
			{0, 10, "n1", register, ok},
			{11, -1, "n1", enrollIn("k1"), unknown()},
			{30, 40, "n1", read, readOut(StateActive, "s1", "k1")},
			{41, 50, "n1", enrollIn("k1"), cert("s1", "k1")},
			{51, 60, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
		},
		"an unknown renewal that did not take effect": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, -1, "n1", renewIn("s1", "k2"), unknown()},
			{40, 50, "n1", enrollIn("k2"), fail("ALREADY_ACTIVE")},
			{51, 60, "n1", read, readOut(StateActive, "s1", "k1")},
		},
		"an unknown decommission that took effect later": {
			{0, 10, "n1", register, ok},
			{11, -1, "n1", decomm, unknown()},
			{20, 30, "n1", read, readOut(StateRegistered, "", "")},
			{40, 50, "n1", read, readOut(StateRevoked, "", "")},
		},
		"no leader changes nothing": {
			{0, 10, "n1", register, fail("NO_LEADER")},
			{11, 20, "n1", read, fail("NODE_NOT_ENROLLED")},
			{21, 30, "n1", register, ok},
		},
		"a reboot with a new key: refused inside the window, a takeover after": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", takeoverIn("k2"), fail("ALREADY_ACTIVE")},
			{31, 40, "n1", takeoverIn("k3"), retryable("ALREADY_ACTIVE")},
			{41, 50, "n1", takeoverIn("k4"), cert("s4", "k4")},
			{51, 60, "n1", renewIn("s1", "k5"), fail("STALE_CERTIFICATE")},
			{61, 70, "n1", read, readOut(StateActive, "s4", "k4")},
		},
		"a registration refused: another node holds the hardware": {
			{0, 10, "n1", register, fail("HARDWARE_IDENTITY_CONFLICT")},
			{11, 20, "n1", read, fail("NODE_NOT_ENROLLED")},
			{21, 30, "n1", register, ok},
		},
		// A renewal with the current certificate may be refused only for a
		// reason that says nothing about it.
		"a renewal with the current certificate refused NO_LEADER, RATE_LIMITED, unreachable": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), fail("NO_LEADER")},
			{31, 40, "n1", renewIn("s1", "k3"), fail("RATE_LIMITED")},
			{41, 50, "n1", renewIn("s1", "k4"), fail("UNREACHABLE")},
			{51, 60, "n1", renewIn("s1", "k5"), cert("s5", "k5")},
		},
		"a renewal racing a decommission refused as revoked": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 40, "n1", decomm, ok},
			{25, 35, "n1", renewIn("s1", "k2"), fail("NODE_REVOKED")},
		},
		"a replaced certificate refused UNAUTHENTICATED": {
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
			{31, 40, "n1", renewIn("s1", "k3"), fail("UNAUTHENTICATED")},
		},
		"nodes are independent": {
			{0, 10, "n1", register, ok},
			{0, 10, "n2", register, ok},
			{11, 20, "n2", decomm, ok},
			{21, 30, "n1", read, readOut(StateRegistered, "", "")},
			{21, 30, "n2", read, readOut(StateRevoked, "", "")},
		},
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			if got := check(t, Spec{}, history(ops...)); got != porcupine.Ok {
				t.Errorf("strict model: %s, want Ok", got)
			}
			if got := check(t, Spec{Allow: DesignAllowances}, history(ops...)); got != porcupine.Ok {
				t.Errorf("model with the design's allowances: %s, want Ok", got)
			}
		})
	}
}

func TestModelNotLinearizable(t *testing.T) {
	cases := map[string]struct {
		ops []op
		// allowed: the design's allowances accept it (a stale answer that
		// is not final).
		allowed bool
	}{
		"an acknowledged registration lost": {ops: []op{
			{0, 10, "n1", register, ok},
			{20, 30, "n1", read, fail("NODE_NOT_ENROLLED")},
		}},
		"a stale read after a decommission": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", decomm, ok},
			{31, 40, "n1", read, readOut(StateActive, "s1", "k1")},
		}},
		"a renewal after an acknowledged decommission": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", decomm, ok},
			{31, 40, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
		}},
		"two certificates for one registration": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", enrollIn("k2"), cert("s2", "k2")},
		}},
		"a write refused with NO_LEADER that took effect": {ops: []op{
			{0, 10, "n1", register, fail("NO_LEADER")},
			{20, 30, "n1", read, readOut(StateRegistered, "", "")},
		}},
		"a registration refused as existing that never was": {ops: []op{
			{0, 10, "n1", register, fail("NODE_ALREADY_ENROLLED")},
			{11, 20, "n1", read, fail("NODE_NOT_ENROLLED")},
		}},
		"a read that goes back in time": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
			{31, 40, "n1", read, readOut(StateActive, "s2", "k2")},
			{41, 50, "n1", read, readOut(StateActive, "s1", "k1")},
		}},
		"a certificate for another key": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "kX")},
		}},
		// Final refusals from a lagging copy: the blanket leniency the
		// model once had accepted these; the design allows none.
		"a renewal refused as stale with the current certificate": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), fail("STALE_CERTIFICATE")},
		}},
		"an enrollment refused as revoked after a new registration": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", decomm, ok},
			{21, 30, "n1", register, ok},
			{31, 40, "n1", enrollIn("k1"), fail("NODE_REVOKED")},
		}},
		"an unknown enrollment cannot explain a second key": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, -1, "n1", enrollIn("k1"), unknown()},
			{20, 30, "n1", enrollIn("k2"), cert("s2", "k2")},
			{31, 40, "n1", read, readOut(StateActive, "s1", "k1")},
		}},
		"a decommission refused as unknown node after its registration": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", decomm, fail("NODE_NOT_ENROLLED")},
		}},
		"an enrollment refused as not enrolled after its registration": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), fail("NODE_NOT_ENROLLED")},
		}},
		"a final ALREADY_ACTIVE after a new registration": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", decomm, ok},
			{31, 40, "n1", register, ok},
			{41, 50, "n1", enrollIn("k2"), fail("ALREADY_ACTIVE")},
		}},
		"an Enroll retry answered with a replaced certificate": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
			{31, 40, "n1", enrollIn("k1"), cert("s1", "k1")},
		}},
		"a takeover refused for a node not active": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", takeoverIn("k2"), fail("ALREADY_ACTIVE")},
		}},
		"a plain Enroll with another key takes an active node over": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", enrollIn("k2"), cert("s2", "k2")},
		}},
		"a hardware conflict for a node already registered": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", register, fail("HARDWARE_IDENTITY_CONFLICT")},
		}},
		"a takeover registered, then the old certificate renews": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", takeoverIn("k2"), cert("s2", "k2")},
			{31, 40, "n1", renewIn("s1", "k3"), cert("s3", "k3")},
		}},
		// takeover-wait: not final, so a lagging copy may give it.
		"a retryable ALREADY_ACTIVE after a new registration": {allowed: true, ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", decomm, ok},
			{31, 40, "n1", register, ok},
			{41, 50, "n1", enrollIn("k2"), retryable("ALREADY_ACTIVE")},
		}},
		// A lagging copy resolved the hardware to its previous owner.
		"a retryable ALREADY_ACTIVE for a node never active, whose hardware moved": {allowed: true, ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", movedIn("k2"), retryable("ALREADY_ACTIVE")},
		}},
		"a retryable ALREADY_ACTIVE for a key replaced by a renewal": {allowed: true, ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), cert("s2", "k2")},
			{31, 40, "n1", enrollIn("k2"), retryable("ALREADY_ACTIVE")}, // a copy from before the renewal
		}},
		// takeover-wait only where a copy could show the node active with
		// another key: never for a node never active on its own hardware.
		"a retryable ALREADY_ACTIVE for a node never active, on its own hardware": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k2"), retryable("ALREADY_ACTIVE")},
		}},
		"a retryable ALREADY_ACTIVE for the only key the node ever held": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", decomm, ok},
			{31, 40, "n1", register, ok},
			{41, 50, "n1", enrollIn("k1"), retryable("ALREADY_ACTIVE")},
		}},
		// A refusal of the node's current, unrevoked certificate is never
		// "no effect".
		"a renewal with the current certificate refused UNAUTHENTICATED": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), fail("UNAUTHENTICATED")},
		}},
		"a renewal with the current certificate refused in the TLS handshake": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), fail(ReasonCertRefused)},
		}},
		"a renewal with the current certificate refused INVALID_ARGUMENT": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", enrollIn("k1"), cert("s1", "k1")},
			{21, 30, "n1", renewIn("s1", "k2"), fail("INVALID_ARGUMENT")},
		}},
		"a renewal with the current certificate refused as revoked because an earlier registration's unseen certificate was": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, -1, "n1", enrollIn("k1"), unknown()}, // took effect before the decommission, or never
			{20, 30, "n1", decomm, ok},
			{31, 40, "n1", register, ok},
			{41, 50, "n1", enrollIn("k3"), cert("s3", "k3")},
			{51, 60, "n1", renewIn("s3", "k4"), fail("NODE_REVOKED")},
		}},
		"a renewal with the current certificate refused as stale because an earlier registration's unseen certificate was revoked": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, -1, "n1", enrollIn("k1"), unknown()},
			{20, 30, "n1", decomm, ok},
			{31, 40, "n1", register, ok},
			{41, 50, "n1", enrollIn("k3"), cert("s3", "k3")},
			{51, 60, "n1", renewIn("s3", "k4"), fail("STALE_CERTIFICATE")},
		}},
		// The workload sends no malformed call and decommissions with force.
		"a registration refused INVALID_ARGUMENT": {ops: []op{
			{0, 10, "n1", register, fail("INVALID_ARGUMENT")},
		}},
		"a forced decommission refused NODE_STREAMING": {ops: []op{
			{0, 10, "n1", register, ok},
			{11, 20, "n1", decomm, fail("NODE_STREAMING")},
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := check(t, Spec{}, history(c.ops...)); got != porcupine.Illegal {
				t.Errorf("strict model: %s, want Illegal", got)
			}
			want := porcupine.Illegal
			if c.allowed {
				want = porcupine.Ok
			}
			if got := check(t, Spec{Allow: DesignAllowances}, history(c.ops...)); got != want {
				t.Errorf("model with the design's allowances: %s, want %s", got, want)
			}
		})
	}
}

// TestModelNoLeaderDiagnosis: the diagnostic variant that treats NO_LEADER
// as unknown accepts a refused write that took effect.
func TestModelNoLeaderDiagnosis(t *testing.T) {
	h := history(
		op{0, 10, "n1", register, fail("NO_LEADER")},
		op{20, 30, "n1", read, readOut(StateRegistered, "", "")},
	)
	if got := check(t, Spec{NoLeaderUnknown: true}, h); got != porcupine.Ok {
		t.Errorf("NoLeaderUnknown: %s, want Ok", got)
	}
}

// TestModelUnknownRenewalsStayCheap: a run of renewals whose outcome is
// unknown (or, in the diagnosis, NO_LEADER) must not blow the search up,
// and an undetermined serial can never be one already seen for another key.
func TestModelUnknownRenewalsStayCheap(t *testing.T) {
	ops := []op{
		{0, 10, "n1", register, ok},
		{11, 20, "n1", enrollIn("k0"), cert("s0", "k0")},
		{21, 30, "n1", renewIn("s0", "k1"), fail("NO_LEADER")}, // took effect: s1
	}
	at := int64(31)
	for i := range 40 {
		ops = append(ops, op{at, at + 5, "n1", renewIn("s0", "kx"+string(rune('a'+i%26))+string(rune('a'+i/26))), fail("NO_LEADER")})
		at += 10
	}
	ops = append(ops, op{at, at + 5, "n1", renewIn("s0", "ky"), fail("STALE_CERTIFICATE")}, op{at + 10, at + 15, "n1", read, readOut(StateActive, "s1", "k1")})
	began := time.Now()
	if got := check(t, Spec{NoLeaderUnknown: true}, history(ops...)); got != porcupine.Ok {
		t.Errorf("diagnosis: %s, want Ok", got)
	}
	if got := check(t, Spec{}, history(ops...)); got != porcupine.Illegal {
		t.Errorf("strict: %s, want Illegal", got)
	}
	// A blown-up search would have hit check's time limit and answered
	// Unknown above.
	t.Logf("both checks took %v", time.Since(began))
	// The undetermined serial of k1 cannot be s0 (s0 is k0's).
	bad := history(
		op{0, 10, "n1", register, ok},
		op{11, 20, "n1", enrollIn("k0"), cert("s0", "k0")},
		op{21, -1, "n1", renewIn("s0", "k1"), unknown()},
		op{30, 40, "n1", read, readOut(StateActive, "s0", "k1")},
	)
	if got := check(t, Spec{}, bad); got != porcupine.Illegal {
		t.Errorf("a serial of another key bound to the unknown one: %s, want Illegal", got)
	}
}
