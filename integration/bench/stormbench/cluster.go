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
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// journalProc is one pact-journal process of the benchmark quorum.
type journalProc struct {
	id      string
	grpc    string
	raft    string
	metrics string
	args    []string
	log     string // path of its log (stdout and stderr)
	cmd     *exec.Cmd
	exited  chan struct{}
	started time.Time
}

func (j *journalProc) pid() int { return j.cmd.Process.Pid }

// cluster is a quorum of journal processes sharing one domain root in dir.
type cluster struct {
	bin      string
	dir      string
	journals []*journalProc
	roots    *x509.CertPool
	admin    tls.Certificate
	env      []string // extra environment for the journals (GOGC=...)
}

// freePorts returns n loopback addresses whose ports were free a moment
// ago; all are held open together so they are distinct.
func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// newCluster runs pact-journal init in dir and prepares (does not start)
// n journals on free loopback ports. extra flags go to every journal.
func newCluster(bin, dir string, n int, extra []string) (*cluster, error) {
	c := &cluster{bin: bin, dir: dir}
	out, err := exec.Command(filepath.Join(bin, "pact-journal"), "init", "--dir", dir).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pact-journal init: %v\n%s", err, out)
	}
	if c.roots, _, err = pki.LoadCertPool(filepath.Join(dir, "ca.pem")); err != nil {
		return nil, err
	}
	if c.admin, err = tls.LoadX509KeyPair(filepath.Join(dir, "admin.pem"), filepath.Join(dir, "admin-key.pem")); err != nil {
		return nil, err
	}
	addrs, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := range n {
		j := &journalProc{id: fmt.Sprintf("j%d", i+1), grpc: addrs[3*i], raft: addrs[3*i+1], metrics: addrs[3*i+2]}
		j.log = filepath.Join(dir, j.id+".log")
		c.journals = append(c.journals, j)
		peers = append(peers, j.id+"="+j.raft)
	}
	for _, j := range c.journals {
		j.args = append([]string{
			"--node-id", j.id, "--data-dir", filepath.Join(dir, j.id),
			"--listen", j.grpc, "--raft-listen", j.raft, "--metrics-listen", j.metrics,
			"--root-cert", filepath.Join(dir, "ca.pem"), "--root-key", filepath.Join(dir, "ca-key.pem"),
			"--initial-cluster", strings.Join(peers, ","),
		}, extra...)
	}
	return c, nil
}

// start launches journal i (first start or restart), appending to its log.
func (c *cluster) start(i int) error {
	j := c.journals[i]
	f, err := os.OpenFile(j.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "==== stormbench: starting %s at %s\n", j.id, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(filepath.Join(c.bin, "pact-journal"), j.args...)
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a Ctrl-C of the benchmark reaches it only
	// through our cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	j.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	j.cmd = cmd
	j.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(j.exited)
	}()
	return nil
}

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
	j := c.journals[i]
	deadline := time.Now().Add(timeout)
	for {
		if ok, _ := logHasSince(j.log, j.started, servingRE); ok {
			return time.Since(j.started), nil
		}
		select {
		case <-j.exited:
			return 0, fmt.Errorf("%s exited before serving; see %s", j.id, j.log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s did not serve within %v; see %s", j.id, timeout, j.log)
		}
	}
}

// logHasSince reports whether the part of a journal log written by the
// process started at `since` (after the last stormbench marker) matches re.
func logHasSince(path string, since time.Time, re *regexp.Regexp) (bool, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, ""
	}
	if k := bytes.LastIndex(b, []byte("==== stormbench: starting")); k >= 0 {
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
	j := c.journals[i]
	if j.cmd == nil {
		return
	}
	select {
	case <-j.exited:
		return
	default:
	}
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-j.exited:
	case <-time.After(grace):
		_ = j.cmd.Process.Kill()
		<-j.exited
	}
}

// kill SIGKILLs journal i and waits for it to be gone.
func (c *cluster) kill(i int) error {
	j := c.journals[i]
	if err := j.cmd.Process.Kill(); err != nil {
		return err
	}
	<-j.exited
	return nil
}

func (c *cluster) stopAll() {
	for i := range c.journals {
		c.stop(i, 5*time.Second)
	}
}

func (c *cluster) running(i int) bool {
	j := c.journals[i]
	if j.cmd == nil {
		return false
	}
	select {
	case <-j.exited:
		return false
	default:
		return true
	}
}

func (c *cluster) pids() []int {
	var out []int
	for i, j := range c.journals {
		if c.running(i) {
			out = append(out, j.pid())
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
	fmt.Fprintln(w, "node_id,mac,bmc_serial")
	for _, n := range nodes {
		fmt.Fprintf(w, "%s,%s,%s\n", n.id, n.mac, n.bmc)
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

// benchNode is one node of the generated inventory.
type benchNode struct {
	id, mac, bmc string
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
