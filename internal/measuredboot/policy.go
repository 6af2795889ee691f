package measuredboot

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ErrPolicyInvalid: a boot policy that cannot be evaluated as written.
var ErrPolicyInvalid = errors.New("measuredboot: invalid boot policy")

// Bounds on a boot policy (it lives in Raft).
const (
	MaxPolicyRules   = 64
	MaxPolicyAllowed = 256
	maxNameLen       = 64
	maxCommentLen    = 512
)

// ValidatePolicy reports every problem of p at once.
func ValidatePolicy(p *pactv1.BootPolicy) error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrPolicyInvalid}, a...)...))
	}
	switch p.GetMode() {
	case pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE, pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE:
	default:
		bad("mode %v: observe or enforce", p.GetMode())
	}
	switch p.GetAction() {
	case pactv1.BootPolicyAction_BOOT_POLICY_ACTION_OBSERVE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE:
	default:
		bad("action %v: observe, refuse or fence", p.GetAction())
	}
	if len(p.GetPcrs())+len(p.GetEvents()) == 0 && p.GetIma() == nil {
		bad("no PCR, event or IMA rule: it would allow any boot")
	}
	errs = append(errs, validateIMA(p.GetIma())...)
	if n := len(p.GetPcrs()) + len(p.GetEvents()); n > MaxPolicyRules {
		bad("%d rules, at most %d", n, MaxPolicyRules)
	}
	if len(p.GetComment()) > maxCommentLen {
		bad("comment of %d bytes, at most %d", len(p.GetComment()), maxCommentLen)
	}
	seen := map[uint32]bool{}
	for _, r := range p.GetPcrs() {
		if r.GetIndex() >= NumPCRs {
			bad("PCR %d does not exist", r.GetIndex())
		}
		if seen[r.GetIndex()] {
			bad("PCR %d has two rules", r.GetIndex())
		}
		seen[r.GetIndex()] = true
		errs = append(errs, checkAllowed("PCR "+strconv.Itoa(int(r.GetIndex())), r.GetAllowed())...)
	}
	type key struct{ pcr, typ uint32 }
	seenEv := map[key]bool{}
	for _, r := range p.GetEvents() {
		name := eventRuleName(r)
		if r.GetPcr() >= NumPCRs {
			bad("event rule %s: PCR %d does not exist", name, r.GetPcr())
		}
		if len(r.GetName()) > maxNameLen {
			bad("event rule name of %d bytes, at most %d", len(r.GetName()), maxNameLen)
		}
		if k := (key{r.GetPcr(), r.GetEventType()}); seenEv[k] {
			bad("event rule %s: PCR %d and type %s have two rules", name, r.GetPcr(), typeName(r.GetEventType()))
		} else {
			seenEv[k] = true
		}
		errs = append(errs, checkAllowed("event rule "+name, r.GetAllowedDigests())...)
	}
	return errors.Join(errs...)
}

func checkAllowed(what string, allowed [][]byte) []error {
	var errs []error
	if len(allowed) == 0 {
		errs = append(errs, fmt.Errorf("%w: %s allows nothing", ErrPolicyInvalid, what))
	}
	if len(allowed) > MaxPolicyAllowed {
		errs = append(errs, fmt.Errorf("%w: %s allows %d values, at most %d", ErrPolicyInvalid, what, len(allowed), MaxPolicyAllowed))
	}
	for _, a := range allowed {
		switch len(a) {
		case 32, 48, 64:
		default:
			errs = append(errs, fmt.Errorf("%w: %s: a digest of %d bytes (SHA-256, -384 or -512)", ErrPolicyInvalid, what, len(a)))
		}
	}
	return errs
}

func eventRuleName(r *pactv1.BootPolicyEvent) string {
	if r.GetName() != "" {
		return strconv.Quote(r.GetName())
	}
	return fmt.Sprintf("pcr%d/%s", r.GetPcr(), typeName(r.GetEventType()))
}

func typeName(t uint32) string { return Event{Type: t}.TypeName() }

