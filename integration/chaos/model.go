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
	// OpTakeover is an Enroll with a new key for a node that may be
	// Active: a reboot that lost the key. Within the takeover window it is
	// refused (ALREADY_ACTIVE); after it, it replaces the certificate.
	OpTakeover OpKind = "takeover"
	// OpRevokeCA is an operator's revocation of a journal CA (pact journal
	// revoke-ca; the revoke-leader-ca scenario), from the command's start
	// to its answer. It is no call on a node: the harness adds it to every
	// node's history (RevocationRecords), so the model knows from when the
	// certificates its intermediates (Input.Issuers) signed are withdrawn:
	// refused everywhere, and their node free to enroll again with a new
	// key at once (raftfsm certWithdrawn).
	OpRevokeCA OpKind = "revoke-ca"
)

// issuesCert reports whether a successful call of this kind hands out a
// certificate.
func (k OpKind) issuesCert() bool { return k == OpEnroll || k == OpRenew || k == OpTakeover }

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
	// Moved marks an Enroll (or takeover) for a node whose hardware, or
	// its NIC, was registered to another node id before (the workload
	// moved it here): a journal's lagging copy may still resolve it to
	// that previous owner.
	Moved bool `json:",omitempty"`
	// Issuers are the intermediates (serials, comma-separated, sorted) an
	// OpRevokeCA took out of the trust bundle with their journal CA.
	Issuers string `json:",omitempty"`
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
	// Retryable: the refusal came with a retry-after, so it is not final
	// (apierr.Error.Final): an ALREADY_ACTIVE while a takeover may still
	// become possible.
	Retryable bool `json:",omitempty"`
	// Issuer is the serial of the intermediate that signed the
	// certificate received (Enroll, RenewCert; "" if unknown).
	Issuer string `json:",omitempty"`
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
	// Every certificate the node ever held as "key/serial" (sorted): an
	// undetermined serial can never be one of these, and a takeover-wait
	// answer needs a key the node once held.
	EverCerts []string
	// EverUnbound holds the keys of certificates whose serial never
	// became known (sorted).
	EverUnbound []string
	// Issuer is the serial of the intermediate that signed the current
	// certificate ("" not known: its serial is undetermined, or a read
	// revealed it). Gone holds the intermediates revoked so far with their
	// journal CA (OpRevokeCA, sorted): a current certificate one of them
	// signed is withdrawn.
	Issuer string
	Gone   []string
}

