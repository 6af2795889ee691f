package launch

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/pact-hpc/pact/internal/porttest"
)

// Network places journal processes and the workload's clients on a
// network, and cuts and heals links between journals.
type Network interface {
	// Describe says what the network is, for the report.
	Describe() string
	// Host is the address journal i listens on and is reached at.
	Host(i int) string
	// Port is the port of service (grpc, raft, metrics) of journal i.
	Port(i int, service string) int
	// Command wraps a journal's command line so it runs on the network.
	Command(i int, name string, args ...string) *exec.Cmd
	// ClientIP is the source address client k dials from (each client has
	// its own, so the journals' per-source limits see separate sources).
	ClientIP(k int) net.IP
	// CanPartition reports whether Partition cuts links for real.
	CanPartition() bool
	// Partition cuts every link between journals of different groups
	// (clients keep reaching every journal). Journals in no group keep
	// all their links.
	Partition(groups [][]int) error
	// Heal restores every link.
	Heal() error
	Close() error
}

// ---------------------------------------------------------------------------
// Network namespaces: one per journal, joined by a bridge in a namespace of
// their own; the harness (root namespace) reaches the bridge through one
// veth pair. Partitions are iptables DROP rules inside a journal's
// namespace, so only journal-to-journal traffic is cut.

// NetNSNames names what a namespace network creates: namespaces
// Prefix+"hub" and Prefix+"j<i>", links Short+"br0", Short+"host" (with its
// peer Short+"hostp") and Short+"j<i>", and the private /24 Subnet (it
// exists only inside the namespaces and on the host link). Two networks
// with different names can exist at once: the chaos campaign uses
// ChaosNames, and tests under make test use their own.
type NetNSNames struct {
	Prefix string // namespaces; every one starting with it is the network's
	Short  string // link names; at most 9 characters (IFNAMSIZ)
	Subnet string // first three octets, e.g. "10.213.0"
}

// ChaosNames are the chaos campaign's names (make chaos deletes every
// namespace named pactchaos-*).
var ChaosNames = NetNSNames{Prefix: "pactchaos-", Short: "pc", Subnet: "10.213.0"}

// NetNS is the namespace network for n journals and k clients.
type NetNS struct {
	names      NetNSNames
	n, clients int
	ports      map[string]int
}

func (nm NetNSNames) hub() string          { return nm.Prefix + "hub" }
func (nm NetNSNames) bridge() string       { return nm.Short + "br0" }
func (nm NetNSNames) hostVeth() string     { return nm.Short + "host" }
func (nm NetNSNames) ns(i int) string      { return fmt.Sprintf("%sj%d", nm.Prefix, i+1) }
func (nm NetNSNames) hubVeth(i int) string { return fmt.Sprintf("%sj%d", nm.Short, i+1) }

// Run runs a command to completion; its error carries the output.
func Run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// CleanStaleNamespaces removes the chaos campaign's namespaces and links a
// previous run left behind (see CleanStale).
func CleanStaleNamespaces() { ChaosNames.CleanStale() }

// CleanStale removes namespaces and links a previous run left behind (they
// are all named nm.Prefix*), after killing the journals a crashed run left
// running in them (found by namespace, killed by pid).
func (nm NetNSNames) CleanStale() {
	nsPrefix, hostVeth := nm.Prefix, nm.hostVeth()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
			if !strings.HasPrefix(name, nsPrefix) {
				continue
			}
			if pids, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
				for _, p := range strings.Fields(string(pids)) {
					if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			_ = Run("ip", "netns", "del", name)
		}
	}
	if _, err := net.InterfaceByName(hostVeth); err == nil {
		_ = Run("ip", "link", "del", hostVeth)
	}
}

// NewNetNS builds the chaos campaign's namespaces, or says why it cannot.
func NewNetNS(n, clients int) (*NetNS, error) { return NewNetNSNamed(ChaosNames, n, clients) }