// Evaluate says how ev (nil: the node sent no quote) differs from p: one
// line each, naming the PCR or event; none means it matches. A PCR the
// policy names that the quote does not cover is a mismatch, as is an
// event rule when no event log was replayed.
func Evaluate(p *pactv1.BootPolicy, ev *BootEvidence) []string {
	if ev == nil {
		return []string{"no TPM quote (an agent before measured boot, or one that could not quote)"}
	}
	var out []string
	for _, r := range p.GetPcrs() {
		got, ok := ev.PCRs[int(r.GetIndex())]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("PCR %d is not in the quote (quoted: %v)", r.GetIndex(), ev.QuotedPCRs()))
		case !containsDigest(r.GetAllowed(), got):
			out = append(out, fmt.Sprintf("PCR %d is %s, not an allowed value", r.GetIndex(), short(got)))
		}
	}
	for _, r := range p.GetEvents() {
		name := eventRuleName(r)
		if _, ok := ev.PCRs[int(r.GetPcr())]; !ok {
			out = append(out, fmt.Sprintf("event rule %s: PCR %d is not in the quote (quoted: %v)", name, r.GetPcr(), ev.QuotedPCRs()))
			continue
		}
		if !ev.EventLog {
			out = append(out, fmt.Sprintf("event rule %s: no event log was sent", name))
			continue
		}
		n := 0
		for _, e := range ev.Events {
			if e.PCR != int(r.GetPcr()) || e.Type != r.GetEventType() {
				continue
			}
			n++
			if !containsDigest(r.GetAllowedDigests(), e.Digest) {
				out = append(out, fmt.Sprintf("event rule %s: %s in PCR %d has digest %s, not an allowed one (data %q)", name, e.TypeName(), e.PCR, short(e.Digest), printable(e.Data)))
			}
		}
		if n == 0 {
			out = append(out, fmt.Sprintf("event rule %s: no %s event in PCR %d", name, typeName(r.GetEventType()), r.GetPcr()))
		}
	}
	return append(out, evaluateIMA(p.GetIma(), ev)...)
}

func containsDigest(allowed [][]byte, d []byte) bool {
	return slices.ContainsFunc(allowed, func(a []byte) bool { return bytes.Equal(a, d) })
}

func short(d []byte) string { return hex.EncodeToString(d[:min(8, len(d))]) + "…" }

// printable is at most 64 bytes of event data, for a message.
func printable(b []byte) string {
	b = b[:min(64, len(b))]
	return string(bytes.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '.'
		}
		return r
	}, b))
}

// CaptureOptions say what Capture takes from a reference node's quote.
type CaptureOptions struct {
	// PCRs whose quoted values become PCR rules. Leave out PCRs that differ
	// per node of one image (PCR 1 holds the NIC's MAC on netbooted
	// machines).
	PCRs []int
	// EventPCRs whose replayed events become event rules, one per PCR and
	// event type, allowing the digests seen.
	EventPCRs []int
	// IMA: every file of the node's verified IMA list becomes a file rule
	// allowing the digest seen (boot_aggregate excepted: it holds PCRs
	// that differ per node).
	IMA bool
}

// DefaultCapture: the values of PCR 0 (firmware), 2 (option ROMs), 4
// (boot loader) and 7 (Secure Boot state and keys), and the events of PCR
// 4 (boot loader), 8 and 9 (GRUB's command line, kernel and initrd).
func DefaultCapture() CaptureOptions {
	return CaptureOptions{PCRs: []int{0, 2, 4, 7}, EventPCRs: []int{4, 8, 9}}
}

