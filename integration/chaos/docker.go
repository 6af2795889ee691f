package chaos

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DockerConfig configures a quorum of journal containers.
type DockerConfig struct {
	Image string // the pact image (make image: FROM scratch, nothing pulled)
	Dir   string // domain root (mounted read-only) and one data dir per journal
	N     int
	Extra []string
	// Bin holds pact-journal, used on the host to make the domain root.
	Bin string
}

// dockerLabel marks everything this harness creates, for cleanup.
const dockerLabel = "pact-chaos=1"

// DockerQuorum runs the journals as containers of the pact image, the way
// docker-compose.yml does (same flags; service names j1..jN on a private
// network), each with its gRPC and metrics ports published on loopback.
// Faults: docker kill/start/stop, docker pause/unpause (the cgroup
// freezer), and partitions as iptables DROP rules entered into a
// container's network namespace with nsenter (docker network disconnect
// when nsenter is missing, which cuts clients off too).
type DockerQuorum struct {
	cfg     DockerConfig
	network string
	names   []string
	ports   [][2]int // published grpc, metrics
	roots   *x509.CertPool
	admin   tls.Certificate
	mu      sync.Mutex
	served  []int // "journal serving" lines seen before the current start
	nsenter bool
	cut     map[[2]int]bool // disconnect fallback: journals disconnected
}

func docker(args ...string) (string, error) {
	cmd := exec.Command("docker", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// CleanStaleContainers removes containers and networks a previous run
// left behind.
func CleanStaleContainers() {
	if out, err := docker("ps", "-aq", "--filter", "label="+dockerLabel); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = docker("rm", "-f", id)
		}
	}
	if out, err := docker("network", "ls", "-q", "--filter", "label="+dockerLabel); err == nil {
		for _, id := range strings.Fields(out) {
			_, _ = docker("network", "rm", id)
		}
	}
}

// NewDockerQuorum makes the domain root on the host, a private network and
// the containers (not started).
func NewDockerQuorum(cfg DockerConfig) (*DockerQuorum, error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, errors.New("no docker command")
	}
	if _, err := docker("image", "inspect", cfg.Image); err != nil {
		return nil, fmt.Errorf("image %s is missing (make image builds it from bin/ FROM scratch): %w", cfg.Image, err)
	}
	CleanStaleContainers()
	pkiDir := filepath.Join(cfg.Dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command(filepath.Join(cfg.Bin, "pact-journal"), "init", "--dir", pkiDir, "--domain", "pact.local").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pact-journal init: %w\n%s", err, out)
	}
	q := &DockerQuorum{cfg: cfg, network: fmt.Sprintf("pactchaos-%d", os.Getpid()), served: make([]int, cfg.N), cut: map[[2]int]bool{}}
	_, lerr := exec.LookPath("nsenter")
	_, ierr := exec.LookPath("iptables")
	q.nsenter = lerr == nil && ierr == nil
	var err error
	if q.roots, q.admin, err = loadCreds(pkiDir); err != nil {
		return nil, err
	}
	if _, err := docker("network", "create", "--label", dockerLabel, q.network); err != nil {
		return nil, err
	}
	ports, err := freeLoopbackPorts(2 * cfg.N)
	if err != nil {
		q.Close()
		return nil, err
	}
	var peers []string
	for i := range cfg.N {
		peers = append(peers, fmt.Sprintf("j%d=j%d:7500", i+1, i+1))
	}
	for i := range cfg.N {
		id := fmt.Sprintf("j%d", i+1)
		name := fmt.Sprintf("pactchaos-%s", id)
		data := filepath.Join(cfg.Dir, id)
		if err := os.MkdirAll(data, 0o700); err != nil {
			q.Close()
			return nil, err
		}
		q.ports = append(q.ports, [2]int{ports[2*i], ports[2*i+1]})
		args := []string{"create", "--name", name, "--label", dockerLabel, "--hostname", id,
			"--network", q.network, "--network-alias", id,
			"-p", fmt.Sprintf("127.0.0.1:%d:7443", ports[2*i]), "-p", fmt.Sprintf("127.0.0.1:%d:7444", ports[2*i+1]),
			"-v", pkiDir + ":/pki:ro", "-v", data + ":/data",
			cfg.Image,
			"--node-id=" + id, "--data-dir=/data", "--listen=0.0.0.0:7443", "--advertise=" + id + ":7443",
			"--raft-listen=0.0.0.0:7500", "--advertise-raft=" + id + ":7500", "--server-names=" + id,
			"--metrics-listen=0.0.0.0:7444", "--root-cert=/pki/ca.pem", "--root-key=/pki/ca-key.pem",
			"--initial-cluster=" + strings.Join(peers, ","),
		}
		args = append(args, cfg.Extra...)
		if _, err := docker(args...); err != nil {
			q.Close()
			return nil, err
		}
		q.names = append(q.names, name)
	}
	return q, nil
}

func freeLoopbackPorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func (q *DockerQuorum) Size() int              { return len(q.names) }
func (q *DockerQuorum) ID(i int) string        { return fmt.Sprintf("j%d", i+1) }
func (q *DockerQuorum) GRPC(i int) string      { return "127.0.0.1:" + strconv.Itoa(q.ports[i][0]) }
func (q *DockerQuorum) Metrics(i int) string   { return "127.0.0.1:" + strconv.Itoa(q.ports[i][1]) }
func (q *DockerQuorum) Roots() *x509.CertPool  { return q.roots }
func (q *DockerQuorum) Admin() tls.Certificate { return q.admin }
func (q *DockerQuorum) CanPartition() bool     { return true }
func (q *DockerQuorum) Describe() string {
	how := "iptables DROP rules entered into the containers' network namespaces with nsenter (clients still reach every journal)"
	if !q.nsenter {
		how = "docker network disconnect (no nsenter/iptables here: a cut-off journal is unreachable for clients too)"
	}
	return fmt.Sprintf("%d containers of %s on docker network %s (as docker-compose.yml: j1..j%d, ports published on 127.0.0.1); partitions are %s; pauses use docker pause",
		len(q.names), q.cfg.Image, q.network, len(q.names), how)
}

func (q *DockerQuorum) Start(i int) error {
	q.mu.Lock()
	q.served[i] = strings.Count(q.Log(i), `msg="journal serving"`)
	q.mu.Unlock()
	_, err := docker("start", q.names[i])
	return err
}

func (q *DockerQuorum) WaitServing(i int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		q.mu.Lock()
		before := q.served[i]
		q.mu.Unlock()
		log := q.Log(i)
		if strings.Count(log, `msg="journal serving"`) > before {
			return nil
		}
		if !q.Running(i) {
			return fmt.Errorf("%s exited before serving:\n%s", q.names[i], tail(log, 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not serve within %v:\n%s", q.names[i], timeout, tail(log, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (q *DockerQuorum) Kill(i int) error {
	_, err := docker("kill", "-s", "KILL", q.names[i])
	for deadline := time.Now().Add(10 * time.Second); q.Running(i) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (q *DockerQuorum) Stop(i int) error {
	if q.paused(i) {
		_, _ = docker("unpause", q.names[i])
	}
	_, err := docker("stop", "-t", "15", q.names[i])
	return err
}

func (q *DockerQuorum) Pause(i int) error {
	_, err := docker("pause", q.names[i])
	return err
}

func (q *DockerQuorum) Resume(i int) error {
	if !q.paused(i) {
		return nil
	}
	_, err := docker("unpause", q.names[i])
	return err
}

func (q *DockerQuorum) inspect(i int, format string) string {
	out, err := docker("inspect", "-f", format, q.names[i])
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func (q *DockerQuorum) paused(i int) bool  { return q.inspect(i, "{{.State.Paused}}") == "true" }
func (q *DockerQuorum) Running(i int) bool { return q.inspect(i, "{{.State.Running}}") == "true" }

func (q *DockerQuorum) ip(i int) string {
	return q.inspect(i, fmt.Sprintf(`{{(index .NetworkSettings.Networks %q).IPAddress}}`, q.network))
}

// iptables runs iptables inside container i's network namespace.
func (q *DockerQuorum) iptables(i int, args ...string) error {
	pid := q.inspect(i, "{{.State.Pid}}")
	if pid == "" || pid == "0" {
		return nil // not running: nothing to cut
	}
	return run("nsenter", append([]string{"-t", pid, "-n", "iptables"}, args...)...)
}

func (q *DockerQuorum) Partition(groups [][]int) error {
	if err := q.Heal(); err != nil {
		return err
	}
	group := groupOf(groups)
	var errs []error
	if !q.nsenter {
		// Disconnect the smaller side from the network.
		small := groups[0]
		for _, g := range groups[1:] {
			if len(g) < len(small) {
				small = g
			}
		}
		for _, i := range small {
			if _, err := docker("network", "disconnect", "-f", q.network, q.names[i]); err != nil {
				errs = append(errs, err)
				continue
			}
			q.cut[[2]int{i, 0}] = true
		}
		return errors.Join(errs...)
	}
	for a, ga := range group {
		for b, gb := range group {
			if ga == gb {
				continue
			}
			ip := q.ip(b)
			if ip == "" {
				continue
			}
			errs = append(errs, q.iptables(a, "-A", "INPUT", "-s", ip, "-j", "DROP"), q.iptables(a, "-A", "OUTPUT", "-d", ip, "-j", "DROP"))
		}
	}
	return errors.Join(errs...)
}

func (q *DockerQuorum) Heal() error {
	var errs []error
	if !q.nsenter {
		for k := range q.cut {
			if _, err := docker("network", "connect", "--alias", q.ID(k[0]), q.network, q.names[k[0]]); err != nil {
				errs = append(errs, err)
			}
			delete(q.cut, k)
		}
		return errors.Join(errs...)
	}
	for i := range q.names {
		if q.Running(i) {
			errs = append(errs, q.iptables(i, "-F"))
		}
	}
	return errors.Join(errs...)
}

func (q *DockerQuorum) Log(i int) string {
	cmd := exec.Command("docker", "logs", q.names[i])
	out, _ := cmd.CombinedOutput()
	return string(out)
}

func (q *DockerQuorum) Close() error {
	var errs []error
	for i, n := range q.names {
		// Keep the logs next to the data for a failed run.
		_ = os.WriteFile(filepath.Join(q.cfg.Dir, q.ID(i)+".log"), []byte(q.Log(i)), 0o644)
		if _, err := docker("rm", "-f", n); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := docker("network", "rm", q.network); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