// NewNetNSNamed builds a namespace network named nm, or says why it cannot.
func NewNetNSNamed(nm NetNSNames, n, clients int) (*NetNS, error) {
	if len(nm.Short) > 9 || nm.Prefix == "" || nm.Short == "" {
		return nil, fmt.Errorf("namespace names %+v: want a prefix and a link prefix of 1-9 characters", nm)
	}
	subnet := nm.Subnet
	if os.Geteuid() != 0 {
		return nil, errors.New("network namespaces need root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found", tool)
		}
	}
	// The subnet must be free in the root namespace.
	if out, err := exec.Command("ip", "-4", "route", "show", subnet+".0/24").Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		nm.CleanStale()
		if out, _ := exec.Command("ip", "-4", "route", "show", subnet+".0/24").Output(); len(bytes.TrimSpace(out)) > 0 {
			return nil, fmt.Errorf("subnet %s.0/24 is already routed here: %s", subnet, bytes.TrimSpace(out))
		}
	}
	nm.CleanStale()
	nw := &NetNS{names: nm, n: n, clients: clients, ports: map[string]int{"grpc": 7443, "raft": 7500, "metrics": 7444}}
	if err := nw.setup(); err != nil {
		nw.Close()
		return nil, err
	}
	return nw, nil
}

func (nw *NetNS) setup() error {
	nsHub, bridgeName, hostVeth, subnet := nw.names.hub(), nw.names.bridge(), nw.names.hostVeth(), nw.names.Subnet
	steps := [][]string{
		{"ip", "netns", "add", nsHub},
		{"ip", "-n", nsHub, "link", "set", "lo", "up"},
		{"ip", "-n", nsHub, "link", "add", bridgeName, "type", "bridge"},
		{"ip", "-n", nsHub, "link", "set", bridgeName, "up"},
		{"ip", "link", "add", hostVeth, "type", "veth", "peer", "name", hostVeth + "p", "netns", nsHub},
		{"ip", "-n", nsHub, "link", "set", hostVeth + "p", "master", bridgeName, "up"},
		{"ip", "addr", "add", subnet + ".1/24", "dev", hostVeth},
	}
	for k := range nw.clients {
		steps = append(steps, []string{"ip", "addr", "add", nw.ClientIP(k).String() + "/24", "dev", hostVeth})
	}
	steps = append(steps, []string{"ip", "link", "set", hostVeth, "up"})
	for i := range nw.n {
		ns, peer := nw.names.ns(i), nw.names.hubVeth(i)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "link", "add", peer, "netns", nsHub, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "-n", nsHub, "link", "set", peer, "master", bridgeName, "up"},
			[]string{"ip", "-n", ns, "addr", "add", nw.Host(i) + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := Run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	// iptables must work inside a journal's namespace.
	if err := Run("ip", "netns", "exec", nw.names.ns(0), "iptables", "-L", "-n"); err != nil {
		return fmt.Errorf("iptables in a namespace: %w", err)
	}
	// Every journal must be reachable from the root namespace.
	for i := range nw.n {
		if err := Run("ping", "-c", "1", "-W", "2", nw.Host(i)); err != nil {
			if _, lerr := exec.LookPath("ping"); lerr != nil {
				break // no ping here; the journals' start will tell
			}
			return fmt.Errorf("reaching %s: %w", nw.Host(i), err)
		}
	}
	return nil
}

func (nw *NetNS) Describe() string {
	return fmt.Sprintf("network namespaces (%s*, bridge %s in %s, journals at %s.11-%d, clients at %s.101-%d); partitions are iptables DROP rules inside the journals' namespaces",
		nw.names.Prefix, nw.names.bridge(), nw.names.hub(), nw.names.Subnet, 10+nw.n, nw.names.Subnet, 100+nw.clients)
}

func (nw *NetNS) Host(i int) string              { return fmt.Sprintf("%s.%d", nw.names.Subnet, 11+i) }
func (nw *NetNS) Port(_ int, service string) int { return nw.ports[service] }
func (nw *NetNS) ClientIP(k int) net.IP {
	return net.ParseIP(fmt.Sprintf("%s.%d", nw.names.Subnet, 101+k))
}
func (nw *NetNS) CanPartition() bool { return true }
func (nw *NetNS) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", nw.names.ns(i), name}, args...)...)
}

