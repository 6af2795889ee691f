package raftfsm

import (
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/measuredboot"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Boot policies (docs/tpm.md, "Boot policies"): what a TPM node's quote
// must show, one policy per vCluster, "" the domain's default. Versioned:
// each change of a vCluster's policy takes the next version.

// MaxBootPolicies bounds the policies a quorum keeps.
const MaxBootPolicies = 256

// bootPolicyLevel is the quorum feature level that knows boot policies.
const bootPolicyLevel = LevelBootPolicies

func (a *applier) setBootPolicy(op *pactv1.SetBootPolicyOp) *Result {
	if !a.atLeast(bootPolicyLevel) {
		return fail(&QuorumVersionError{Feature: "pact boot-policy set", Need: bootPolicyLevel, Have: a.s.level()})
	}
	p := op.GetPolicy()
	if err := measuredboot.ValidatePolicy(p); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidCommand, err))
	}
	vc := p.GetVcluster()
	prev, had := a.s.bootPolicies[vc]
	if want := op.GetExpectVersion(); want != 0 && want != prev.GetVersion() {
		return fail(fmt.Errorf("%w: the boot policy of %s is at version %d, not %d: show it again and redo the change", ErrInvalidCommand, vcName(vc), prev.GetVersion(), want))
	}
	if !had && len(a.s.bootPolicies) >= MaxBootPolicies {
		return fail(fmt.Errorf("%w: %d boot policies are kept already, the most: remove one first", ErrInvalidCommand, MaxBootPolicies))
	}
	rec := proto.Clone(p).(*pactv1.BootPolicy)
	rec.Version = prev.GetVersion() + 1
	rec.SetAtUnixNano = a.at()
	rec.SetBy = a.cmd.GetActor()
	a.s.bootPolicies[vc] = rec
	detail := fmt.Sprintf("boot policy of %s: version %d, mode %s, action %s, %d PCR and %d event rules",
		vcName(vc), rec.GetVersion(), modeName(rec.GetMode()), actionName(rec.GetAction()), len(rec.GetPcrs()), len(rec.GetEvents()))
	if s := rec.GetAttestIntervalSeconds(); s != 0 {
		detail += fmt.Sprintf(", attested every %ds between renewals", s)
	}
	a.record("boot-policy-set", "", "", detail)
	return &Result{}
}

func (a *applier) removeBootPolicy(op *pactv1.RemoveBootPolicyOp) *Result {
	if !a.atLeast(bootPolicyLevel) {
		return fail(&QuorumVersionError{Feature: "pact boot-policy remove", Need: bootPolicyLevel, Have: a.s.level()})
	}
	prev, ok := a.s.bootPolicies[op.GetVcluster()]
	if !ok {
		return fail(fmt.Errorf("%w: no boot policy for %s (pact boot-policy list)", ErrNotFound, vcName(op.GetVcluster())))
	}
	delete(a.s.bootPolicies, op.GetVcluster())
	a.record("boot-policy-remove", "", "", fmt.Sprintf("boot policy of %s removed (was version %d)", vcName(op.GetVcluster()), prev.GetVersion()))
	return &Result{}
}

func vcName(vc string) string {
	if vc == "" {
		return "the domain (default)"
	}
	return "vCluster " + vc
}

func modeName(m pactv1.BootPolicyMode) string {
	switch m {
	case pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE:
		return "observe"
	case pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE:
		return "enforce"
	}
	return m.String()
}

func actionName(x pactv1.BootPolicyAction) string {
	switch x {
	case pactv1.BootPolicyAction_BOOT_POLICY_ACTION_OBSERVE:
		return "observe"
	case pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE:
		return "refuse"
	case pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE:
		return "fence"
	}
	return x.String()
}

// BootPolicies returns copies of the boot policies, by vCluster.
func (f *FSM) BootPolicies() []*pactv1.BootPolicy {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*pactv1.BootPolicy, 0, len(f.st.bootPolicies))
	for _, p := range f.st.bootPolicies {
		out = append(out, proto.Clone(p).(*pactv1.BootPolicy))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetVcluster() < out[j].GetVcluster() })
	return out
}

// BootPolicyFor returns a copy of the policy that applies to a node of
// vcluster: its vCluster's, else the domain's default.
func (f *FSM) BootPolicyFor(vcluster string) (*pactv1.BootPolicy, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.st.bootPolicies[vcluster]
	if !ok {
		p, ok = f.st.bootPolicies[""]
	}
	if !ok {
		return nil, false
	}
	return proto.Clone(p).(*pactv1.BootPolicy), true
}

// BootPolicyReadsIMA reports whether the policy that applies to a node of
// vcluster has IMA rules: what every TPM challenge asks, without copying
// the policy.
func (f *FSM) BootPolicyReadsIMA(vcluster string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.st.bootPolicies[vcluster]
	if !ok {
		p, ok = f.st.bootPolicies[""]
	}
	return ok && p.GetIma() != nil
}

// BootPolicy returns a copy of vcluster's own policy.
func (f *FSM) BootPolicy(vcluster string) (*pactv1.BootPolicy, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.st.bootPolicies[vcluster]
	if !ok {
		return nil, false
	}
	return proto.Clone(p).(*pactv1.BootPolicy), true
}
