package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/integration/launch"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// launchStart begins the line integration/launch writes to a journal's
// log at each start ("=== launch: start N of jX at TIME").
const launchStart = "=== launch: start "

// journalProc is one pact-journal of the benchmark quorum; its process
// runs under c.q (integration/launch).
type journalProc struct {
	c       *cluster
	i       int
	id      string
	grpc    string
	raft    string
	metrics string
	log     string // path of its log (stdout and stderr of every start)
}

func (j *journalProc) pid() int                { return j.c.q.Pid(j.i) }
func (j *journalProc) started() time.Time      { return j.c.q.Started(j.i) }
func (j *journalProc) exited() <-chan struct{} { return j.c.q.Exited(j.i) }

// cluster is a quorum of journal processes sharing one domain root in dir.
type cluster struct {
	bin      string
	dir      string
	q        *launch.ProcQuorum
	journals []*journalProc
	roots    *x509.CertPool
	admin    tls.Certificate
}

// newCluster runs pact-journal init in dir and prepares (does not start)
// n journals on free loopback ports. extra flags and env go to every
// journal.
func newCluster(bin, dir string, n int, extra, env []string) (*cluster, error) {
	c := &cluster{bin: bin, dir: dir}
	lb, err := launch.NewLoopback(n, "the benchmark runs on loopback")
	if err != nil {
		return nil, err
	}
	// With storm -one-source every agent connects from 127.0.0.1, where a
	// real site has one address per node (by default each agent has its
	// own loopback address; --journal-args may override).
	extra = append([]string{"--max-conns-per-source", "16384"}, extra...)
	if c.q, err = launch.NewProcQuorum(launch.ProcConfig{Bin: bin, Dir: dir, N: n, Net: lb, Extra: extra, Env: env}); err != nil {
		return nil, err
	}
	c.roots, c.admin = c.q.Roots(), c.q.Admin()
	for i := range n {
		c.journals = append(c.journals, &journalProc{c: c, i: i, id: c.q.ID(i), grpc: c.q.GRPC(i), raft: c.q.Raft(i), metrics: c.q.Metrics(i), log: c.q.LogPath(i)})
	}
	return c, nil
}

// start launches journal i (first start or restart), appending to its log.
func (c *cluster) start(i int) error { return c.q.Start(i) }

// startAll launches every journal and waits until each serves.
func (c *cluster) startAll(timeout time.Duration) error {
	for i := range c.journals {
		if err := c.start(i); err != nil {
			return err
		}
	}
	for i := range c.journals {
		if _, err := c.waitServing(i, timeout); err != nil {
			return err
		}
	}
	return nil
}

var servingRE = regexp.MustCompile(`msg="journal serving"`)

// waitServing waits until journal i's current process logs that it
// serves and returns how long after its start that was.
func (c *cluster) waitServing(i int, timeout time.Duration) (time.Duration, error) {
	if err := c.q.WaitServing(i, timeout); err != nil {
		return 0, fmt.Errorf("%w; see %s", err, c.journals[i].log)
	}
	return time.Since(c.q.Started(i)), nil
}

// logHasSince reports whether the part of a journal log written by the
// process started at `since` (after the last stormbench marker) matches re.
func logHasSince(path string, since time.Time, re *regexp.Regexp) (bool, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, ""
	}
	if k := bytes.LastIndex(b, []byte(launchStart)); k >= 0 {
		b = b[k:]
	}
	if loc := re.FindIndex(b); loc != nil {
		// The whole line, for callers that want its fields.
		start := bytes.LastIndexByte(b[:loc[0]], '\n') + 1
		end := bytes.IndexByte(b[loc[0]:], '\n')
		if end < 0 {
			end = len(b) - loc[0]
		}
		return true, string(b[start : loc[0]+end])
	}
	return false, ""
}

// countInLogs counts lines matching re in every journal log.
func (c *cluster) countInLogs(re *regexp.Regexp) int {
	n := 0
	for _, j := range c.journals {
		f, err := os.Open(j.log)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if re.Match(sc.Bytes()) {
				n++
			}
		}
		f.Close()
	}
	return n
}

// stop terminates journal i: SIGTERM, then SIGKILL after grace.
func (c *cluster) stop(i int, grace time.Duration) {
	if c.q.Running(i) {
		_ = c.q.StopWithin(i, grace)
	}
}

