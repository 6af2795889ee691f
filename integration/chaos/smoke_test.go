package chaos

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/bintest"
)

// TestSmoke runs one short leader-kill scenario on loopback against real
// journal processes and checks that the harness did its job: calls
// recorded, a fault injected, the history checked, every invariant
// evaluated, the report printed. Whether pact passed is the campaign's
// business (make chaos), not this test's.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts journal processes; skipped with -short")
	}
	bin := bintest.Dir(t, "pact-journal")
	var out bytes.Buffer
	opts := Options{Bin: bin, WorkDir: t.TempDir(), Net: "loopback", Duration: 5 * time.Second, Clients: 3, NodesPerClient: 2, CheckTimeout: 10 * time.Second, Out: &out, Keep: true}
	sc, _, err := Pick([]string{"leader-kill"}, false)
	if err != nil {
		t.Fatal(err)
	}
	res := RunScenario(sc[0], opts, 1)
	pass := Report(&out, []*ScenarioResult{res}, 1, nil)
	t.Logf("report (pass %v):\n%s", pass, out.String())
	if res.Err != nil {
		t.Fatalf("scenario error: %v", res.Err)
	}
	if res.Ops < 50 || res.OK == 0 {
		t.Errorf("%d calls, %d ok: the workload hardly ran", res.Ops, res.OK)
	}
	if len(res.Faults) == 0 || res.Faults[0].Kind != "SIGKILL" {
		t.Errorf("faults %v, want a SIGKILL", res.Faults)
	}
	// Three clients of two nodes, and the node ids hardware moved to.
	if res.Lin.Verdict == "" || res.Lin.Nodes < 6 {
		t.Errorf("linearizability %q over %d nodes, want a verdict over at least 6", res.Lin.Verdict, res.Lin.Nodes)
	}
	names := map[string]bool{}
	for _, c := range res.Checks {
		names[c.Name] = true
		if c.Checked == 0 {
			t.Errorf("invariant %s checked nothing", c.Name)
		}
	}
	for _, n := range []string{InvAckedWrites, InvHardware, InvCertsComitted, InvNoRenewRevoke, InvIdentical, InvSerials} {
		if !names[n] || !slices.Contains(res.Expected, n) {
			t.Errorf("invariant %s was not evaluated (expected: %v)", n, res.Expected)
		}
	}
	if len(res.NotApplicable) == 0 || !strings.Contains(out.String(), "not applicable: ") {
		t.Errorf("no invariant reported not applicable (%v)", res.NotApplicable)
	}
	// The load after healing was counted against its minimums, and the
	// leader kill was followed by probes in the history.
	if len(res.AfterHealMin) == 0 || res.AfterHeal[OpRead] == 0 || !strings.Contains(out.String(), "successful calls after healing") {
		t.Errorf("after healing: %v against %v", res.AfterHeal, res.AfterHealMin)
	}
	if res.Probes.Losses == 0 || res.Probes.Calls == 0 {
		t.Errorf("probes %+v: none after the leader kill", res.Probes)
	}
	if !strings.Contains(out.String(), "leader-kill") || !strings.Contains(out.String(), `"chaos":"pact"`) {
		t.Error("the report lacks the table row or the JSON line")
	}
	if _, err := os.Stat(filepath.Join(res.Dir, "history.txt")); err != nil {
		t.Errorf("history not kept: %v", err)
	}
}