// Partition drops, in each journal's namespace, packets to and from every
// journal of another group.
func (nw *NetNS) Partition(groups [][]int) error {
	if err := nw.Heal(); err != nil {
		return err
	}
	group := GroupOf(groups)
	var errs []error
	for a, ga := range group {
		for b, gb := range group {
			if ga == gb {
				continue
			}
			ns := nw.names.ns(a)
			errs = append(errs,
				Run("ip", "netns", "exec", ns, "iptables", "-A", "INPUT", "-s", nw.Host(b), "-j", "DROP"),
				Run("ip", "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-d", nw.Host(b), "-j", "DROP"))
		}
	}
	return errors.Join(errs...)
}

func (nw *NetNS) Heal() error {
	var errs []error
	for i := range nw.n {
		errs = append(errs, Run("ip", "netns", "exec", nw.names.ns(i), "iptables", "-F"))
	}
	return errors.Join(errs...)
}

func (nw *NetNS) Close() error {
	var errs []error
	for i := range nw.n {
		errs = append(errs, Run("ip", "netns", "del", nw.names.ns(i)))
	}
	errs = append(errs, Run("ip", "netns", "del", nw.names.hub()))
	if _, err := net.InterfaceByName(nw.names.hostVeth()); err == nil {
		errs = append(errs, Run("ip", "link", "del", nw.names.hostVeth()))
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------
// Loopback: every journal on 127.0.0.1 with its own ports. No real
// partitions: a scenario that needs one isolates journals with SIGSTOP
// instead, and says so.

// Loopback is the fallback network.
type Loopback struct {
	ports [][3]int
	why   string
}

// NewLoopback picks free ports for n journals; why says why namespaces are
// not used.
func NewLoopback(n int, why string) (*Loopback, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	lb := &Loopback{why: why}
	for range n {
		var p [3]int
		for s := range p {
			l, err := porttest.Listen()
			if err != nil {
				return nil, err
			}
			ls = append(ls, l)
			p[s] = l.Addr().(*net.TCPAddr).Port
		}
		lb.ports = append(lb.ports, p)
	}
	return lb, nil
}

func (lb *Loopback) Describe() string {
	return "loopback 127.0.0.1 (FALLBACK: " + lb.why + "); partitions are emulated by SIGSTOP of the cut-off journals"
}
func (lb *Loopback) Host(int) string { return "127.0.0.1" }
func (lb *Loopback) Port(i int, service string) int {
	switch service {
	case "grpc":
		return lb.ports[i][0]
	case "raft":
		return lb.ports[i][1]
	}
	return lb.ports[i][2]
}
func (lb *Loopback) Command(_ int, name string, args ...string) *exec.Cmd {
	return exec.Command(name, args...)
}
func (lb *Loopback) ClientIP(k int) net.IP          { return net.IPv4(127, 0, 0, byte(101+k)) }
func (lb *Loopback) CanPartition() bool             { return false }
func (lb *Loopback) Partition(groups [][]int) error { return errors.New("loopback: no partitions") }
func (lb *Loopback) Heal() error                    { return nil }
func (lb *Loopback) Close() error                   { return nil }

// GroupOf maps each journal of a partition to the index of its group.
func GroupOf(groups [][]int) map[int]int {
	group := map[int]int{}
	for g, members := range groups {
		for _, i := range members {
			group[i] = g
		}
	}
	return group
}

// Slow makes journal i's link slow: a netem delay (150 ms ± 50 ms) where
// the kernel has sch_netem, else a token bucket (512 kbit/s with a 400 ms
// queue: Raft's appends to it wait in line). It says which.
func (nw *NetNS) Slow(i int) (string, error) {
	ns := nw.names.ns(i)
	if err := Run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", "150ms", "50ms"); err == nil {
		return "netem delay 150ms±50ms", nil
	}
	if err := Run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "512kbit", "burst", "16kbit", "latency", "400ms"); err != nil {
		return "", fmt.Errorf("slowing %s: neither netem nor tbf: %w", ns, err)
	}
	return "tbf 512kbit/s, 400ms queue (no sch_netem in this kernel)", nil
}

// Unslow removes what Slow added.
func (nw *NetNS) Unslow(i int) error {
	return Run("ip", "netns", "exec", nw.names.ns(i), "tc", "qdisc", "del", "dev", "eth0", "root")
}
