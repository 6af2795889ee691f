package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// End to end, between renewals: a running agent whose enrollment its TPM
// attested is asked for a quote over its stream once the policy's attest
// interval has passed on the journal's (fake) clock, answers with its
// TPM and event log, and matches. After the "kernel" measurement in PCR
// 9 changes under the running node, the next request's answer fences it
// under a fence policy.
func TestAgentAttestsBetweenRenewals(t *testing.T) {
	boot := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	jc := fakeclock.New(time.Now())
	jcfg := journaltest.Config(t.TempDir())
	jcfg.Clock = jc
	jcfg.MetricsListen = "127.0.0.1:0"
	h := journaltest.Start(t, jcfg)
	sw := swtpmtest.Start(t)
	tr, err := tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	boot.Extend(t, tr)
	tr.Close()
	logPath := filepath.Join(t.TempDir(), "binary_bios_measurements")
	if err := os.WriteFile(logPath, boot.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	registerWithEK(t, h, "n1", "SN1", ekHashOf(t, sw.Device), mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice, cfg.TPMEventLog = sw.Device, logPath
	r := runAgent(t, cfg)
	eventually(t, "n1 streams", func() bool { return h.J.OpenStreams("n1") == 1 })
	if la := r.Status().LastAttestation; la != nil {
		t.Errorf("status shows an attestation before any was asked: %+v", la)
	}

	bp := pactv1.NewBootPolicyServiceClient(h.Dial(t, &h.Admin))
	captured, err := bp.CaptureBootPolicy(context.Background(), &pactv1.CaptureBootPolicyRequest{NodeId: "n1",
		Mode: pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, Action: pactv1.BootPolicyAction_BOOT_POLICY_ACTION_FENCE})
	if err != nil {
		t.Fatal(err)
	}
	p := captured.GetPolicy()
	p.AttestIntervalSeconds = 3600
	if _, err := bp.SetBootPolicy(context.Background(), &pactv1.SetBootPolicyRequest{Policy: p}); err != nil {
		t.Fatal(err)
	}
	attestations := func(result string) float64 {
		resp, err := http.Get("http://" + h.J.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return parseMetrics(string(body))[`pact_journal_attestations_total{result="`+result+`"}`]
	}
	// askedAfter moves the journal's clock on until it has asked n
	// requests; then it stands still while the agent answers (a request
	// expires on the journal's clock).
	askedAfter := func(n float64) {
		t.Helper()
		jc.Advance(55 * time.Minute)
		eventually(t, "the journal asks for a quote", func() bool {
			if attestations("asked") >= n {
				return true
			}
			jc.Advance(30 * time.Second)
			return false
		})
	}
	askedAfter(1)
	eventually(t, "the agent's answer matches", func() bool { return attestations("match") == 1 })
	eventually(t, "the agent's status shows the matching attestation", func() bool {
		la := r.Status().LastAttestation
		return la != nil && la.Matches && la.Error == "" && la.JournalID == h.Cfg.NodeID
	})
	first := r.Status().LastAttestation.At
	if f := inspect(t, h, "n1").GetFence(); f != nil {
		t.Fatalf("fenced after a matching answer: %v", f)
	}

	// Another kernel is measured under the running node; the log the
	// agent reads reproduces it.
	other := measuredboottest.Log{{PCR: 9, Type: measuredboottest.EvIPL, Data: []byte("/vmlinuz 6.1.0-other")}}
	tr, err = tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	other.Extend(t, tr)
	tr.Close()
	if err := os.WriteFile(logPath, append(append(measuredboottest.Log{}, boot...), other...).Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	askedAfter(2)
	eventually(t, "n1 is fenced by the boot policy", func() bool { return inspect(t, h, "n1").GetFence() != nil })
	eventually(t, "the agent's status shows the attestation that did not match", func() bool {
		la := r.Status().LastAttestation
		return la != nil && !la.Matches && la.At.After(first)
	})
	var shown strings.Builder
	if err := PrintStatus(&shown, r.Status()); err != nil || !strings.Contains(shown.String(), "does NOT match the boot policy") {
		t.Errorf("pact-agent status: %v\n%s", err, shown.String())
	}
	if got := attestations("mismatch"); got != 1 {
		t.Errorf("attestations{mismatch} = %v, want 1", got)
	}
	eventually(t, "n1's stream ends", func() bool { return h.J.OpenStreams("n1") == 0 })
}
