package measuredboot_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/measuredboot"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

var quotedPCRs = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 14}

// evidence is a verified quote of quotedPCRs (or pcrs) after log, with
// log sent when withLog.
func evidence(t *testing.T, log measuredboottest.Log, withLog bool, pcrs ...int) *measuredboot.BootEvidence {
	t.Helper()
	if len(pcrs) == 0 {
		pcrs = quotedPCRs
	}
	var b []byte
	if withLog {
		b = log.Bytes()
	}
	ev, err := measuredboot.Evidence(log.PCRs(pcrs...), b)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// netboot is the reference boot on a node whose NIC has mac (PCR 1).
func netboot(kernel, cmdline, mac string) measuredboottest.Log {
	l := measuredboottest.Boot(kernel, cmdline)
	for k := range l {
		if l[k].PCR == 1 {
			l[k].Data = []byte("nic " + mac)
		}
	}
	return l
}

func TestCaptureAndEvaluate(t *testing.T) {
	ref := netboot("6.1.0-pact", "root=nfs quiet", "52:54:00:00:00:01")
	p, err := measuredboot.Capture(evidence(t, ref, true), measuredboot.DefaultCapture(), pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.GetPcrs()) != 4 || len(p.GetEvents()) != 3 {
		t.Fatalf("captured %d PCR and %d event rules, want 4 and 3: %v", len(p.GetPcrs()), len(p.GetEvents()), p)
	}
	for _, tc := range []struct {
		name string
		ev   *measuredboot.BootEvidence
		want []string // substrings, one per mismatch; none: it matches
	}{
		{"the reference node", evidence(t, ref, true), nil},
		{"another node of the image (its own NIC in PCR 1)", evidence(t, netboot("6.1.0-pact", "root=nfs quiet", "52:54:00:00:00:99"), true), nil},
		{"another kernel", evidence(t, netboot("6.1.0-evil", "root=nfs quiet", "52:54:00:00:00:01"), true), []string{`"pcr9-EV_IPL": EV_IPL in PCR 9 has digest`}},
		{"init=/bin/sh on the command line", evidence(t, netboot("6.1.0-pact", "root=nfs quiet init=/bin/sh", "52:54:00:00:00:01"), true), []string{`"pcr8-EV_IPL": EV_IPL in PCR 8 has digest`}},
		{"a quote narrower than the policy", evidence(t, ref, true, 0, 1, 2, 3, 4, 5, 6, 7), []string{"event rule \"pcr8-EV_IPL\": PCR 8 is not in the quote", "event rule \"pcr9-EV_IPL\": PCR 9 is not in the quote"}},
		{"no event log", evidence(t, ref, false), []string{"no event log", "no event log", "no event log"}},
		{"no quote", nil, []string{"no TPM quote"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := measuredboot.Evaluate(p, tc.ev)
			if len(got) != len(tc.want) {
				t.Fatalf("mismatches %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for k := range got {
				if !strings.Contains(got[k], tc.want[k]) {
					t.Errorf("mismatch %q, want it to say %q", got[k], tc.want[k])
				}
			}
		})
	}
	// A changed firmware is a PCR mismatch.
	fw := netboot("6.1.0-pact", "root=nfs quiet", "52:54:00:00:00:01")
	fw[0].Data = []byte("firmware 2.0")
	if got := measuredboot.Evaluate(p, evidence(t, fw, true)); len(got) != 1 || !strings.HasPrefix(got[0], "PCR 0 is ") {
		t.Errorf("a new firmware: %q", got)
	}
	// Rolling out a new kernel: the merged policy allows both.
	next := netboot("6.2.0-pact", "root=nfs quiet", "52:54:00:00:00:01")
	q, err := measuredboot.Capture(evidence(t, next, true), measuredboot.DefaultCapture(), p.GetMode(), p.GetAction())
	if err != nil {
		t.Fatal(err)
	}
	both := measuredboot.Merge(p, q)
	if err := measuredboot.ValidatePolicy(both); err != nil {
		t.Fatal(err)
	}
	for _, l := range []measuredboottest.Log{ref, next} {
		if got := measuredboot.Evaluate(both, evidence(t, l, true)); len(got) != 0 {
			t.Errorf("the merged policy refuses a boot of one of its images: %q", got)
		}
	}
	if got := measuredboot.Evaluate(both, evidence(t, netboot("6.1.0-evil", "root=nfs quiet", "52:54:00:00:00:01"), true)); len(got) == 0 {
		t.Error("the merged policy allows a third kernel")
	}
	// Capture refuses what it cannot see.
	if _, err := measuredboot.Capture(evidence(t, ref, true, 0, 1), measuredboot.DefaultCapture(), p.GetMode(), p.GetAction()); err == nil {
		t.Error("captured PCRs the quote does not cover")
	}
	if _, err := measuredboot.Capture(evidence(t, ref, false), measuredboot.DefaultCapture(), p.GetMode(), p.GetAction()); err == nil {
		t.Error("captured events without an event log")
	}
}

func TestValidatePolicy(t *testing.T) {
	d := make([]byte, 32)
	good := func() *pactv1.BootPolicy {
		return &pactv1.BootPolicy{Mode: pactv1.BootPolicyMode_BOOT_POLICY_MODE_OBSERVE, Action: pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE,
			Pcrs: []*pactv1.BootPolicyPcr{{Index: 7, Allowed: [][]byte{d}}}, Events: []*pactv1.BootPolicyEvent{{Name: "kernel", Pcr: 9, EventType: 0xd, AllowedDigests: [][]byte{d}}}}
	}
	if err := measuredboot.ValidatePolicy(good()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    func(p *pactv1.BootPolicy)
		n    int
	}{
		{"no mode", func(p *pactv1.BootPolicy) { p.Mode = 0 }, 1},
		{"no action", func(p *pactv1.BootPolicy) { p.Action = 0 }, 1},
		{"no rules", func(p *pactv1.BootPolicy) { p.Pcrs, p.Events = nil, nil }, 1},
		{"PCR 24", func(p *pactv1.BootPolicy) { p.Pcrs[0].Index = 24 }, 1},
		{"a PCR twice", func(p *pactv1.BootPolicy) { p.Pcrs = append(p.Pcrs, p.Pcrs[0]) }, 1},
		{"nothing allowed", func(p *pactv1.BootPolicy) { p.Events[0].AllowedDigests = nil }, 1},
		{"a short digest", func(p *pactv1.BootPolicy) { p.Pcrs[0].Allowed = [][]byte{{1, 2}} }, 1},
		{"every problem at once", func(p *pactv1.BootPolicy) { p.Mode, p.Action, p.Pcrs[0].Index = 0, 0, 30 }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good()
			tc.f(p)
			err := measuredboot.ValidatePolicy(p)
			if !errors.Is(err, measuredboot.ErrPolicyInvalid) {
				t.Fatalf("got %v", err)
			}
			if got := strings.Count(err.Error(), "invalid boot policy"); got != tc.n {
				t.Errorf("%d problems reported, want %d: %v", got, tc.n, err)
			}
		})
	}
}
