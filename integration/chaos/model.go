package chaos

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The registry as a sequential specification, one node at a time. A
// history is linearizable if and only if every node's sub-history is
// (nodes share nothing in the workload: each has its own hardware), so the
// model is partitioned per node and porcupine checks each node alone.

// OpKind is what a client asked the quorum to do.
type OpKind string

// Operations of the workload.
const (
	OpRegister     OpKind = "register"     // AdminService.RegisterNode
	OpEnroll       OpKind = "enroll"       // EnrollmentService.Enroll with a key
	OpRenew        OpKind = "renew"        // EnrollmentService.RenewCert over mTLS
	OpDecommission OpKind = "decommission" // AdminService.DecommissionNode, forced
	OpRead         OpKind = "read"         // AdminService.InspectNode (linearizable)
)

// Result says what a client learned from one call.
type Result string

// Results. Failed answers (a reason from the journal) are definite: the
// call changed nothing. Unknown answers (a timeout, OUTCOME_UNKNOWN, a
// connection lost after the request left) may or may not have taken effect.
const (
	ResultOK      Result = "ok"
	ResultFailed  Result = "failed"
	ResultUnknown Result = "unknown"
	// ResultApplied is an unknown outcome assumed to have taken effect
	// (its answer never arrived); the checker uses it to resolve unknown
	// outcomes afterwards.
	ResultApplied Result = "applied"
)

// Record states as the model and InspectNode name them.
const (
	StateNone       = "none" // never registered
	StateRegistered = "registered"
	StateActive     = "active"
	StateInactive   = "inactive"
	StateRevoked    = "revoked"
)

// unknownSerial stands for a serial the quorum chose but no client has been
// told yet (an enrollment or renewal with an unknown outcome that took
// effect). The first answer that reveals it binds it.
const unknownSerial = "?"

// Input is one call.
type Input struct {
	Kind OpKind
	Node string
	// Key is the SPKI hash of the key an Enroll or RenewCert request
	// carries in its CSR.
	Key string
	// Prev is the serial of the certificate a RenewCert call is made with.
	Prev string
}

// Output is what came back.
type Output struct {
	Result Result
	// Reason is the wire reason of a failure (NODE_REVOKED, NO_LEADER ...).
	Reason string
	// Serial and Key describe the certificate received (Enroll, RenewCert)
	// or the node's current certificate (InspectNode).
	Serial string
	Key    string
	// State is the node's state (InspectNode).
	State string
}

// ModelState is one node's registry record as the specification sees it.
// It is a value: Step never modifies one, it returns new ones.
type ModelState struct {
	State  string
	Serial string // current certificate ("" none, unknownSerial undetermined)
	Key    string // SPKI hash of the current certificate
	// Revoked holds the serials this node's decommissions put into the
	// revocation set (sorted).
	Revoked []string
	// Stale-read bookkeeping for the lenient model (see Spec.Lenient):
	// whether the node was ever revoked, and every certificate it ever held
	// as "key/serial" (sorted).
	EverRevoked bool
	EverCerts   []string
	// EverUnbound holds the keys of certificates whose serial never
	// became known (sorted).
	EverUnbound []string
}

func (s ModelState) key() string {
	return fmt.Sprintf("%s|%s|%s|%s|%v|%s|%s", s.State, s.Serial, s.Key, strings.Join(s.Revoked, ","), s.EverRevoked, strings.Join(s.EverCerts, ","), strings.Join(s.EverUnbound, ","))
}

func (s ModelState) String() string {
	var b strings.Builder
	b.WriteString(s.State)
	if s.Serial != "" {
		fmt.Fprintf(&b, " serial=%s key=%s", short(s.Serial), short(s.Key))
	}
	if len(s.Revoked) > 0 {
		b.WriteString(" revoked=[")
		for i, r := range s.Revoked {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString(short(r))
		}
		b.WriteString("]")
	}
	return b.String()
}

// short abbreviates a hex serial or key hash for humans.
func short(s string) string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

func (s ModelState) clone() ModelState {
	s.Revoked = slices.Clone(s.Revoked)
	s.EverCerts = slices.Clone(s.EverCerts)
	s.EverUnbound = slices.Clone(s.EverUnbound)
	return s
}

// known reports whether serial is known to belong to a certificate for
// another key than key (serials are random and unique: an undetermined
// serial can never turn out to be one of those).
func (s ModelState) known(serial, key string) bool {
	for _, c := range s.EverCerts {
		if k, sr, _ := strings.Cut(c, "/"); sr == serial && k != key {
			return true
		}
	}
	return false
}

