package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// commitIndex is the quorum's Raft commit index, from pact journal status.
func (j *devJournal) commitIndex(t *testing.T) uint64 {
	t.Helper()
	out, code := j.pact(t, "journal", "status", "-o", "json")
	var v struct {
		CommitIndex uint64 `json:"commit_index"`
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		t.Fatalf("pact journal status: exit %d, %v\n%s", code, err, out)
	}
	return v.CommitIndex
}

// Everyday registry work as an operator does it: registering a node that
// exists exactly so is "exists", exit 0, and writes nothing to Raft; a
// batch re-run writes nothing for rows that match; multicast MACs are
// refused before anything is sent.
func TestRegisterAgain(t *testing.T) {
	j := startJournal(t, t.TempDir(), "127.0.0.1:0")
	if out, code := j.pact(t, "node", "enroll", "node-001", "--mac", "52:54:00:00:00:01", "--bmc-serial", "SN-0001"); code != 0 {
		t.Fatalf("pact node enroll: exit %d\n%s", code, out)
	}
	before := j.commitIndex(t)
	out, code := j.pact(t, "node", "enroll", "node-001", "--mac", "52:54:00:00:00:01", "--bmc-serial", "SN-0001")
	if code != 0 || !strings.Contains(out, "node-001 exists") {
		t.Errorf("registering the same node again: exit %d\n%s", code, out)
	}
	if after := j.commitIndex(t); after != before {
		t.Errorf("an identical registration wrote to Raft: commit index %d -> %d", before, after)
	}
	// A different identity under the same name is still a conflict.
	if out, code := j.pact(t, "node", "enroll", "node-001", "--mac", "52:54:00:00:00:09"); code != 4 {
		t.Errorf("same name, other MAC: exit %d, want 4\n%s", code, out)
	}

	csv := filepath.Join(t.TempDir(), "rack.csv")
	if err := os.WriteFile(csv, []byte("node_id,mac,bmc_serial\nnode-001,52:54:00:00:00:01,SN-0001\nnode-002,52:54:00:00:00:02,SN-0002\nnode-003,52:54:00:00:00:03,SN-0003\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := j.pact(t, "node", "enroll", "--batch", csv); code != 0 {
		t.Fatalf("first batch: exit %d\n%s", code, out)
	}
	before = j.commitIndex(t)
	out, code = j.pact(t, "node", "enroll", "--batch", csv, "-o", "json")
	if code != 0 || strings.Count(out, `"result":"exists"`) != 3 {
		t.Errorf("batch re-run: exit %d, want every row exists:\n%s", code, out)
	}
	if after := j.commitIndex(t); after != before {
		t.Errorf("a batch re-run wrote to Raft: commit index %d -> %d", before, after)
	}

	if out, code := j.pact(t, "node", "enroll", "node-004", "--mac", "01:00:5e:00:00:fb"); code != 2 || !strings.Contains(out, "multicast") {
		t.Errorf("multicast MAC: exit %d, want 2\n%s", code, out)
	}

	// Finding a node by hardware: a MAC in any form; a BMC serial exactly,
	// case and all, as enrollment matches it.
	for _, c := range []struct {
		args []string
		want string // node id, or "" for none
	}{
		{[]string{"--mac", "5254.0000.0002"}, "node-002"},
		{[]string{"--mac", "52:54:00:00:00:99"}, ""},
		{[]string{"--bmc-serial", " SN-0003 "}, "node-003"},
		{[]string{"--bmc-serial", "sn-0003"}, ""},
		{[]string{"--mac", "52:54:00:00:00:01", "--bmc-serial", "SN-0002"}, ""},
	} {
		out, code := j.pact(t, append([]string{"node", "list", "-o", "json"}, c.args...)...)
		var nodes []nodeJSON
		if err := json.Unmarshal([]byte(out), &nodes); code != 0 || err != nil {
			t.Errorf("node list %v: exit %d %v\n%s", c.args, code, err, out)
			continue
		}
		var got string
		if len(nodes) == 1 {
			got = nodes[0].NodeID
		}
		if len(nodes) > 1 || got != c.want {
			t.Errorf("node list %v: %v, want %q", c.args, nodes, c.want)
		}
	}
	if out, code := j.pact(t, "node", "list", "--mac", "zz"); code != 2 {
		t.Errorf("node list --mac zz: exit %d, want 2\n%s", code, out)
	}
}

// A NIC swap as an operator handles it: pact node update changes the
// registered MACs of a running node (audited); its next enrollment is
// matched against them, so the agent restarted with the new NIC enrolls
// and an agent with the removed NIC is refused.
func TestNodeUpdate(t *testing.T) {
	j := startJournal(t, t.TempDir(), "127.0.0.1:0")
	for _, args := range [][]string{
		{"node-001", "--mac", "52:54:00:00:00:01", "--bmc-serial", "SN-0001"},
		{"node-002", "--mac", "52:54:00:00:00:02", "--bmc-serial", "SN-0002"},
	} {
		if out, code := j.pact(t, append([]string{"node", "enroll"}, args...)...); code != 0 {
			t.Fatalf("pact node enroll: exit %d\n%s", code, out)
		}
	}
	agent := func(mac string) *proc {
		return start(t, nil, "pact-agent", "--journal", j.addr, "--ca", filepath.Join(j.dir, "ca.pem"),
			"--mac", mac, "--bmc-serial", "SN-0001", "--status-socket", "")
	}
	old := agent("52:54:00:00:00:01")
	serial := old.waitLine(t, enrolledRE)[1]
	old.waitLine(t, streamOpenRE)

	out, code := j.pact(t, "node", "update", "node-001", "--mac", "52:54:00:00:00:11")
	if code != 0 || !strings.Contains(out, "updated node-001") {
		t.Fatalf("pact node update: exit %d\n%s", code, out)
	}
	if n := j.inspect(t, "node-001"); n.State != "active" || n.CertSerial != serial || strings.Join(n.MACs, ",") != "52:54:00:00:00:11" {
		t.Errorf("after update: %+v (want still active with %s, new MAC)", n, serial)
	}
	if audit, _ := j.pact(t, "audit", "--node", "node-001"); !strings.Contains(audit, "update") || !strings.Contains(audit, "52:54:00:00:00:11") {
		t.Errorf("the update is not audited:\n%s", audit)
	}
	if out, code := j.pact(t, "node", "update", "node-001", "--mac", "52:54:00:00:00:02"); code != 4 || !strings.Contains(out, "HARDWARE_IDENTITY_CONFLICT") {
		t.Errorf("update to another node's MAC: exit %d, want 4\n%s", code, out)
	}
	if out, code := j.pact(t, "node", "update", "node-001"); code != 2 {
		t.Errorf("update with nothing to change: exit %d, want 2\n%s", code, out)
	}

	old.cmd.Process.Signal(syscall.SIGTERM)
	old.wait(t)
	if code := agent("52:54:00:00:00:01").wait(t); code != 3 {
		t.Errorf("an agent with the removed NIC: exit %d, want 3 (NODE_NOT_ENROLLED)", code)
	}
	swapped := agent("52:54:00:00:00:11")
	if s := swapped.waitLine(t, enrolledRE)[1]; s == serial {
		t.Errorf("the swapped node holds the old certificate")
	}
}