// kill SIGKILLs journal i and waits for it to be gone.
func (c *cluster) kill(i int) error { return c.q.Kill(i) }

func (c *cluster) stopAll() {
	for i := range c.journals {
		c.stop(i, 5*time.Second)
	}
}

func (c *cluster) running(i int) bool { return c.q.Running(i) }

func (c *cluster) pids() []int {
	var out []int
	for i := range c.journals {
		if c.running(i) {
			out = append(out, c.q.Pid(i))
		}
	}
	return out
}

func (c *cluster) addrs() []string {
	var out []string
	for _, j := range c.journals {
		out = append(out, j.grpc)
	}
	return out
}

// cliEnv is the CLI environment for the given journal addresses.
func (c *cluster) cliEnv(addrs ...string) []string {
	return append(os.Environ(),
		"PACT_JOURNAL="+strings.Join(addrs, ","),
		"PACT_CA="+filepath.Join(c.dir, "ca.pem"),
		"PACT_CERT="+filepath.Join(c.dir, "admin.pem"),
		"PACT_KEY="+filepath.Join(c.dir, "admin-key.pem"),
	)
}

// pact runs the CLI against addrs with stdout to w (nil: kept) and
// returns its stdout (when kept), stderr and exit code.
func (c *cluster) pact(w io.Writer, addrs []string, args ...string) (string, string, int, error) {
	cmd := exec.Command(filepath.Join(c.bin, "pact"), args...)
	cmd.Env = c.cliEnv(addrs...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if w != nil {
		cmd.Stdout = w
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return stdout.String(), stderr.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return "", "", -1, err
	}
	return stdout.String(), stderr.String(), 0, nil
}

// syncRead makes journal i's local registry reflect every write committed
// so far: a linearizable pact node inspect of probe there, retried while
// the journal is unavailable.
func (c *cluster) syncRead(i int, probe string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		stdout, stderr, code, err := c.pact(nil, []string{c.journals[i].grpc}, "node", "inspect", probe, "-o", "json")
		if err != nil {
			return err
		}
		if code == 0 {
			return nil
		}
		if code != 7 || time.Now().After(deadline) {
			return fmt.Errorf("pact node inspect %s on %s: exit %d\n%s%s", probe, c.journals[i].id, code, stdout, stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stateCounts lists the registry with pact node list -o json on journal
// i (after a linearizable read of probe there) and counts nodes by state.
func (c *cluster) stateCounts(i int, probe string) (map[string]int, []nodeJSON, error) {
	if err := c.syncRead(i, probe); err != nil {
		return nil, nil, err
	}
	stdout, stderr, code, err := c.pact(nil, []string{c.journals[i].grpc}, "node", "list", "-o", "json")
	if err != nil {
		return nil, nil, err
	}
	if code != 0 {
		return nil, nil, fmt.Errorf("pact node list: exit %d\n%s", code, stderr)
	}
	var nodes []nodeJSON
	if err := json.Unmarshal([]byte(stdout), &nodes); err != nil {
		return nil, nil, fmt.Errorf("pact node list -o json: %w", err)
	}
	counts := map[string]int{}
	for _, n := range nodes {
		counts[n.State]++
	}
	return counts, nodes, nil
}

type nodeJSON struct {
	NodeID     string `json:"node_id"`
	State      string `json:"state"`
	CertSerial string `json:"cert_serial"`
}

// metrics fetches journal i's /metrics text.
func (c *cluster) metrics(i int) (string, error) {
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get("http://" + c.journals[i].metrics + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metricValue sums every sample of name whose labels contain all of
// labels (e.g. `result="ok"`).
func metricValue(text, name string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// metricByLabel sums the samples of name by the value of one label
// (samples without it are left out).
func metricByLabel(text, name, label string) map[string]float64 {
	out := map[string]float64{}
	key := label + `="`
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		_, after, ok := strings.Cut(labels, key)
		if !ok {
			continue
		}
		v, _, ok := strings.Cut(after, `"`)
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(strings.Fields(value)[0], 64); err == nil {
			out[v] += f
		}
	}
	return out
}

// leader returns the index of the journal whose /metrics says it leads,
// among the running ones, or -1.
func (c *cluster) leader() int {
	for i := range c.journals {
		if !c.running(i) {
			continue
		}
		if m, err := c.metrics(i); err == nil && metricValue(m, "pact_journal_is_leader") == 1 {
			return i
		}
	}
	return -1
}

// enrollCounters sums pact_journal_enroll_total and
// pact_journal_renew_total by result over the running journals.
func (c *cluster) enrollCounters() (enroll, renew map[string]float64) {
	enroll, renew = map[string]float64{}, map[string]float64{}
	re := regexp.MustCompile(`^(pact_journal_(?:enroll|renew)_total)\{result="([a-z_]+)"\} (\S+)$`)
	for i := range c.journals {
		if !c.running(i) {
			continue
		}
		m, err := c.metrics(i)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(m, "\n") {
			if g := re.FindStringSubmatch(line); g != nil {
				v, _ := strconv.ParseFloat(g[3], 64)
				if g[1] == "pact_journal_enroll_total" {
					enroll[g[2]] += v
				} else {
					renew[g[2]] += v
				}
			}
		}
	}
	return enroll, renew
}

// adminClient dials journal addr with the platform-admin credential.
func (c *cluster) adminClient(addr string) (pactv1.AdminServiceClient, *grpc.ClientConn, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: c.roots, Certificates: []tls.Certificate{c.admin}}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return nil, nil, err
	}
	return pactv1.NewAdminServiceClient(conn), conn, nil
}

// registerBatch writes nodes as a batch CSV and registers them with ONE
// pact node enroll --batch through every journal address, then waits
// until every journal has applied the batch.
func (c *cluster) registerBatch(nodes []benchNode) (time.Duration, error) {
	file := filepath.Join(c.dir, "nodes.csv")
	f, err := os.Create(file)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriter(f)
	tpm := len(nodes) > 0 && nodes[0].ekHash != ""
	if tpm {
		fmt.Fprintln(w, "node_id,mac,bmc_serial,tpm_ek_hash")
	} else {
		fmt.Fprintln(w, "node_id,mac,bmc_serial")
	}
	for _, n := range nodes {
		if tpm {
			fmt.Fprintf(w, "%s,%s,%s,%s\n", n.id, n.mac, n.bmc, n.ekHash)
		} else {
			fmt.Fprintf(w, "%s,%s,%s\n", n.id, n.mac, n.bmc)
		}
	}
	if err := w.Flush(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	out, err := os.Create(filepath.Join(c.dir, "register.jsonl"))
	if err != nil {
		return 0, err
	}
	defer out.Close()
	began := time.Now()
	_, stderr, code, err := c.pact(out, c.addrs(), "node", "enroll", "--batch", file, "-o", "json", "--timeout", "60s")
	took := time.Since(began)
	if err != nil {
		return 0, err
	}
	if code != 0 {
		return 0, fmt.Errorf("pact node enroll --batch %s: exit %d (results in %s)\n%s", file, code, out.Name(), stderr)
	}
	for i := range c.journals {
		if err := c.syncRead(i, nodes[len(nodes)-1].id); err != nil {
			return 0, err
		}
	}
	return took, nil
}

// setBootPolicy sets the domain's boot policy the -tpm storm runs under
// (simFleet.bootPolicyFile) with pact boot-policy set, as an operator
// does.
func (c *cluster) setBootPolicy(tpms *simFleet) error {
	file := filepath.Join(c.dir, "boot-policy.json")
	if err := tpms.bootPolicyFile(file); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		stdout, stderr, code, err := c.pact(nil, c.addrs(), "boot-policy", "set", "--file", file)
		if err != nil {
			return err
		}
		if code == 0 {
			logf("-tpm: %s", strings.TrimSpace(stdout))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pact boot-policy set --file %s: exit %d\n%s", file, code, stderr)
		}
		time.Sleep(time.Second) // the quorum's feature level may not allow it yet
	}
}

// benchNode is one node of the generated inventory.
type benchNode struct {
	id, mac, bmc string
	ekHash       string // storm -tpm: its simulated TPM's EK hash
}

// inventory makes n nodes with unique, locally administered unicast MACs
// (02:...) and BMC serials.
func inventory(prefix string, n int) []benchNode {
	out := make([]benchNode, n)
	for i := range out {
		k := i + 1
		out[i] = benchNode{
			id:  fmt.Sprintf("%s-%06d", prefix, k),
			mac: fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", len(prefix), byte(k>>24), byte(k>>16), byte(k>>8), byte(k)),
			bmc: fmt.Sprintf("BMC-%s-%06d", strings.ToUpper(prefix), k),
		}
	}
	return out
}

// withTimeout is a context that ends after d.
func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