// canBeSerial reports whether the current certificate's serial is, or
// (undetermined) may turn out to be, serial.
func (s ModelState) canBeSerial(serial string) bool {
	if s.Serial != unknownSerial {
		return s.Serial == serial
	}
	return serial != "" && !s.known(serial, s.Key)
}

func insertSorted(list []string, v string) []string {
	i, found := slices.BinarySearch(list, v)
	if found {
		return list
	}
	return slices.Insert(list, i, v)
}

// withCert makes key/serial the current certificate.
func (s ModelState) withCert(serial, key string) ModelState {
	n := s.clone()
	n.State, n.Serial, n.Key = StateActive, serial, key
	if serial == unknownSerial {
		n.EverUnbound = insertSorted(n.EverUnbound, key)
	} else {
		n.EverCerts = insertSorted(n.EverCerts, key+"/"+serial)
	}
	return n
}

// bind fixes an undetermined serial once an answer reveals it.
func (s ModelState) bind(serial string) ModelState {
	if s.Serial != unknownSerial || serial == "" || serial == unknownSerial {
		return s
	}
	n := s.clone()
	n.Serial = serial
	for i, r := range n.Revoked {
		if r == unknownSerial {
			n.Revoked = slices.Delete(n.Revoked, i, i+1)
			n.Revoked = insertSorted(n.Revoked, serial)
			break
		}
	}
	if n.Key != "" {
		n.EverCerts = insertSorted(n.EverCerts, n.Key+"/"+serial)
		if i, ok := slices.BinarySearch(n.EverUnbound, n.Key); ok {
			n.EverUnbound = slices.Delete(n.EverUnbound, i, i+1)
		}
	}
	return n
}

// serialRevoked reports whether serial is in the node's revocation set.
func (s ModelState) serialRevoked(serial string) bool {
	return slices.Contains(s.Revoked, serial)
}

// mayBeRevoked is serialRevoked, also true when a revoked serial is still
// undetermined (it may be this one).
func (s ModelState) mayBeRevoked(serial string) bool {
	return s.serialRevoked(serial) || slices.Contains(s.Revoked, unknownSerial)
}

func (s ModelState) everHeldOtherKey(key string) bool {
	for _, c := range s.EverCerts {
		if k, _, _ := strings.Cut(c, "/"); k != key {
			return true
		}
	}
	return false
}

// Spec is the registry's sequential specification for one node.
type Spec struct {
	// Lenient accepts the answers the documented design allows a journal to
	// give from its own, possibly lagging, copy of the registry: Enroll and
	// RenewCert refuse (and an Enroll retry with the same key answers) from
	// local state before anything is proposed. Such an answer must match
	// some state the node was in earlier, not necessarily the current one.
	// Writes that succeed, admin calls and InspectNode stay strict.
	Lenient bool
	// NoLeaderUnknown treats NO_LEADER as an unknown outcome instead of the
	// definite "nothing was written" the wire contract promises. Used only
	// to diagnose a violation.
	NoLeaderUnknown bool
}

// noEffect reports whether a failure reason is one that changes nothing
// whatever the state: the call was refused before any rule was evaluated.
func noEffect(reason string) bool {
	switch reason {
	case "NO_LEADER", "RATE_LIMITED", "UNREACHABLE", "INVALID_ARGUMENT", "INVALID_CSR", "UNAUTHENTICATED", "NODE_STREAMING":
		return true
	}
	return false
}

// Step returns every state the node may be in after the operation, or none
// if the operation could not have answered as it did.
func (sp Spec) Step(s ModelState, in Input, out Output) []ModelState {
	if out.Result == ResultFailed && out.Reason == "NO_LEADER" && sp.NoLeaderUnknown {
		out.Result = ResultUnknown
	}
	if out.Result == ResultApplied {
		// Only the states in which the call took effect.
		var next []ModelState
		u := out
		u.Result = ResultUnknown
		for _, n := range sp.Step(s, in, u) {
			if n.key() != s.key() || in.Kind == OpEnroll && s.State == StateActive && s.Key == in.Key {
				next = append(next, n)
			}
		}
		return next
	}
	switch in.Kind {
	case OpRegister:
		return sp.register(s, out)
	case OpEnroll:
		return sp.enroll(s, in, out)
	case OpRenew:
		return sp.renew(s, in, out)
	case OpDecommission:
		return sp.decommission(s, out)
	case OpRead:
		return sp.read(s, out)
	}
	return nil
}

