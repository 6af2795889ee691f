package integration

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/integration/chaos"
	"github.com/pact-hpc/pact/internal/polltest"
)

// pi10Names is the namespace network of this package's tests: its own
// prefix and subnet, so it never meets the chaos campaign's (pactchaos-*).
var pi10Names = chaos.NetNSNames{Prefix: "pi10-", Short: "pi10", Subnet: "10.214.0"}

// needNetNS skips a test that needs network namespaces where they cannot
// be made, except in CI (CI=true), where it fails: there the test must run.
func needNetNS(t *testing.T) {
	t.Helper()
	var why error
	if os.Geteuid() != 0 {
		why = errors.New("network namespaces need root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			why = errors.Join(why, err)
		}
	}
	if why == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test must run in CI: %v", why)
	}
	t.Skipf("needs network namespaces: %v", why)
}

var agentRetryRE = regexp.MustCompile(`NO_LEADER`)

// A node registered through the majority while one follower is cut off
// boots against that follower first. The follower's copy of the registry
// lacks the node, but it never refuses the node for good: it answers
// NO_LEADER, the agent keeps retrying, and once the partition heals the
// node enrolls through the same journal with no operator involved.
func TestAgentAtCutOffFollowerEnrollsAfterHeal(t *testing.T) {
	skipShort(t)
	needNetNS(t)
	nw, err := chaos.NewNetNSNamed(pi10Names, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	q, err := chaos.NewProcQuorum(chaos.ProcConfig{Bin: binDir, Dir: dir, N: 3, Net: nw})
	if err != nil {
		nw.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i := range 3 {
				t.Logf("--- %s:\n%s", q.ID(i), q.Log(i))
			}
		}
		if err := q.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if err := chaos.StartAll(q, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	leader, err := chaos.Leader(t.Context(), q, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cut := (leader + 1) % 3
	var majority []int
	for i := range 3 {
		if i != cut {
			majority = append(majority, i)
		}
	}
	if err := q.Partition([][]int{majority, {cut}}); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PACT_JOURNAL=" + q.GRPC(majority[0]) + "," + q.GRPC(majority[1]),
		"PACT_CA=" + filepath.Join(dir, "ca.pem"),
		"PACT_CERT=" + filepath.Join(dir, "admin.pem"),
		"PACT_KEY=" + filepath.Join(dir, "admin-key.pem"),
	}
	if stdout, stderr, code := runPact(t, env, "node", "enroll", "late-1", "--mac", "52:54:00:cc:00:01", "--bmc-serial", "SN-LATE-1"); code != 0 {
		t.Fatalf("registering late-1 through the majority: exit %d\n%s%s", code, stdout, stderr)
	}

	// The agent knows only the cut-off follower.
	agent := start(t, nil, "pact-agent", "--journal", q.GRPC(cut), "--ca", filepath.Join(dir, "ca.pem"),
		"--mac", "52:54:00:cc:00:01", "--bmc-serial", "SN-LATE-1", "--status-socket", "")
	// It is told to retry (the agent logs that once), comes back, is told
	// again (the cut-off journal counts its unconfirmed refusals), and
	// does not exit.
	var last polltest.Last
	polltest.Until(t, 90*time.Second, 100*time.Millisecond, func() bool {
		select {
		case <-agent.exited:
			t.Fatalf("pact-agent exited (%v) while the journal it knows was cut off:\n%s", agent.err, agent.output())
		default:
		}
		n := unconfirmed(t, q.Metrics(cut))
		last.Value = fmt.Sprintf("(%d):\n%s", n, agent.output())
		return agentRetryRE.MatchString(agent.output()) && n >= 3
	}, "pact-agent was not told NO_LEADER three times within 90s %v", &last)
	if strings.Contains(agent.output(), "msg=enrolled") {
		t.Fatalf("enrolled through a journal cut off from the leader:\n%s", agent.output())
	}
	if err := q.Heal(); err != nil {
		t.Fatal(err)
	}
	agent.waitLineWithin(t, enrolledRE, 90*time.Second)
	if !strings.Contains(q.Log(cut), "node enrolled") || !strings.Contains(q.Log(cut), "late-1") {
		t.Errorf("%s did not log the enrollment", q.ID(cut))
	}
}

// unconfirmed reads a journal's count of refusals it could not confirm
// with the leader (0 if it does not answer).
func unconfirmed(t *testing.T, metrics string) int {
	t.Helper()
	return counter(t, metrics, "pact_journal_unconfirmed_refusals_total")
}

// counter reads the value of series (a metric name with its labels, as
// /metrics prints it) from a journal's /metrics; 0 if the journal does not
// answer or has no such series.
func counter(t *testing.T, metrics, series string) int {
	t.Helper()
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + metrics + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
