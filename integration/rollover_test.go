package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/polltest"
)

// TestRootRollover runs docs/rollover.md on a quorum of three journal
// processes in the production layout, with pact-agent processes streaming
// throughout, through the real commands an operator types: a new root
// from the ceremony, both roots published with rolling restarts, each
// journal CA re-issued under the new root from a request that reuses the
// journal's key, each journal re-keyed under it by retiring its
// intermediate, the operators and the nodes moved, the old journal CAs
// revoked and the old root withdrawn. No node goes dark: no agent exits,
// none enrolls again (each renews onto the new root over the channel it
// has), and every agent streams again after the last restart. At the end
// every node's certificate chains to the new root, the operator works on
// with the credential she renewed in step 4, and a credential of the old
// root is refused.
//
// The operator starts as the did: her credential renewed through a
// journal under its old journal CA. The mistakes the runbook guards
// against are made on the way: a journal CA file installed on the wrong
// journal (the journal re-keys under its old one; retire-intermediate says
// so and exits 6, pact journal status shows why), and the old journal CAs
// revoked before she renewed (refused, nothing changed, naming where to
// renew).
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
	// The operator's credential: her own copy of the first one, renewed
	// through a journal, as the operator had.
	opCert, opKey := filepath.Join(work, "admin.pem"), filepath.Join(work, "admin-key.pem")
	copyFile(t, filepath.Join(q.dir, "admin.pem"), opCert)
	copyFile(t, filepath.Join(q.dir, "admin-key.pem"), opKey)
	env := replaceEnv(replaceEnv(q.env(q.addrs()...), "PACT_CERT", opCert), "PACT_KEY", opKey)
	must := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runPact(t, env, args...)
		if code != 0 {
			t.Fatalf("pact %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stdout
	}
	if out := must("admin", "renew"); !strings.Contains(out, "under journal CA") {
		t.Fatalf("admin renew does not say what signed the credential:\n%s", out)
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
	// Each journal restarted with a new intermediate: the one it had is
	// superseded, not active.
	var states polltest.Last
	polltest.Until(t, 30*time.Second, 200*time.Millisecond, func() bool {
		count := map[string]int{}
		for _, in := range intermediatesJSON(t, must("journal", "intermediates", "-o", "json")) {
			count[in.State]++
		}
		states.Value = count
		return count["active"] == 3 && count["superseded"] == 3
	}, "intermediates after the restarts: %v, want each journal's current one active and its first superseded", &states)

	// 3. Each journal CA re-issued under the new root, and each journal
	// re-keyed under it. The old journal CAs first, for step 5.
	oldCAs := journalCASerials(t, must("journal", "intermediates", "--journal-cas", "-o", "json"))
	if len(oldCAs) != 3 {
		t.Fatalf("journal CAs before: %v, want 3", oldCAs)
	}
	oldCAFile := filepath.Join(work, "old-journal-cas.txt")
	runbookShell(t, env, work, `pact journal intermediates --journal-cas -o json | jq -r '.[] | select(.state=="active") | .serial' > old-journal-cas.txt`,
		func() { writeLines(t, oldCAFile, oldCAs) })
	if got := strings.Fields(readFile(t, oldCAFile)); !sameSet(got, oldCAs) {
		t.Fatalf("old-journal-cas.txt holds %v, want %v", got, oldCAs)
	}
	if stdout, _, _ := runPact(t, env, "admin", "list", "-o", "json"); !operatorUnder(t, stdout, oldCAs) {
		t.Fatalf("the operator's renewed credential is not under an old journal CA:\n%s", stdout)
	}
	var ids []string
	signed := map[string]string{}
	for _, m := range q.members {
		csr := filepath.Join(work, m.id+"-root-new.csr")
		runBin(t, "pact-journal", "ca-request", "--journal-id", m.id, "--key", "file:"+q.pq.JournalCAKey(m.id),
			"--names", m.id+",localhost,127.0.0.1", "--out", csr)
		signed[m.id] = filepath.Join(work, m.id+"-ca-root-new.pem")
		must("ca", "sign-journal", "--dir", newRootDir, "--csr", csr, "--journal-id", m.id,
			"--names", m.id+",localhost,127.0.0.1", "--out", signed[m.id])
		ids = append(ids, m.id)
	}
	// The mistake: j3 is given j2's file.
	last := q.members[len(q.members)-1].id
	for i, m := range q.members {
		file := signed[m.id]
		if i == len(q.members)-1 {
			file = signed[q.members[i-1].id]
		}
		replaceFile(t, q.pq.JournalCACert(m.id), file)
	}
	// One retirement for every journal: each re-keys at once under its new
	// journal CA, and a journal signs nothing with a retiring
	// intermediate, so every node renews once, onto the new root. The
	// command waits for the re-keys and says what each signs under; j3
	// kept its old journal CA, which it says, exiting 6.
	retire := append([]string{"journal", "retire-intermediate"}, append(ids, "--grace", "2m", "--reason", "root rollover")...)
	stdout, stderr, code := runPact(t, env, retire...)
	if code != 6 || !strings.Contains(stderr, "journal "+last+" re-keyed under its OLD journal CA") || !strings.Contains(stderr, "refused the certificate in its --journal-ca-cert file") {
		t.Fatalf("retire with j3's file wrong: exit %d, want 6 saying j3 kept its old journal CA\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "warning: your own credential") || !strings.Contains(stderr, "stops working at") {
		t.Errorf("the retirement does not warn that the operator's own credential goes at the end of the grace:\n%s", stderr)
	}
	for _, id := range ids[:len(ids)-1] {
		waitJournalLog(t, q, slices.Index(ids, id), "journal CA renewed", 30*time.Second)
		if !regexp.MustCompile("journal " + id + " signs with intermediate [0-9a-f]+ under journal CA [0-9a-f]+").MatchString(stdout) {
			t.Errorf("the retirement does not say what %s signs under:\n%s", id, stdout)
		}
	}
	if out, _, _ := runPact(t, env, "journal", "status"); !strings.Contains(out, "journal CA file refused") {
		t.Errorf("pact journal status does not show j3's refused file:\n%s", out)
	}
	// Fixed: j3's own file, and j3 retired again.
	replaceFile(t, q.pq.JournalCACert(last), signed[last])
	if out := must("journal", "retire-intermediate", last, "--grace", "2m", "--reason", "root rollover"); !strings.Contains(out, "journal "+last+" signs with intermediate") {
		t.Errorf("the second retirement of %s does not say what it signs under:\n%s", last, out)
	}
	waitJournalLog(t, q, len(ids)-1, "journal CA renewed", 30*time.Second)
	// Each journal CA is recorded with the first intermediate published
	// under it, which the journal logs just before.
	var newCAs []string
	var seen polltest.Last
	polltest.Until(t, 30*time.Second, 200*time.Millisecond, func() bool {
		newCAs = journalCASerials(t, must("journal", "intermediates", "--journal-cas", "-o", "json"))
		newCAs = slices.DeleteFunc(newCAs, func(s string) bool { return slices.Contains(oldCAs, s) })
		seen.Value = newCAs
		return len(newCAs) == 3
	}, "journal CAs after the re-issue: %v new, want 3", &seen)

	// Step 5 too early: the operator's credential still chains to an old
	// journal CA. Refused, nothing changed, saying where to renew.
	revoke := append(append([]string{"journal", "revoke-ca"}, oldCAs...), "--reason", "root rollover", "--yes")
	opOldCert, opOldKey := filepath.Join(work, "admin-old.pem"), filepath.Join(work, "admin-old-key.pem")
	copyFile(t, opCert, opOldCert)
	copyFile(t, opKey, opOldKey)
	stdout, stderr, code = runPact(t, env, revoke...)
	if code != 6 || !strings.Contains(stderr, "REVOKES_OWN_CREDENTIAL") || !strings.Contains(stderr, "pact admin renew --journal") || !strings.Contains(stderr, "--yes-including-my-credential") {
		t.Fatalf("revoke-ca with the operator's credential under an old journal CA: exit %d, want 6 naming where to renew\n%s%s", code, stdout, stderr)
	}
	if got := journalCASerials(t, must("journal", "intermediates", "--journal-cas", "-o", "json")); len(got) != 6 {
		t.Fatalf("a refused revocation changed the journal CAs: %d active, want 6", len(got))
	}

	// 4. The operator renews onto the new chain, within the grace; then
	// every operator is on it.
	must("admin", "renew")
	if stdout, _, _ := runPact(t, env, "admin", "list", "-o", "json"); !operatorUnder(t, stdout, newCAs) {
		t.Fatalf("the operator's renewed credential is not under a new journal CA:\n%s", stdout)
	}
	runbookShell(t, env, work, `pact admin list -o json | jq -r --rawfile old old-journal-cas.txt '
    ($old | split("\n")) as $o | .operators | group_by(.name)[]
    | select(all(.[]; .issuer == "root" or .issuer == "" or (.journal_ca_serial | IN($o[]))))
    | "\(.[0].name): no credential on the new chain yet"' > not-moved.txt`, func() { writeLines(t, filepath.Join(work, "not-moved.txt"), nil) })
	if notMoved := readFile(t, filepath.Join(work, "not-moved.txt")); strings.TrimSpace(notMoved) != "" {
		t.Errorf("operators not on the new chain after renewing: %s", notMoved)
	}
	// The nodes move: each renews onto an intermediate of a new journal
	// CA, until the old journal CAs count none.
	var left polltest.Last
	polltest.Until(t, 150*time.Second, 500*time.Millisecond, func() bool {
		n := 0
		for _, jc := range journalCAsJSON(t, must("journal", "intermediates", "--journal-cas", "-o", "json")) {
			if slices.Contains(oldCAs, jc.Serial) {
				n += jc.Nodes
			}
		}
		left.Value = fmt.Sprintf("%d of %d nodes", n, len(nodes))
		return n == 0
	}, "%v still under the old journal CAs after 150 s", &left)
	if stdout, stderr, code := runPact(t, env, "node", "list", "--issuer", strings.Join(oldCAs, ",")); code != 0 || strings.TrimSpace(stdout) != "" || !strings.Contains(stderr, "no nodes with a current certificate under") {
		t.Errorf("node list --issuer of the old journal CAs: exit %d\n%s%s", code, stdout, stderr)
	}
	underNew := issuersUnder(t, must("journal", "intermediates", "-o", "json"), newCAs)
	for _, n := range nodesJSON(t, must("node", "list", "-o", "json")) {
		if !underNew[n.CertIssuerSerial] {
			t.Errorf("node %s holds a certificate of intermediate %s, not under a journal CA of the new root", n.NodeID, n.CertIssuerSerial)
		}
	}

	// 5. The old root withdrawn: its journal CAs revoked (each journal
	// goes on signing under its new one), the journals and the CLI
	// trusting the new root only; the operator goes on with the
	// credential she renewed.
	out := must(revoke...)
	for _, id := range ids {
		if !strings.Contains(out, "journal "+id+" goes on signing under its journal CA") {
			t.Errorf("revoke-ca does not say %s goes on signing:\n%s", id, out)
		}
	}
	if strings.Contains(out, "signs nothing") {
		t.Errorf("revoke-ca says a journal signs nothing, though each has its new journal CA:\n%s", out)
	}
	marks := make([]int, len(agents))
	for i, a := range agents {
		marks[i] = len(a.output())
	}
	q.rollingRestart(func(args []string) []string { return setFlag(args, "--root-cert", newRoot) })
	oldEnv := env
	env = replaceEnv(env, "PACT_CA", newRoot)
	must("journal", "status")
	if stdout, stderr, code := runPact(t, replaceEnv(q.env(q.addrs()...), "PACT_CA", newRoot), "node", "list"); code == 0 {
		t.Errorf("a credential of the withdrawn root was accepted:\n%s%s", stdout, stderr)
	}
	// The credential she held before step 4 went with the old journal
	// CAs: the CLI says her credential was refused, not that the journal
	// is down.
	stdout, stderr, code = runPact(t, replaceEnv(replaceEnv(replaceEnv(oldEnv, "PACT_CA", newRoot), "PACT_CERT", opOldCert), "PACT_KEY", opOldKey), "node", "list")
	if code != 7 || !strings.Contains(stderr, "refused your credential") || strings.Contains(stderr, "make run") {
		t.Errorf("the credential renewed under an old journal CA, after step 5: exit %d\n%s%s", code, stdout, stderr)
	}
	// No node went dark: every agent streams again after the last
	// restart, none exited, none enrolled a second time.
	for i, a := range agents {
		var tail polltest.Last
		polltest.Until(t, 60*time.Second, 200*time.Millisecond, func() bool {
			select {
			case <-a.exited:
				t.Fatalf("agent %s exited (%v):\n%s", nodes[i].id, a.err, launch.Tail(a.output(), 30))
			default:
			}
			tail.Value = launch.Tail(a.output(), 30)
			return streamOpenRE.MatchString(a.output()[marks[i]:])
		}, "agent %s did not stream again after the old root was withdrawn:\n%v", nodes[i].id, &tail)
		if n := len(enrolledRE.FindAllString(a.output(), -1)); n != 1 {
			t.Errorf("agent %s enrolled %d times, want once (a renewal keeps the node's identity):\n%s", nodes[i].id, n, launch.Tail(a.output(), 30))
		}
	}
	underNew = issuersUnder(t, must("journal", "intermediates", "-o", "json"), newCAs)
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
	var tail polltest.Last
	polltest.Until(t, within, 200*time.Millisecond, func() bool {
		tail.Value = launch.Tail(p.output(), 30)
		return strings.Contains(p.output(), want)
	}, "%s did not log %q within %v:\n%v", who, want, within, &tail)
}

func waitJournalLog(t *testing.T, q *quorum, i int, want string, within time.Duration) {
	t.Helper()
	var tail polltest.Last
	polltest.Until(t, within, 200*time.Millisecond, func() bool {
		tail.Value = launch.Tail(q.output(i), 30)
		return strings.Contains(q.output(i), want)
	}, "%s did not log %q within %v:\n%v", q.members[i].id, want, within, &tail)
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

// runbookShell runs a docs/rollover.md command line as written, with sh in
// dir, the built pact first on PATH and env: the runbook's jq pipelines.
// Without jq on this machine, instead does what the line would.
func runbookShell(t *testing.T, env []string, dir, line string, instead func()) {
	t.Helper()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Logf("jq is not installed: the runbook's line is not run as written: %s", line)
		instead()
		return
	}
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func writeLines(t *testing.T, path string, lines []string) {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// operatorUnder reads pact admin list -o json and reports whether a valid
// credential of the operator "admin" is under one of the journal CAs cas.
func operatorUnder(t *testing.T, out string, cas []string) bool {
	t.Helper()
	var v struct {
		Operators []struct {
			Name            string `json:"name"`
			State           string `json:"state"`
			JournalCASerial string `json:"journal_ca_serial"`
		} `json:"operators"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("admin list is not JSON: %v\n%s", err, out)
	}
	for _, o := range v.Operators {
		if o.Name == "admin" && o.State == "valid" && slices.Contains(cas, o.JournalCASerial) {
			return true
		}
	}
	return false
}

type intermediateJSON struct {
	Serial string `json:"serial"`
	State  string `json:"state"`
	Nodes  int    `json:"nodes"`
}

// intermediatesJSON reads pact journal intermediates -o json.
func intermediatesJSON(t *testing.T, out string) []intermediateJSON {
	t.Helper()
	var ins []intermediateJSON
	if err := json.Unmarshal([]byte(out), &ins); err != nil {
		t.Fatalf("intermediates are not JSON: %v\n%s", err, out)
	}
	return ins
}

// journalCAsJSON reads pact journal intermediates --journal-cas -o json.
func journalCAsJSON(t *testing.T, out string) []intermediateJSON {
	t.Helper()
	return intermediatesJSON(t, out)
}