func one(s ModelState) []ModelState { return []ModelState{s} }

func (sp Spec) register(s ModelState, out Output) []ModelState {
	canRegister := s.State == StateNone || s.State == StateRevoked
	registered := func() ModelState {
		n := s.clone()
		n.State, n.Serial, n.Key = StateRegistered, "", ""
		return n
	}
	switch out.Result {
	case ResultOK:
		if canRegister {
			return one(registered())
		}
	case ResultUnknown:
		if canRegister {
			return []ModelState{s, registered()}
		}
		return one(s)
	case ResultFailed:
		switch {
		case out.Reason == "NODE_ALREADY_ENROLLED":
			if !canRegister {
				return one(s)
			}
		case noEffect(out.Reason):
			return one(s)
		}
	}
	return nil
}

func (sp Spec) enroll(s ModelState, in Input, out Output) []ModelState {
	switch out.Result {
	case ResultOK:
		if out.Key != in.Key {
			return nil // a certificate for another key
		}
		switch {
		case s.State == StateRegistered || s.State == StateInactive:
			return one(s.withCert(out.Serial, in.Key))
		case s.State == StateActive && s.Key == in.Key && s.canBeSerial(out.Serial):
			return one(s.bind(out.Serial)) // a retry: the committed certificate again
		case sp.Lenient && (slices.Contains(s.EverCerts, in.Key+"/"+out.Serial) ||
			slices.Contains(s.EverUnbound, in.Key) && !s.known(out.Serial, in.Key)):
			return one(s) // a retry answered from a lagging copy
		}
	case ResultUnknown:
		next := []ModelState{s}
		if s.State == StateRegistered || s.State == StateInactive {
			next = append(next, s.withCert(unknownSerial, in.Key))
		}
		return next
	case ResultFailed:
		switch out.Reason {
		case "NODE_NOT_ENROLLED":
			if s.State == StateNone || sp.Lenient {
				return one(s)
			}
		case "NODE_REVOKED":
			if s.State == StateRevoked || (sp.Lenient && s.EverRevoked) {
				return one(s)
			}
		case "ALREADY_ACTIVE":
			if (s.State == StateActive && s.Key != in.Key) || (sp.Lenient && s.everHeldOtherKey(in.Key)) {
				return one(s)
			}
		default:
			if noEffect(out.Reason) {
				return one(s)
			}
		}
	}
	return nil
}

func (sp Spec) renew(s ModelState, in Input, out Output) []ModelState {
	current := s.State == StateActive && s.canBeSerial(in.Prev) && !s.serialRevoked(in.Prev)
	switch out.Result {
	case ResultOK:
		if out.Key != in.Key {
			return nil
		}
		switch {
		case s.State == StateActive && s.Key == in.Key && s.canBeSerial(out.Serial):
			return one(s.bind(out.Serial)) // the renewal had already committed
		case current:
			return one(s.bind(in.Prev).withCert(out.Serial, in.Key))
		}
	case ResultUnknown:
		next := []ModelState{s}
		if current {
			next = append(next, s.bind(in.Prev).withCert(unknownSerial, in.Key))
		}
		return next
	case ResultFailed:
		switch out.Reason {
		case "NODE_REVOKED":
			if s.State == StateRevoked || s.mayBeRevoked(in.Prev) || (sp.Lenient && s.EverRevoked) {
				return one(s)
			}
		case "STALE_CERTIFICATE":
			// Refused by the binding check (the call's certificate is not
			// the current one) or by the state machine (never enrolled,
			// replaced, or revoked in an earlier registration).
			stale := (s.State == StateRegistered || s.State == StateActive || s.State == StateInactive) &&
				(s.State != StateActive || s.Serial != in.Prev || s.mayBeRevoked(in.Prev))
			if stale || sp.Lenient {
				return one(s)
			}
		case "PERMISSION_DENIED", "NODE_NOT_ENROLLED":
			if s.State == StateNone || sp.Lenient {
				return one(s)
			}
		default:
			if noEffect(out.Reason) {
				return one(s)
			}
		}
	}
	return nil
}

