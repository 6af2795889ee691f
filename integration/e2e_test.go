// Package integration runs pact as a user does: the three real binaries as
// processes, talking real TLS and gRPC over loopback, with Raft on bbolt in a
// temporary data directory.
package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/bintest"
)

var binDir string

func TestMain(m *testing.M) {
	if spec := os.Getenv(floodHelperEnv); spec != "" {
		os.Exit(floodHelper(spec))
	}
	if spec := os.Getenv(guessHelperEv); spec != "" {
		os.Exit(guessHelper(spec))
	}
	dir, remove := bintest.Main(bintest.Commands...)
	binDir = dir
	code := m.Run()
	remove()
	os.Exit(code)
}

// proc is a running binary whose output is captured.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	lines  chan string
	exited chan struct{}
	err    error
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func start(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	return startFrom(t, binDir, env, name, args...)
}

// startFrom is start with the binary from dir (another release's).
func startFrom(t *testing.T, dir string, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(filepath.Join(dir, name), args...), lines: make(chan string, 1024), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		w.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("--- %s %s output:\n%s", name, strings.Join(args, " "), p.output())
		}
	})
	return p
}

// waitLine waits for a line matching re and returns its submatches.
func (p *proc) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	return p.waitLineWithin(t, re, 30*time.Second)
}

// waitLineWithin is waitLine with its own bound.
func (p *proc) waitLineWithin(t *testing.T, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l := <-p.lines:
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-p.exited:
			t.Fatalf("process exited (%v) before printing %s:\n%s", p.err, re, p.output())
		case <-deadline:
			t.Fatalf("timed out waiting for %s:\n%s", re, p.output())
		}
	}
}

func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("process did not exit:\n%s", p.output())
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("wait: %v", p.err)
	}
	return 0
}

type devJournal struct {
	proc *proc
	dir  string
	addr string
	env  []string // PACT_* for the CLI and agents
}

var servingRE = regexp.MustCompile(`is serving on (\S+) `)

func startJournal(t *testing.T, dir, listen string) *devJournal {
	t.Helper()
	p := start(t, nil, "pact-journal", "--dev", "--data-dir", dir, "--listen", listen)
	addr := p.waitLine(t, servingRE)[1]
	return &devJournal{proc: p, dir: dir, addr: addr, env: []string{
		"PACT_JOURNAL=" + addr,
		"PACT_CA=" + filepath.Join(dir, "ca.pem"),
		"PACT_CERT=" + filepath.Join(dir, "admin.pem"),
		"PACT_KEY=" + filepath.Join(dir, "admin-key.pem"),
	}}
}

func (j *devJournal) stop(t *testing.T) {
	t.Helper()
	j.proc.cmd.Process.Signal(syscall.SIGTERM)
	if code := j.proc.wait(t); code != 0 {
		t.Fatalf("journal exited %d on SIGTERM", code)
	}
}

// pact runs the CLI to completion.
func (j *devJournal) pact(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "pact"), args...)
	cmd.Env = append(os.Environ(), j.env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("pact %v: %v", args, err)
	}
	return string(out), code
}

type nodeJSON struct {
	NodeID       string   `json:"node_id"`
	State        string   `json:"state"`
	MACs         []string `json:"macs"`
	BMCSerial    string   `json:"bmc_serial"`
	VCluster     string   `json:"vcluster"`
	CertSerial   string   `json:"cert_serial"`
	CertNotAfter string   `json:"cert_not_after"`
	// CertIssuerSerial names the intermediate that signed the certificate.
	CertIssuerSerial string `json:"cert_issuer_serial"`
	// Released: the agent of the current certificate stopped cleanly.
	Released bool `json:"released"`
}

func (j *devJournal) inspect(t *testing.T, node string) nodeJSON {
	t.Helper()
	out, code := j.pact(t, "node", "inspect", node, "-o", "json")
	if code != 0 {
		t.Fatalf("pact node inspect %s: exit %d\n%s", node, code, out)
	}
	var n nodeJSON
	if err := json.Unmarshal([]byte(out), &n); err != nil {
		t.Fatalf("inspect output is not JSON: %v\n%s", err, out)
	}
	return n
}

func (j *devJournal) agent(t *testing.T, mac, bmc string) *proc {
	return start(t, nil, "pact-agent", "--journal", j.addr, "--ca", filepath.Join(j.dir, "ca.pem"), "--mac", mac, "--bmc-serial", bmc)
}