func (s ModelState) key() string {
	return fmt.Sprintf("%s|%s|%s|%s|%s|%s|%s|%s", s.State, s.Serial, s.Key, strings.Join(s.Revoked, ","), strings.Join(s.EverCerts, ","), strings.Join(s.EverUnbound, ","), s.Issuer, strings.Join(s.Gone, ","))
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
	s.Gone = slices.Clone(s.Gone)
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
	n.State, n.Serial, n.Key, n.Issuer = StateActive, serial, key, ""
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

// issued records the intermediate that signed the current certificate,
// once an answer carrying it shows it.
func (s ModelState) issued(issuer string) ModelState {
	if issuer == "" || s.Issuer != "" || s.State != StateActive {
		return s
	}
	n := s.clone()
	n.Issuer = issuer
	return n
}

// withdrawn reports whether the node's current certificate is, for
// certain or perhaps (its issuer not known), signed by an intermediate
// revoked with its journal CA: refused everywhere, so its node may enroll
// with a new key at once.
func (s ModelState) withdrawn() (certain, maybe bool) {
	if s.State != StateActive || len(s.Gone) == 0 {
		return false, false
	}
	if s.Issuer == "" {
		return false, true
	}
	in := slices.Contains(s.Gone, s.Issuer)
	return in, in
}

// revokeCA is the state after a journal CA's revocation took issuers out
// of the trust bundle.
func (s ModelState) revokeCA(issuers string) ModelState {
	n := s.clone()
	for _, i := range strings.Split(issuers, ",") {
		if i != "" {
			n.Gone = insertSorted(n.Gone, i)
		}
	}
	return n
}

// serialRevoked reports whether serial is in the node's revocation set.
func (s ModelState) serialRevoked(serial string) bool {
	return slices.Contains(s.Revoked, serial)
}

// mayBeRevoked is serialRevoked, also true when a revoked serial is still
// undetermined and may be this one. It cannot be a serial already seen
// for a key whose certificate is bound: a serial names one certificate,
// and the undetermined one belongs to a key whose serial never became
// known (EverUnbound). So a current certificate is never "maybe revoked"
// because an earlier registration's unseen certificate was.
func (s ModelState) mayBeRevoked(serial string) bool {
	if s.serialRevoked(serial) {
		return true
	}
	if !slices.Contains(s.Revoked, unknownSerial) {
		return false
	}
	for _, c := range s.EverCerts {
		if k, sr, _ := strings.Cut(c, "/"); sr == serial {
			if _, unbound := slices.BinarySearch(s.EverUnbound, k); !unbound {
				return false
			}
		}
	}
	return true
}

// current reports whether serial is, for certain, the node's current
// certificate: the node is active, the registry holds this serial (not an
// undetermined one) and it is not revoked.
func (s ModelState) current(serial string) bool {
	return s.State == StateActive && serial != "" && s.Serial == serial && !s.mayBeRevoked(serial)
}

// heldOtherKey reports whether the node held, now or at any earlier point
// of its history (earlier registrations included), a certificate for a key
// other than key: a journal whose copy lags may still see it active with
// that key.
func (s ModelState) heldOtherKey(key string) bool {
	if s.State == StateActive && s.Key != key {
		return true
	}
	for _, c := range s.EverCerts {
		if k, _, _ := strings.Cut(c, "/"); k != key {
			return true
		}
	}
	for _, k := range s.EverUnbound {
		if k != key {
			return true
		}
	}
	return false
}

// Allowance names one answer the design lets a journal give from its own,
// possibly lagging, copy of the registry. Every other answer must be
// explained by the node's state at its linearization point. The design
// (DESIGN.md section 6) allows no final refusal from a lagging copy: each
// allowance is an answer the caller is told to retry.
type Allowance string

// Allowances (docs/chaos.md lists them with their reasons).
const (
	// AllowTakeoverWait: ALREADY_ACTIVE with a retry-after ("the node was
	// active until a while ago; if it rebooted it may enroll again in
	// ..."). The journal decides it from its own copy of the registry
	// without asking the leader, because the answer is not final: the
	// agent retries after the delay, and a takeover itself is decided by
	// the leader's state machine (journal/enroll.go, takeoverCutoff). The
	// copy must show the hardware's node active with another key, so the
	// model accepts it only where a copy could: the node held a
	// certificate for another key at some point up to the call (now, or
	// before a renewal, a takeover, or a decommission and a new
	// registration), or its hardware belonged to another node id before
	// (Input.Moved: a lagging copy resolves it to that previous owner). A
	// node never active whose hardware is its own cannot get it.
	AllowTakeoverWait Allowance = "takeover-wait"
)

// DesignAllowances is every allowance the design makes.
var DesignAllowances = []Allowance{AllowTakeoverWait}

// Spec is the registry's sequential specification for one node.
type Spec struct {
	// Allow lists the stale answers accepted (none: strictly the state at
	// the linearization point).
	Allow []Allowance
	// NoLeaderUnknown treats NO_LEADER as an unknown outcome instead of the
	// definite "nothing was written" the wire contract promises. Used only
	// to diagnose a violation.
	NoLeaderUnknown bool
}

func (sp Spec) allows(a Allowance) bool { return slices.Contains(sp.Allow, a) }

// noEffect reports whether a failure reason is one the model accepts in
// any state, as changing nothing: each says nothing about the node, so it
// cannot contradict the registry.
//
//   - NO_LEADER: no leader could decide (or confirm) the call; the wire
//     contract promises nothing was written.
//
//   - RATE_LIMITED: the journal shed the call before looking at it (a
//     source's failure budget, the handshake or work gate).
//
//   - UNREACHABLE: the request never left the client (Classify).
//
//   - JOURNAL_HALTED: the journal stopped serving (removed, cut off by
//     the quorum: the revoke-leader-ca scenario's revoked journal) and
//     refused the call as it arrived, before looking at it.
//
//   - JOURNAL_CA_REVOKED: the journal's own journal CA is revoked, so it
//     signs nothing; it refused before signing or proposing.
//
// Nothing else is: the workload sends no malformed request
// (INVALID_ARGUMENT, INVALID_CSR), decommissions with force (never
// NODE_STREAMING) and presents its own credentials, so those answers are
// violations. UNAUTHENTICATED and CERT_REFUSED (the certificate refused
// in the TLS handshake) are accepted for a renewal only with a
// certificate that is not the node's current one (renew).
func noEffect(reason string) bool {
	switch reason {
	case "NO_LEADER", "RATE_LIMITED", "UNREACHABLE", "JOURNAL_HALTED", "JOURNAL_CA_REVOKED":
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
	case OpTakeover:
		return sp.takeover(s, in, out)
	case OpRenew:
		return sp.renew(s, in, out)
	case OpDecommission:
		return sp.decommission(s, out)
	case OpRead:
		return sp.read(s, out)
	case OpRevokeCA:
		return one(s.revokeCA(in.Issuers))
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
		case out.Reason == "HARDWARE_IDENTITY_CONFLICT":
			// Another node holds the hardware: a fact about other nodes,
			// which CheckHardwareConflicts verifies against the audit.
			if canRegister {
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
		_, withdrawn := s.withdrawn()
		switch {
		case s.State == StateRegistered || s.State == StateInactive:
			return one(s.withCert(out.Serial, in.Key).issued(out.Issuer))
		case s.State == StateActive && s.Key == in.Key && s.canBeSerial(out.Serial):
			return one(s.bind(out.Serial).issued(out.Issuer)) // a retry: the committed certificate again
		case s.State == StateActive && s.Key != in.Key && withdrawn:
			// Its certificate's issuer was revoked with its journal CA: the
			// node enrolls again with a new key at once, as a takeover.
			return one(s.withCert(out.Serial, in.Key).issued(out.Issuer))
		}
	case ResultUnknown:
		next := []ModelState{s}
		if s.State == StateRegistered || s.State == StateInactive {
			next = append(next, s.withCert(unknownSerial, in.Key))
		}
		if _, withdrawn := s.withdrawn(); withdrawn && s.Key != in.Key {
			next = append(next, s.withCert(unknownSerial, in.Key))
		}
		return next
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
		case "ALREADY_ACTIVE":
			if s.State == StateActive && s.Key != in.Key {
				return one(s)
			}
			if out.Retryable && sp.allows(AllowTakeoverWait) && (in.Moved || s.heldOtherKey(in.Key)) {
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

// takeover is an Enroll with a new key: as enroll, and an Active node's
// certificate for another key may be replaced (the takeover window had
// passed) or the call refused (it had not; whether it had depends on
// when the node was last seen, which the journals decide).
func (sp Spec) takeover(s ModelState, in Input, out Output) []ModelState {
	otherKey := s.State == StateActive && s.Key != in.Key
	switch out.Result {
	case ResultOK:
		if otherKey && out.Key == in.Key {
			return one(s.bind(s.Serial).withCert(out.Serial, in.Key).issued(out.Issuer))
		}
	case ResultUnknown:
		if otherKey {
			return []ModelState{s, s.withCert(unknownSerial, in.Key)}
		}
	case ResultFailed:
		if out.Reason == "ALREADY_ACTIVE" && otherKey {
			return one(s)
		}
	}
	return sp.enroll(s, in, out)
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
			return one(s.bind(out.Serial).issued(out.Issuer)) // the renewal had already committed
		case current:
			return one(s.bind(in.Prev).withCert(out.Serial, in.Key).issued(out.Issuer))
		}
	case ResultUnknown:
		next := []ModelState{s}
		if current {
			next = append(next, s.bind(in.Prev).withCert(unknownSerial, in.Key))
		}
		return next
	case ResultFailed:
		if s.current(in.Prev) {
			// The node's current certificate, not revoked: a journal may
			// refuse it only for a reason that says nothing about the
			// certificate (no leader, shed, never sent). Any other refusal,
			// final or not (UNAUTHENTICATED, CERT_REFUSED, STALE_CERTIFICATE,
			// NODE_REVOKED ...), is a violation here; a renewal racing a
			// decommission or another renewal is refused in the state
			// after that write, which porcupine tries too.
			if noEffect(out.Reason) {
				return one(s)
			}
			// Unless its issuer was revoked with its journal CA: then every
			// journal refuses it as it authenticates.
			if _, withdrawn := s.withdrawn(); withdrawn && (out.Reason == "UNAUTHENTICATED" || out.Reason == ReasonCertRefused) {
				return one(s)
			}
			return nil
		}
		switch out.Reason {
		case "NODE_REVOKED":
			if s.State == StateRevoked || s.mayBeRevoked(in.Prev) {
				return one(s)
			}
		case "STALE_CERTIFICATE":
			// Refused by the binding check (the call's certificate is not
			// the current one) or by the state machine (never enrolled,
			// replaced, or revoked in an earlier registration).
			if s.State == StateRegistered || s.State == StateActive || s.State == StateInactive {
				return one(s)
			}
		case "UNAUTHENTICATED", ReasonCertRefused:
			// A certificate that is not the current one (replaced, or of a
			// decommissioned node) may fail authentication: its intermediate
			// may have been retired since.
			return one(s)
		case "PERMISSION_DENIED", "NODE_NOT_ENROLLED":
			if s.State == StateNone {
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
		n.State = StateRevoked
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
	case OpTakeover:
		call = fmt.Sprintf("takeover(key=%s)", short(in.Key))
	case OpRenew:
		call = fmt.Sprintf("renew(with=%s, key=%s)", short(in.Prev), short(in.Key))
	case OpRevokeCA:
		call = fmt.Sprintf("revoke-ca(intermediates %s)", in.Issuers)
	default:
		call = string(in.Kind) + "()"
	}
	switch out.Result {
	case ResultOK:
		switch in.Kind {
		case OpEnroll, OpRenew, OpTakeover:
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
	if out.Retryable {
		return fmt.Sprintf("%s -> %s (retry-after)", call, out.Reason)
	}
	return fmt.Sprintf("%s -> %s", call, out.Reason)
}
