package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// claimDomain starts a one-journal quorum of its own domain (under a root
// of its own) with a bundle endpoint and a claim poll every 50 ms.
func claimDomain(t *testing.T, domain string) *journaltest.Harness {
	t.Helper()
	dir := t.TempDir()
	if domain != journaltest.Domain {
		if _, err := ca.InitDev(dir, domain, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := journaltest.Config(dir)
	cfg.BundleEndpointListen = "127.0.0.1:0"
	cfg.DigestInterval = 50 * time.Millisecond
	return journaltest.Start(t, cfg)
}

// A node refused ACTIVE_IN_ANOTHER_DOMAIN waits as the journal's
// retry-after says, not in a tight loop; its status (text and JSON) and
// its log say why and name the other domain; once that domain releases the
// node, the agent enrolls and the status no longer names it.
func TestAgentWaitsWhileActiveInAnotherDomain(t *testing.T) {
	a := claimDomain(t, journaltest.Domain)
	b := claimDomain(t, "b.example")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Both ways: A's claim feed answers the journals of domains A
	// federates with.
	for _, f := range []struct {
		from, to *journaltest.Harness
		policy   string
	}{{a, b, "warn"}, {b, a, "refuse"}} {
		root, err := os.ReadFile(filepath.Join(f.to.Dir, ca.RootCertFile))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.from.AdminClient(t).FederateDomain(ctx, &pactv1.FederateDomainRequest{
			Name: f.to.J.Domain(), Endpoints: []string{"https://" + f.to.J.BundleEndpointAddr() + "/"},
			X509Authorities: [][]byte{root}, Policy: f.policy,
		}); err != nil {
			t.Fatalf("%s federates %s: %v", f.from.J.Domain(), f.to.J.Domain(), err)
		}
	}
	const bmc = "SN-SHARED"
	a.Register(t, "gpu-a", bmc, mac1)
	b.Register(t, "gpu-b", bmc, mac1)
	keyA := journaltest.NewKey(t)
	respA, err := a.Enroll(t, keyA, bmc, mac1)
	if err != nil {
		t.Fatalf("enroll in A: %v", err)
	}
	// B holds A's claim once pact node inspect there says so.
	eventually(t, "B holds A's claim on the hardware", func() bool {
		in, err := b.AdminClient(t).InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: "gpu-b"})
		return err == nil && len(in.GetAlsoActive()) == 1
	})

	fc := fakeclock.New(time.Now())
	logs := &syncBuffer{}
	cfg := agentConfig(b, fc, bmc, mac1)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ag := runAgent(t, cfg)
	attempts := func() uint64 { return ag.metrics.attempts.Load() }
	// Refused, recorded (the failure counted), and the retry set: beside
	// the identity cascade's probe timer, the loop's own.
	eventually(t, "the agent's enrollment is refused for A's claim and its retry set", func() bool {
		return ag.Status().ActiveInDomain == journaltest.Domain && failureCount(ag.Agent, ReasonActiveInAnotherDomain) == 1 && fc.Timers() >= 2
	})
	waitLogged(t, logs, "the hardware is active in another domain")
	st := ag.Status()
	if st.LastFailureReason != ReasonActiveInAnotherDomain || st.LastFailureOp != "enroll" || !strings.Contains(st.LastFailure, "active in domain "+journaltest.Domain) {
		t.Fatalf("status %+v: want the last failure active_in_another_domain during enroll, naming %s", st, journaltest.Domain)
	}
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(`"active_in_domain":"`+journaltest.Domain+`"`)) || !bytes.Contains(js, []byte(`"last_failure_reason":"active_in_another_domain"`)) {
		t.Errorf("status JSON %s: want active_in_domain and the reason", js)
	}
	var text bytes.Buffer
	if err := PrintStatus(&text, st); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "waiting:") || !strings.Contains(text.String(), "active in domain "+journaltest.Domain) {
		t.Errorf("pact-agent status:\n%s\nwant a waiting line naming %s", text.String(), journaltest.Domain)
	}
	if l := logs.String(); !strings.Contains(l, "the hardware is active in another domain") || !strings.Contains(l, "domain="+journaltest.Domain) ||
		!strings.Contains(l, "reason="+ReasonActiveInAnotherDomain) {
		t.Errorf("log:\n%s\nwant the refusal logged with domain=%s", l, journaltest.Domain)
	}
	if n := failureCount(ag.Agent, ReasonActiveInAnotherDomain); n != 1 {
		t.Errorf("pact_agent_cert_renewal_failures_total{reason=%q} = %d, want 1", ReasonActiveInAnotherDomain, n)
	}

	// No tight loop: nothing before the journal's retry-after (30 s; the
	// agent's own backoff here is 10-100 ms), another try after it.
	first := attempts()
	advanceAndSettle(t, fc, 29*time.Second)
	if attempts() != first {
		t.Fatalf("%d enrollment attempts within the retry-after, want none after the first", attempts()-first)
	}
	fc.Advance(20 * time.Second)
	eventually(t, "the agent tries again after the retry-after", func() bool { return attempts() > first })
	eventually(t, "the second try is refused too and the agent waits again", func() bool {
		return ag.Status().ActiveInDomain == journaltest.Domain && failureCount(ag.Agent, ReasonActiveInAnotherDomain) == 2
	})

	// A's agent stops cleanly: the node is released in A, its claim ends,
	// and B's agent enrolls at its next try.
	certA := keyA.TLSCert(respA.GetCertChainDer())
	if _, err := pactv1.NewEnrollmentServiceClient(a.Dial(t, &certA)).Release(ctx, &pactv1.ReleaseRequest{}); err != nil {
		t.Fatalf("release in A: %v", err)
	}
	eventually(t, "the agent enrolls in B once A released the node", func() bool {
		if inspect(t, b, "gpu-b").GetState() == pactv1.NodeState_NODE_STATE_ACTIVE {
			return true
		}
		fc.Advance(46 * time.Second) // the next try, at most 1.5 retry-after away
		return false
	})
	eventually(t, "the status no longer names A", func() bool { return ag.Status().ActiveInDomain == "" })
}

// failureCount is pact_agent_cert_renewal_failures_total{reason}.
func failureCount(a *Agent, reason string) uint64 { return a.metrics.failureCounts()[reason] }
