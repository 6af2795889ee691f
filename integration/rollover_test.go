package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/integration/launch"
)

// TestRootRollover runs docs/rollover.md on a quorum of three journal
// processes in the production layout, with pact-agent processes streaming
// throughout, through the real commands an operator types: a new root
// from the ceremony, both roots published with rolling restarts, each
// journal CA re-issued under the new root from a request that reuses the
// journal's key, each journal re-keyed under it by retiring its
// intermediate, the nodes moved, the old journal CAs revoked and the old
// root withdrawn. No node goes dark: no agent exits, none enrolls again
// (each renews onto the new root over the channel it has), and every
// agent streams again after the last restart. At the end every node's
// certificate chains to the new root and a credential of the old root is
// refused.
func TestRootRollover(t *testing.T) {
	skipShort(t)
	q := startQuorum(t, 3)
	nodes := inventory("roll", 4)
	q.registerBatch(nodes)
	oldRoot := filepath.Join(q.dir, "ca.pem")
	agents := make([]*proc, len(nodes))
	for i, n := range nodes {
		// The node image as it was: the old root only.
		agents[i] = start(t, nil, "pact-agent", "--journal", strings.Join(q.addrs(), ","), "--ca", oldRoot, "--mac", n.mac, "--bmc-serial", n.bmc)
	}
	for _, a := range agents {
		a.waitLineWithin(t, streamOpenRE, 60*time.Second)
	}
	work := t.TempDir()
	env := q.env(q.addrs()...)
	must := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runPact(t, env, args...)
		if code != 0 {
			t.Fatalf("pact %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stdout
	}

	// 1. The new root, made in the ceremony.
	newRootDir := filepath.Join(work, "root-new")
	must("ca", "init", "--dir", newRootDir, "--domain", launch.Domain)
	newRoot := filepath.Join(newRootDir, "ca.pem")

	// 2. Both roots published: journals restarted one at a time, the
	// operator's CLI trusts both.
	roots := filepath.Join(work, "roots.pem")
	writeConcat(t, roots, oldRoot, newRoot)
	q.rollingRestart(func(args []string) []string { return setFlag(args, "--root-cert", roots) })
	env = replaceEnv(env, "PACT_CA", roots)
	// Every running agent learns the new root from its stream's bundle.
	for i, a := range agents {
		waitOutput(t, a, "trusted roots changed by the journal's trust bundle", 60*time.Second, nodes[i].id)
	}

	// 3. Each journal CA re-issued under the new root, and each journal
	// re-keyed under it.
	oldCAs := journalCASerials(t, must("journal", "intermediates", "--journal-cas", "-o", "json"))
	if len(oldCAs) != 3 {
		t.Fatalf("journal CAs before: %v, want 3", oldCAs)
	}
	var ids []string
	for _, m := range q.members {
		csr := filepath.Join(work, m.id+".csr")
		runBin(t, "pact-journal", "ca-request", "--journal-id", m.id, "--key", "file:"+q.pq.JournalCAKey(m.id),
			"--names", m.id+",localhost,127.0.0.1", "--out", csr)
		signed := filepath.Join(work, m.id+"-ca.pem")
		must("ca", "sign-journal", "--dir", newRootDir, "--csr", csr, "--journal-id", m.id,
			"--names", m.id+",localhost,127.0.0.1", "--out", signed)
		replaceFile(t, q.pq.JournalCACert(m.id), signed)
		ids = append(ids, m.id)
	}
	// One retirement for every journal: each re-keys at once under its new
	// journal CA, and a journal signs nothing with a retiring
	// intermediate, so every node renews once, onto the new root.
	must(append([]string{"journal", "retire-intermediate"}, append(ids, "--grace", "2m", "--reason", "root rollover")...)...)
	for i := range q.members {
		waitJournalLog(t, q, i, "journal CA renewed", 30*time.Second)
	}
	// Each journal CA is recorded with the first intermediate published
	// under it, which the journal logs just before.
	var newCAs []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		newCAs = journalCASerials(t, must("journal", "intermediates", "--journal-cas", "-o", "json"))
		newCAs = slices.DeleteFunc(newCAs, func(s string) bool { return slices.Contains(oldCAs, s) })
		if len(newCAs) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal CAs after the re-issue: %v new, want 3", newCAs)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// 4. The nodes move: each renews onto an intermediate of a new
	// journal CA.
	deadline := time.Now().Add(90 * time.Second)
	for {
		underNew := issuersUnder(t, must("journal", "intermediates", "-o", "json"), newCAs)
		moved := 0
		for _, n := range nodesJSON(t, must("node", "list", "-o", "json")) {
			if underNew[n.CertIssuerSerial] {
				moved++
			}
		}
		if moved == len(nodes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d nodes renewed onto the new root within 90 s", moved, len(nodes))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// 5. The old root withdrawn: its journal CAs revoked, the journals
	// and the CLI trusting the new root only, the operator with a
	// credential of the new root.
	must(append([]string{"journal", "revoke-ca"}, append(oldCAs, "--reason", "root rollover", "--yes")...)...)
	marks := make([]int, len(agents))
	for i, a := range agents {
		marks[i] = len(a.output())
	}
	q.rollingRestart(func(args []string) []string { return setFlag(args, "--root-cert", newRoot) })
	adminDir := filepath.Join(work, "admin-new")
	must("ca", "issue-admin", "--dir", newRootDir, "--name", "admin", "--out-dir", adminDir)
	oldEnv := env
	env = replaceEnv(replaceEnv(replaceEnv(env, "PACT_CA", newRoot), "PACT_CERT", filepath.Join(adminDir, "admin.pem")), "PACT_KEY", filepath.Join(adminDir, "admin-key.pem"))
	must("journal", "status")
	if stdout, stderr, code := runPact(t, replaceEnv(oldEnv, "PACT_CA", newRoot), "node", "list"); code == 0 {
		t.Errorf("a credential of the withdrawn root was accepted:\n%s%s", stdout, stderr)
	}

	// No node went dark: every agent streams again after the last
	// restart, none exited, none enrolled a second time.
	for i, a := range agents {
		deadline := time.Now().Add(60 * time.Second)
		for !streamOpenRE.MatchString(a.output()[marks[i]:]) {
			select {
			case <-a.exited:
				t.Fatalf("agent %s exited (%v):\n%s", nodes[i].id, a.err, launch.Tail(a.output(), 30))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s did not stream again after the old root was withdrawn:\n%s", nodes[i].id, launch.Tail(a.output(), 30))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if n := len(enrolledRE.FindAllString(a.output(), -1)); n != 1 {
			t.Errorf("agent %s enrolled %d times, want once (a renewal keeps the node's identity):\n%s", nodes[i].id, n, launch.Tail(a.output(), 30))
		}
	}
	underNew := issuersUnder(t, must("journal", "intermediates", "-o", "json"), newCAs)
	for _, n := range nodesJSON(t, must("node", "list", "-o", "json")) {
		if !underNew[n.CertIssuerSerial] {
			t.Errorf("node %s holds a certificate of intermediate %s, not under a journal CA of the new root", n.NodeID, n.CertIssuerSerial)
		}
	}
}

// rollingRestart restarts every journal in turn with the flags edit
// returns, each serving again before the next stops.
func (q *quorum) rollingRestart(edit func([]string) []string) {
	q.t.Helper()
	for i := range q.members {
		q.pq.SetArgs(i, edit(q.pq.Args(i)))
		if err := q.pq.Stop(i); err != nil {
			q.t.Fatal(err)
		}
		q.launch(i)
		q.waitServing(i)
	}
}

// setFlag sets flag's value in args.
func setFlag(args []string, flag, value string) []string {
	out := slices.Clone(args)
	for i := range out {
		if out[i] == flag && i+1 < len(out) {
			out[i+1] = value
			return out
		}
	}
	return append(out, flag, value)
}

func replaceEnv(env []string, key, value string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, key+"=") })
	return append(out, key+"="+value)
}

func writeConcat(t *testing.T, dst string, srcs ...string) {
	t.Helper()
	var b []byte
	for _, s := range srcs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, data...)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile puts src's content in dst whole (a rename), as an operator's
// install would.
func replaceFile(t *testing.T, dst, src string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".new", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}

// runBin runs one of the built binaries to completion and fails the test
// if it fails.
func runBin(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func waitOutput(t *testing.T, p *proc, want string, within time.Duration, who string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.output(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %v:\n%s", who, want, within, launch.Tail(p.output(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitJournalLog(t *testing.T, q *quorum, i int, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(q.output(i), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %q within %v:\n%s", q.members[i].id, want, within, launch.Tail(q.output(i), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// journalCASerials reads pact journal intermediates --journal-cas -o json.
func journalCASerials(t *testing.T, out string) []string {
	t.Helper()
	var cas []struct {
		Serial string `json:"serial"`
		State  string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &cas); err != nil {
		t.Fatalf("journal CAs are not JSON: %v\n%s", err, out)
	}
	var serials []string
	for _, c := range cas {
		if c.State == "active" {
			serials = append(serials, c.Serial)
		}
	}
	return serials
}

// issuersUnder reads pact journal intermediates -o json and returns the
// serials of the intermediates some journal CA of cas signed.
func issuersUnder(t *testing.T, out string, cas []string) map[string]bool {
	t.Helper()
	var inters []struct {
		Serial       string `json:"serial"`
		IssuerSerial string `json:"issuer_serial"`
	}
	if err := json.Unmarshal([]byte(out), &inters); err != nil {
		t.Fatalf("intermediates are not JSON: %v\n%s", err, out)
	}
	under := map[string]bool{}
	for _, in := range inters {
		if slices.Contains(cas, in.IssuerSerial) {
			under[in.Serial] = true
		}
	}
	return under
}

func nodesJSON(t *testing.T, out string) []nodeJSON {
	t.Helper()
	var ns []nodeJSON
	if err := json.Unmarshal([]byte(out), &ns); err != nil {
		t.Fatalf("node list is not JSON: %v\n%s", err, out)
	}
	return ns
}
