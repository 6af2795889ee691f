package integration

import (
	"io"
	"net/http"
	"os/exec"
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
// B's agent is refused ACTIVE_IN_ANOTHER_DOMAIN and waits, and pact-agent
// status says why, naming A; A's agent stops cleanly (released), and B's
// enrolls. Then the same hardware is presented to A, which federates B
// with warn: A enrolls it and warns, and pact node inspect and list say
// where else it is active, on both sides. Last, A's journal stops: a
// machine booting into B enrolls at its first try, and B's inspect and
// audit say how old the claims of A it decided on were.
func TestTwoFederatedDomainsProcesses(t *testing.T) {
	a, aEndpoint, aMetrics := domainJournal(t, "a.example")
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
	sock := filepath.Join(t.TempDir(), "agent-b.sock")
	agentB := start(t, nil, "pact-agent", "--journal", b.addr, "--ca", filepath.Join(b.dir, "ca.pem"), "--mac", mac, "--bmc-serial", bmc,
		"--status-socket", sock)
	agentB.waitLineWithin(t, regexp.MustCompile(`ACTIVE_IN_ANOTHER_DOMAIN|active in domain a\.example`), 60*time.Second)
	// The agent waits and says why, naming A: its log, pact-agent status
	// and its JSON.
	if !regexp.MustCompile(`reason=active_in_another_domain .*domain=a\.example`).MatchString(agentB.output()) {
		t.Errorf("B's agent log does not name a.example with reason active_in_another_domain:\n%s", agentB.output())
	}
	if out, _ := agentStatusArgs(t, sock); !strings.Contains(out, "waiting:") || !strings.Contains(out, "active in domain a.example") ||
		!strings.Contains(out, "active_in_another_domain during enroll") {
		t.Errorf("pact-agent status of B's agent:\n%s\nwant it waiting, naming a.example", out)
	}
	if out, _ := agentStatusArgs(t, sock, "-o", "json"); !strings.Contains(out, `"active_in_domain": "a.example"`) {
		t.Errorf("pact-agent status -o json of B's agent:\n%s\nwant active_in_domain a.example", out)
	}

	// A's agent stops cleanly: the node is released in A, the claim ends,
	// and B's agent enrolls at its next try.
	_ = agentA.cmd.Process.Signal(syscall.SIGTERM)
	agentA.wait(t)
	agentB.waitLineWithin(t, enrolledRE, 90*time.Second)
	if out, _ := agentStatusArgs(t, sock, "-o", "json"); strings.Contains(out, "active_in_domain") {
		t.Errorf("pact-agent status -o json once enrolled in B still names another domain:\n%s", out)
	}

	// The same hardware presented in A (warn) while B holds it Active: A
	// enrolls it, warns, and says where else it is active. (The test waits
	// until A holds B's claim; A itself never waits for B.)
	polltest.Until(t, 30*time.Second, 100*time.Millisecond, func() bool { return claimsHeld(t, aMetrics, "b.example") == "1" },
		"A never held B's claim (pact_journal_federation_claims_held{domain=\"b.example\"} = %q)", claimsHeld(t, aMetrics, "b.example"))
	agentA2 := a.agent(t, mac, bmc)
	agentA2.waitLine(t, enrolledRE)
	polltest.Until(t, 30*time.Second, 200*time.Millisecond, func() bool {
		out, code := a.pact(t, "node", "inspect", "gpu-77")
		return code == 0 && strings.Contains(out, "also active in domain") && strings.Contains(out, "b.example (node gpu-77)")
	}, "pact node inspect in A never said gpu-77 is also active in b.example")
	if out, code := a.pact(t, "node", "list"); code != 0 || !strings.Contains(out, "also active in domain b.example") {
		t.Errorf("pact node list in A: exit %d, no note:\n%s", code, out)
	}
	if !regexp.MustCompile(`msg="node enrolling while its hardware is active in another domain" .*domain=b\.example`).MatchString(a.proc.output()) {
		t.Errorf("A's journal never warned that gpu-77 is active in b.example:\n%s", a.proc.output())
	}
	// Raised on both sides: B, where the node was Active first, says so
	// too once it has read A's claim.
	polltest.Until(t, 30*time.Second, 200*time.Millisecond, func() bool {
		out, code := b.pact(t, "node", "inspect", "gpu-77")
		return code == 0 && strings.Contains(out, "also active in domain") && strings.Contains(out, "a.example (node gpu-77)")
	}, "pact node inspect in B never said gpu-77 is also active in a.example")
	if out, code := b.pact(t, "node", "list"); code != 0 || !strings.Contains(out, "also active in domain a.example") {
		t.Errorf("pact node list in B: exit %d, no note:\n%s", code, out)
	}

	// A becomes unreachable: its journal stops. A machine booting into B
	// enrolls at its first try, deciding on the claims B holds, and B says
	// how old they were.
	const mac2, bmc2 = "02:00:00:00:78:01", "BMC-78"
	if out, code := b.pact(t, "node", "enroll", "gpu-78", "--mac", mac2, "--bmc-serial", bmc2); code != 0 {
		t.Fatalf("pact node enroll gpu-78: exit %d\n%s", code, out)
	}
	a.stop(t)
	stopped := time.Now().UTC()
	agentB2 := start(t, nil, "pact-agent", "--journal", b.addr, "--ca", filepath.Join(b.dir, "ca.pem"), "--mac", mac2, "--bmc-serial", bmc2,
		"--status-socket", filepath.Join(t.TempDir(), "agent-b2.sock"))
	agentB2.waitLine(t, enrolledRE)
	if out := agentB2.output(); strings.Contains(out, "failed") || strings.Contains(out, "refused") {
		t.Errorf("gpu-78 did not enroll in B at its first try with A unreachable:\n%s", out)
	}
	out, code := b.pact(t, "node", "inspect", "gpu-78")
	m := regexp.MustCompile(`claims at activation: +a\.example: read \S+ ago \((\S+)\), none on this hardware`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("pact node inspect gpu-78 in B: exit %d, no claims of a.example with their age:\n%s", code, out)
	}
	// The claims were read before A stopped: B decided on what it held
	// and said so, instead of waiting for A.
	if read, err := time.Parse(time.RFC3339, m[1]); err != nil || read.After(stopped) {
		t.Errorf("claims of a.example read at %s (%v), after A's journal stopped at %s", m[1], err, stopped.Format(time.RFC3339))
	}
	if out, code := b.pact(t, "audit", "--node", "gpu-78"); code != 0 || !strings.Contains(out, "claims a.example: read ") {
		t.Errorf("pact audit --node gpu-78 in B: exit %d, no claims in the enroll entry:\n%s", code, out)
	}
	for _, p := range []*proc{agentA2, agentB, agentB2} {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.wait(t)
	}
}

// agentStatusArgs runs pact-agent status against the status socket sock,
// with args (-o json).
func agentStatusArgs(t *testing.T, sock string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "pact-agent"), append([]string{"status", "--status-socket", sock}, args...)...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("pact-agent status: %v", err)
	}
	return string(out), 0
}