func (sp Spec) decommission(s ModelState, out Output) []ModelState {
	live := s.State == StateRegistered || s.State == StateActive || s.State == StateInactive
	revoked := func() ModelState {
		n := s.clone()
		n.State, n.EverRevoked = StateRevoked, true
		if n.Serial != "" {
			n.Revoked = insertSorted(n.Revoked, n.Serial)
		}
		return n
	}
	switch out.Result {
	case ResultOK:
		if live {
			return one(revoked())
		}
	case ResultUnknown:
		if live {
			return []ModelState{s, revoked()}
		}
		return one(s)
	case ResultFailed:
		switch out.Reason {
		case "NODE_NOT_ENROLLED":
			if s.State == StateNone {
				return one(s)
			}
		case "NODE_REVOKED":
			if s.State == StateRevoked {
				return one(s)
			}
		default:
			if noEffect(out.Reason) {
				return one(s)
			}
		}
	}
	return nil
}

func (sp Spec) read(s ModelState, out Output) []ModelState {
	switch out.Result {
	case ResultUnknown:
		return one(s)
	case ResultFailed:
		if out.Reason == "NODE_NOT_ENROLLED" && s.State == StateNone {
			return one(s)
		}
		if out.Reason != "NODE_NOT_ENROLLED" && noEffect(out.Reason) {
			return one(s)
		}
		return nil
	}
	if out.State != s.State {
		return nil
	}
	switch {
	case s.Serial == out.Serial && s.Key == out.Key:
		return one(s)
	case s.Serial == unknownSerial && s.Key == out.Key && s.canBeSerial(out.Serial):
		return one(s.bind(out.Serial))
	}
	return nil
}

// Operation builds the porcupine operation for a recorded call. An
// unknown outcome may take effect at any time after the call, until
// settled (history time; 0: never settled): once the workload has stopped
// and every journal holds the same registry, nothing is in flight any more.
func (r *Record) Operation(settled int64) porcupine.Operation {
	ret := r.Return
	if r.Out.Result == ResultUnknown {
		ret = infinity
		if settled > 0 {
			ret = max(settled, r.Return)
		}
	}
	return porcupine.Operation{ClientId: r.Client, Input: r.In, Call: r.Call, Output: r.Out, Return: ret, Metadata: r}
}

// infinity is the return time of an operation whose outcome is unknown.
const infinity = int64(1) << 62

// PorcupineModel is the per-node registry specification for porcupine.
func (sp Spec) PorcupineModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byNode := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range history {
				n := op.Input.(Input).Node
				if _, ok := byNode[n]; !ok {
					order = append(order, n)
				}
				byNode[n] = append(byNode[n], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, n := range order {
				out = append(out, byNode[n])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{ModelState{State: StateNone}} },
		Step: func(state, input, output interface{}) []interface{} {
			next := sp.Step(state.(ModelState), input.(Input), output.(Output))
			out := make([]interface{}, len(next))
			for i, n := range next {
				out[i] = n
			}
			return out
		},
		Equal: func(a, b interface{}) bool { return a.(ModelState).key() == b.(ModelState).key() },
		Hash: func(s interface{}) uint64 {
			h := fnv.New64a()
			h.Write([]byte(s.(ModelState).key()))
			return h.Sum64()
		},
		DescribeOperation: func(in, out interface{}) string { return DescribeOp(in.(Input), out.(Output)) },
		DescribeState:     func(s interface{}) string { return s.(ModelState).String() },
	}
	return nm.ToModel()
}

// DescribeOp renders one call and its answer for a human.
func DescribeOp(in Input, out Output) string {
	var call string
	switch in.Kind {
	case OpEnroll:
		call = fmt.Sprintf("enroll(key=%s)", short(in.Key))
	case OpRenew:
		call = fmt.Sprintf("renew(with=%s, key=%s)", short(in.Prev), short(in.Key))
	default:
		call = string(in.Kind) + "()"
	}
	switch out.Result {
	case ResultOK:
		switch in.Kind {
		case OpEnroll, OpRenew:
			return fmt.Sprintf("%s -> ok serial=%s", call, short(out.Serial))
		case OpRead:
			if out.Serial != "" {
				return fmt.Sprintf("%s -> %s serial=%s key=%s", call, out.State, short(out.Serial), short(out.Key))
			}
			return fmt.Sprintf("%s -> %s", call, out.State)
		}
		return call + " -> ok"
	case ResultUnknown:
		return fmt.Sprintf("%s -> unknown (%s)", call, out.Reason)
	}
	return fmt.Sprintf("%s -> %s", call, out.Reason)
}
