package integration

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/polltest"
)

// domainJournal is a --dev journal of its own domain with a bundle
// endpoint, whose loops (the claim polls among them) run every 200 ms.
func domainJournal(t *testing.T, domain string) (*devJournal, string, string) {
	t.Helper()
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	p := start(t, nil, "pact-journal", "--dev", "--domain", domain, "--data-dir", dir, "--listen", "127.0.0.1:0",
		"--bundle-endpoint-listen", addrs[0], "--metrics-listen", addrs[1], "--digest-interval", "200ms")
	addr := p.waitLine(t, servingRE)[1]
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGTERM); <-p.exited })
	return &devJournal{proc: p, dir: dir, addr: addr, env: []string{
		"PACT_JOURNAL=" + addr,
		"PACT_CA=" + filepath.Join(dir, "ca.pem"),
		"PACT_CERT=" + filepath.Join(dir, "admin.pem"),
		"PACT_KEY=" + filepath.Join(dir, "admin-key.pem"),
	}}, "https://" + addrs[0] + "/", "http://" + addrs[1] + "/metrics"
}

// claimsHeld reads pact_journal_federation_claims_held{domain} from a
// journal's /metrics.
func claimsHeld(t *testing.T, metricsURL, domain string) string {
	t.Helper()
	resp, err := http.Get(metricsURL)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`pact_journal_federation_claims_held\{domain="` + regexp.QuoteMeta(domain) + `"\} (\S+)`).FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// Two quorums under different roots, federated both ways, one machine
// registered in both, real pact-journal, pact and pact-agent processes:
// Active in A, the machine boots into B, which federates A with refuse:
// B's agent is refused ACTIVE_IN_ANOTHER_DOMAIN and waits; A's agent
// stops cleanly (released), and B's enrolls. Then the same hardware is
// presented to A, which federates B with warn: A enrolls it, and pact node
// inspect and list say where else it is active.
func TestTwoFederatedDomainsProcesses(t *testing.T) {
	a, aEndpoint, _ := domainJournal(t, "a.example")
	b, bEndpoint, bMetrics := domainJournal(t, "b.example")
	for _, f := range []struct {
		j                          *devJournal
		name, endpoint, ca, policy string
	}{
		{a, "b.example", bEndpoint, filepath.Join(b.dir, "ca.pem"), "warn"},
		{b, "a.example", aEndpoint, filepath.Join(a.dir, "ca.pem"), "refuse"},
	} {
		if out, code := f.j.pact(t, "domain", "federate", f.name, "--endpoint", f.endpoint, "--bundle", f.ca, "--policy", f.policy); code != 0 {
			t.Fatalf("pact domain federate %s: exit %d\n%s", f.name, code, out)
		}
	}
	const mac, bmc = "02:00:00:00:77:01", "BMC-SHARED-77"
	for _, j := range []*devJournal{a, b} {
		if out, code := j.pact(t, "node", "enroll", "gpu-77", "--mac", mac, "--bmc-serial", bmc); code != 0 {
			t.Fatalf("pact node enroll: exit %d\n%s", code, out)
		}
	}

	agentA := a.agent(t, mac, bmc)
	agentA.waitLine(t, enrolledRE)
	// B decides from the claims it holds and never waits for A: the test
	// waits until B has polled A's feed and holds the claim.
	polltest.Until(t, 30*time.Second, 100*time.Millisecond, func() bool { return claimsHeld(t, bMetrics, "a.example") == "1" },
		"B never held A's claim (pact_journal_federation_claims_held{domain=\"a.example\"} = %q)", claimsHeld(t, bMetrics, "a.example"))
	agentB := b.agent(t, mac, bmc)
	agentB.waitLineWithin(t, regexp.MustCompile(`ACTIVE_IN_ANOTHER_DOMAIN|active in domain a\.example`), 60*time.Second)

	// A's agent stops cleanly: the node is released in A, the claim ends,
	// and B's agent enrolls at its next try.
	_ = agentA.cmd.Process.Signal(syscall.SIGTERM)
	agentA.wait(t)
	agentB.waitLineWithin(t, enrolledRE, 90*time.Second)

	// The same hardware presented in A (warn) while B holds it Active: A
	// enrolls it and says where else it is active.
	agentA2 := a.agent(t, mac, bmc)
	agentA2.waitLine(t, enrolledRE)
	polltest.Until(t, 30*time.Second, 200*time.Millisecond, func() bool {
		out, code := a.pact(t, "node", "inspect", "gpu-77")
		return code == 0 && strings.Contains(out, "also active in domain") && strings.Contains(out, "b.example (node gpu-77)")
	}, "pact node inspect in A never said gpu-77 is also active in b.example")
	if out, code := a.pact(t, "node", "list"); code != 0 || !strings.Contains(out, "also active in domain b.example") {
		t.Errorf("pact node list in A: exit %d, no note:\n%s", code, out)
	}
	_ = agentA2.cmd.Process.Signal(syscall.SIGTERM)
	_ = agentB.cmd.Process.Signal(syscall.SIGTERM)
	agentA2.wait(t)
	agentB.wait(t)
}