// Capture makes a policy that ev matches: the rules o names, with the
// values and digests ev shows. A PCR not quoted, or with no events, is an
// error: the policy would not say what the operator asked for.
func Capture(ev *BootEvidence, o CaptureOptions, mode pactv1.BootPolicyMode, action pactv1.BootPolicyAction) (*pactv1.BootPolicy, error) {
	p := &pactv1.BootPolicy{Mode: mode, Action: action}
	for _, i := range o.PCRs {
		v, ok := ev.PCRs[i]
		if !ok {
			return nil, fmt.Errorf("measuredboot: PCR %d is not in the node's quote (quoted: %v)", i, ev.QuotedPCRs())
		}
		p.Pcrs = append(p.Pcrs, &pactv1.BootPolicyPcr{Index: uint32(i), Allowed: [][]byte{slices.Clone(v)}})
	}
	for _, i := range o.EventPCRs {
		if _, ok := ev.PCRs[i]; !ok {
			return nil, fmt.Errorf("measuredboot: PCR %d is not in the node's quote (quoted: %v)", i, ev.QuotedPCRs())
		}
		n := 0
		for _, e := range ev.Events {
			if e.PCR != i || e.Type == EvSeparator {
				continue
			}
			n++
			k := slices.IndexFunc(p.Events, func(r *pactv1.BootPolicyEvent) bool { return r.Pcr == uint32(i) && r.EventType == e.Type })
			if k < 0 {
				p.Events = append(p.Events, &pactv1.BootPolicyEvent{Name: fmt.Sprintf("pcr%d-%s", i, e.TypeName()), Pcr: uint32(i), EventType: e.Type})
				k = len(p.Events) - 1
			}
			if !containsDigest(p.Events[k].AllowedDigests, e.Digest) {
				p.Events[k].AllowedDigests = append(p.Events[k].AllowedDigests, slices.Clone(e.Digest))
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("measuredboot: the node's event log has no events in PCR %d (was an event log sent?)", i)
		}
	}
	if o.IMA {
		ima, err := captureIMA(ev)
		if err != nil {
			return nil, err
		}
		p.Ima = ima
	}
	if err := ValidatePolicy(p); err != nil {
		return nil, err
	}
	return p, nil
}

// EvSeparator is EV_SEPARATOR: the same on every machine, not worth a rule.
const EvSeparator = 0x04

// Merge allows, in a copy of p, every value and digest q allows as well:
// the policy for a rollout during which nodes boot either image.
func Merge(p, q *pactv1.BootPolicy) *pactv1.BootPolicy {
	out := &pactv1.BootPolicy{Vcluster: p.GetVcluster(), Mode: p.GetMode(), Action: p.GetAction(), Comment: p.GetComment()}
	addPCR := func(r *pactv1.BootPolicyPcr) {
		k := slices.IndexFunc(out.Pcrs, func(o *pactv1.BootPolicyPcr) bool { return o.Index == r.GetIndex() })
		if k < 0 {
			out.Pcrs = append(out.Pcrs, &pactv1.BootPolicyPcr{Index: r.GetIndex()})
			k = len(out.Pcrs) - 1
		}
		for _, a := range r.GetAllowed() {
			if !containsDigest(out.Pcrs[k].Allowed, a) {
				out.Pcrs[k].Allowed = append(out.Pcrs[k].Allowed, slices.Clone(a))
			}
		}
	}
	addEvent := func(r *pactv1.BootPolicyEvent) {
		k := slices.IndexFunc(out.Events, func(o *pactv1.BootPolicyEvent) bool { return o.Pcr == r.GetPcr() && o.EventType == r.GetEventType() })
		if k < 0 {
			out.Events = append(out.Events, &pactv1.BootPolicyEvent{Name: r.GetName(), Pcr: r.GetPcr(), EventType: r.GetEventType()})
			k = len(out.Events) - 1
		}
		for _, a := range r.GetAllowedDigests() {
			if !containsDigest(out.Events[k].AllowedDigests, a) {
				out.Events[k].AllowedDigests = append(out.Events[k].AllowedDigests, slices.Clone(a))
			}
		}
	}
	for _, pol := range []*pactv1.BootPolicy{p, q} {
		for _, r := range pol.GetPcrs() {
			addPCR(r)
		}
		for _, r := range pol.GetEvents() {
			addEvent(r)
		}
	}
	out.Ima = mergeIMA(p.GetIma(), q.GetIma())
	return out
}