var (
	enrolledRE   = regexp.MustCompile(`msg=enrolled .*serial=([0-9a-f]+) .*not_after=(\S+)`)
	streamOpenRE = regexp.MustCompile(`msg="stream open"`)
)

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	j := startJournal(t, dir, "127.0.0.1:0")

	// First start made the root and the admin credential; keys are 0600.
	for _, f := range []string{"ca-key.pem", "admin-key.pem"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o, want 600", f, st.Mode().Perm())
		}
	}

	out, code := j.pact(t, "node", "enroll", "node-001", "--mac", "52:54:00:00:00:01", "--mac", "52:54:00:00:00:02", "--bmc-serial", "SN-0001")
	if code != 0 {
		t.Fatalf("pact node enroll: exit %d\n%s", code, out)
	}
	if n := j.inspect(t, "node-001"); n.State != "registered" || len(n.MACs) != 2 || n.BMCSerial != "SN-0001" || n.CertSerial != "" {
		t.Fatalf("after enroll: %+v", n)
	}

	a := j.agent(t, "52:54:00:00:00:01", "SN-0001")
	m := a.waitLine(t, enrolledRE)
	serial, notAfter := m[1], m[2]
	a.waitLine(t, streamOpenRE)
	n := j.inspect(t, "node-001")
	if n.State != "active" || n.CertSerial != serial {
		t.Fatalf("inspect after the agent enrolled: %+v; the agent holds serial %s", n, serial)
	}
	if n.CertNotAfter != notAfter {
		t.Errorf("inspect shows expiry %s, the agent's certificate expires %s", n.CertNotAfter, notAfter)
	}
	list, code := j.pact(t, "node", "list")
	if code != 0 || !strings.Contains(list, "node-001") || !strings.Contains(list, "active") {
		t.Errorf("pact node list: exit %d\n%s", code, list)
	}

	t.Run("unregistered hardware is refused", func(t *testing.T) {
		p := j.agent(t, "52:54:00:00:00:99", "SN-9999")
		if code := p.wait(t); code != 3 {
			t.Errorf("exit %d, want 3", code)
		}
		if out := p.output(); !strings.Contains(out, "NODE_NOT_ENROLLED") || !strings.Contains(out, "pact node enroll") {
			t.Errorf("output does not name NODE_NOT_ENROLLED and what to do:\n%s", out)
		}
	})
	t.Run("second agent with the same hardware is refused", func(t *testing.T) {
		p := j.agent(t, "52:54:00:00:00:02", "SN-0001")
		if code := p.wait(t); code != 6 {
			t.Errorf("exit %d, want 6", code)
		}
		if out := p.output(); !strings.Contains(out, "ALREADY_ACTIVE") {
			t.Errorf("output does not name ALREADY_ACTIVE:\n%s", out)
		}
		if n := j.inspect(t, "node-001"); n.CertSerial != serial {
			t.Errorf("the refused agent changed the registry: %+v", n)
		}
	})
	t.Run("CLI errors", func(t *testing.T) {
		out, code := j.pact(t, "node", "enroll", "node-002", "--mac", "52:54:00:00:00:01")
		if code != 4 || !strings.Contains(out, "HARDWARE_IDENTITY_CONFLICT") {
			t.Errorf("registering a taken MAC: exit %d\n%s", code, out)
		}
		out, code = j.pact(t, "node", "inspect", "nope")
		if code != 3 {
			t.Errorf("inspecting a missing node: exit %d\n%s", code, out)
		}
	})

	// A restart keeps the registry; the running agent reconnects with the
	// certificate the previous intermediate signed.
	j.stop(t)
	j2 := startJournal(t, dir, j.addr)
	a.waitLine(t, streamOpenRE)
	if n := j2.inspect(t, "node-001"); n.State != "active" || n.CertSerial != serial {
		t.Fatalf("after the journal restarted: %+v", n)
	}

	// No private key material in any log.
	for name, out := range map[string]string{"journal": j.proc.output() + j2.proc.output(), "agent": a.output()} {
		if strings.Contains(out, "PRIVATE KEY") || strings.Contains(out, "BEGIN EC") {
			t.Errorf("%s log contains key material", name)
		}
	}
	// The intermediate key is never written: the only keys on disk are the
	// root's and the admin's.
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		data, _ := os.ReadFile(path)
		if bytes.Contains(data, []byte("PRIVATE KEY")) && !strings.HasSuffix(path, "ca-key.pem") && !strings.HasSuffix(path, "admin-key.pem") {
			t.Errorf("%s holds a private key", path)
		}
		return nil
	})
}
