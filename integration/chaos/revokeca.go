package chaos

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pact-hpc/pact/cli"
	"github.com/pact-hpc/pact/integration/launch"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/ceremony"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The revoke-leader-ca scenario revokes the current leader's journal CA
// (pact journal revoke-ca, through another journal) under the workload,
// with pact-agent processes streaming, and checks what issue 36 promises:
//
//   - failover: another journal leads within the bound the campaign gives
//     every leader loss (electionWait, as leader-pause);
//   - the other journals refuse the revoked journal as a peer
//     (pact_journal_peer_refused_total{reason="revoked_intermediate"}
//     rises) and it reports itself halted (pact_journal_halted 1, pact
//     journal status asked of it alone names why);
//   - no node dark beyond the failover: every agent whose stream was on
//     the revoked journal, or whose certificate its intermediate signed,
//     streams again, on another journal and with a certificate no revoked
//     intermediate signed, within the failover time measured plus the
//     agent's own retry budget (agentRetryBudget);
//   - the quorum is restored the operator's way: pact journal remove of
//     the revoked journal (it must exit 3), a new key and journal CA from
//     the ceremony (launch.IssueJournalCA), the journal started empty with
//     --join and pact journal add --journal-ca; then one quorum of three
//     (pact journal status of each: one quorum id, all voters, one leader,
//     audit trails of one history).
//
// The registry checks run as in every scenario. The model knows the
// revocation (OpRevokeCA in every node's history, RevocationRecords): a
// workload node whose current certificate the revoked intermediates
// signed may be refused as it authenticates and may enroll again with a
// new key at once.

// revokeAgents is how many pact-agent processes stream during the
// scenario: with three journals, about a third stream on the leader and
// a third hold a certificate its intermediate signed (the chance that none
// does either is below 1 in 10^4).
const revokeAgents = 12

// agentRetryBudget is how long an agent may need, beyond the failover,
// to stream again: pact-agent reconnects at once when its stream ends,
// then backs off (internal/backoff.Default, the agent's MinBackoff and
// MaxBackoff) after each failure while no leader is elected or its
// certificate is refused: five failed attempts at the longest draws of
// the policy (Min/2 + min(Min<<n, Max), n = 0..4) are 8.4 s. An agent
// whose certificate is withdrawn also enrolls with a new key, which the
// same budget covers (its enrollment follows a failed connect at once).
func agentRetryBudget() time.Duration {
	p := backoff.Default()
	var d time.Duration
	for n := range 5 {
		d += p.Min/2 + min(p.Min<<n, p.Max)
	}
	return d
}

// darkWait bounds how long the scenario waits for the affected agents.
const darkWait = 45 * time.Second

// AgentDark is one streaming agent's account of the revocation.
type AgentDark struct {
	Node string
	// Journal and Issuer: where it streamed and the intermediate of its
	// certificate when the revocation was asked.
	Journal, Issuer string
	// Affected: it streamed on the revoked journal or held a certificate
	// one of its intermediates signed.
	Affected bool
	// Dropped: history time it was first seen without a stream after the
	// revocation (0: never seen down).
	Dropped int64
	// Back is how long after the revocation was asked it streamed again on
	// another journal with a certificate no revoked intermediate signed
	// (-1: not within darkWait); On is that journal; Reenrolled: with
	// another certificate than before.
	Back       time.Duration
	On         string
	Reenrolled bool
	// Exit is set if the agent process ended (pact-agent stops on a final
	// refusal).
	Exit string
	// Last is the agent's last failure (its status) while it was dark.
	Last string
}

// RevokeCAResult is what the revoke-leader-ca scenario saw.
type RevokeCAResult struct {
	Journal, Via string
	// Issuers are the intermediates revoked with the journal CA; Call and
	// Return bound the revocation (history time): the command's start and
	// its answer.
	Issuers      []string
	Call, Return int64
	// Failover is how long after the command's start another journal led
	// (-1: none within electionWait); NewLeader is that journal.
	Failover  time.Duration
	NewLeader string
	Agents    []AgentDark
	DarkBound time.Duration
	// Outcomes: each thing the scenario must see (a refusal, a control),
	// as in operator-mistakes.
	Outcomes []Outcome
	Readings []QuorumReading
	// Reenrolled counts workload nodes that enrolled again with a new key
	// because their certificate's issuer was revoked (audited takeovers).
	Reenrolled int
	Notes      []string
	Err        string
}

// Affected lists the affected agents' dark times, sorted.
func (r *RevokeCAResult) darkTimes() []time.Duration {
	var ds []time.Duration
	for _, a := range r.Agents {
		if a.Affected && a.Back >= 0 {
			ds = append(ds, a.Back)
		}
	}
	slices.Sort(ds)
	return ds
}

// agentStatus is the part of pact-agent's status (GET /status on its
// status socket) the scenario reads.
type agentStatus struct {
	Serial            string `json:"serial"`
	LastFailureReason string `json:"last_failure_reason"`
	LastFailure       string `json:"last_failure"`
	StreamConnected   bool   `json:"stream_connected"`
	JournalID         string `json:"journal_id"`
	Ready             bool   `json:"ready"`
}

// agentProc is one pact-agent process.
type agentProc struct {
	node, mac, bmc string
	dir, sock, log string
	cmd            *exec.Cmd
	exited         chan struct{}
	err            error
	http           *http.Client
	// issuers caches each certificate's intermediate by the leaf serial.
	issuers map[string]string
}

func (a *agentProc) start(bin string, addrs []string, ca string) error {
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(a.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	a.cmd = exec.Command(filepath.Join(bin, "pact-agent"),
		"--journal", strings.Join(addrs, ","), "--ca", ca, "--mac", a.mac, "--bmc-serial", a.bmc,
		"--sys-root", "", "--tpm-device", "", "--status-socket", a.sock, "--identity-dir", a.dir)
	a.cmd.Stdout, a.cmd.Stderr = f, f
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		f.Close()
		return err
	}
	a.exited = make(chan struct{})
	go func() {
		a.err = a.cmd.Wait()
		f.Close()
		close(a.exited)
	}()
	sock := a.sock
	a.http = &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	a.issuers = map[string]string{}
	return nil
}

func (a *agentProc) stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(5 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

func (a *agentProc) ended() string {
	select {
	case <-a.exited:
		return fmt.Sprintf("pact-agent exited (%v): %s", a.err, tail(readFile(a.log), 3))
	default:
		return ""
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func (a *agentProc) status() (agentStatus, error) {
	var st agentStatus
	resp, err := a.http.Get("http://agent/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// issuer is the intermediate that signed the agent's certificate of
// serial (its identity directory's chain.pem), "" if not known yet.
func (a *agentProc) issuer(serial string) string {
	if serial == "" {
		return ""
	}
	if s, ok := a.issuers[serial]; ok {
		return s
	}
	rest := []byte(readFile(filepath.Join(a.dir, "chain.pem")))
	var certs []*x509.Certificate
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			certs = append(certs, c)
		}
	}
	if len(certs) < 2 || pki.SerialHex(certs[0].SerialNumber) != serial {
		return ""
	}
	a.issuers[serial] = pki.SerialHex(certs[1].SerialNumber)
	return a.issuers[serial]
}

// startAgents registers revokeAgents nodes and starts a pact-agent for
// each, trying every journal; it waits until every one streams.
func (e *Env) startAgents() ([]*agentProc, error) {
	admins, closeAdmins, err := AdminConns(e.Q)
	if err != nil {
		return nil, err
	}
	defer closeAdmins()
	var addrs []string
	for i := range e.Q.Size() {
		addrs = append(addrs, e.Q.GRPC(i))
	}
	hw := map[string][2]string{}
	var agents []*agentProc
	for k := range revokeAgents {
		a := &agentProc{node: fmt.Sprintf("ra%02d", k), mac: fmt.Sprintf("52:54:ab:00:00:%02x", k), bmc: fmt.Sprintf("SN-RA%02d", k)}
		a.dir = filepath.Join(e.Dir, "agents", a.node)
		a.sock = filepath.Join(e.Dir, "agents", a.node+".sock")
		a.log = filepath.Join(e.Dir, "agents", a.node+".log")
		hw[a.node] = [2]string{a.mac, a.bmc}
		for attempt := 0; ; attempt++ {
			l, err := e.leader()
			if err != nil {
				return agents, err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = admins[l].RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: a.node, Hardware: &pactv1.HardwareIdentity{Macs: []string{a.mac}, BmcSerial: a.bmc}})
			cancel()
			if err == nil || Classify(err).Reason == "NODE_ALREADY_ENROLLED" {
				break
			}
			if attempt > 10 {
				return agents, fmt.Errorf("registering %s: %w", a.node, err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		e.mu.Lock()
		e.agentHW = hw
		e.mu.Unlock()
		if err := a.start(e.Bin, addrs, filepath.Join(e.Dir, "ca.pem")); err != nil {
			return agents, err
		}
		agents = append(agents, a)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, a := range agents {
		for {
			st, err := a.status()
			if err == nil && st.StreamConnected && st.Ready && a.issuer(st.Serial) != "" {
				break
			}
			if x := a.ended(); x != "" {
				return agents, fmt.Errorf("agent %s: %s", a.node, x)
			}
			if time.Now().After(deadline) {
				return agents, fmt.Errorf("agent %s does not stream 60 s after its start (%+v, %v): %s", a.node, st, err, tail(readFile(a.log), 5))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return agents, nil
}

// revokeLeaderCA is the scenario's schedule.
func revokeLeaderCA(e *Env) error {
	pq, ok := e.Q.(*ProcQuorum)
	if !ok {
		return errors.New("the revoke-leader-ca scenario needs journal processes (not containers)")
	}
	r := &RevokeCAResult{Failover: -1}
	e.mu.Lock()
	e.revoke = r
	e.mu.Unlock()
	err := e.revokeLeaderCA(pq, r)
	if err != nil {
		r.Err = err.Error()
		return err
	}
	for e.sleep(500 * time.Millisecond) {
	}
	return nil
}

func (e *Env) revokeLeaderCA(pq *ProcQuorum, r *RevokeCAResult) error {
	agents, err := e.startAgents()
	stopAgents := sync.OnceFunc(func() {
		for _, a := range agents {
			a.stop()
		}
	})
	unregister := onSignal(stopAgents)
	defer func() { stopAgents(); unregister() }()
	if err != nil {
		return err
	}
	e.Logf("%d pact-agents streaming", len(agents))
	// The load runs a moment with the agents streaming.
	time.Sleep(time.Second)

	l, err := e.leader()
	if err != nil {
		return err
	}
	id := e.Q.ID(l)
	others := e.others(l)
	r.Journal, r.Via = id, e.Q.ID(others[0])
	for _, a := range agents {
		st, _ := a.status()
		r.Agents = append(r.Agents, AgentDark{Node: a.node, Journal: st.JournalID, Issuer: a.issuer(st.Serial), Back: -1})
	}
	// What the others refused of peers, and the revoked journal dropped,
	// before.
	refusedBefore := map[int]int{}
	for _, i := range others {
		refusedBefore[i], _ = peerRefused(e.Q.Metrics(i), "revoked_intermediate")
	}
	dropsHalted, _ := streamDrops(e.Q.Metrics(l), "journal_halted")
	dropsRevoked, _ := streamDrops(e.Q.Metrics(l), "intermediate_revoked")
	dropsBefore := dropsHalted + dropsRevoked

	// The revocation, through a follower (the operator's command).
	began := time.Now()
	r.Call = e.H.Now()
	stdout, stderr, code, err := e.tool(e.pactEnv(others...), "pact", "journal", "revoke-ca", id, "--reason", "chaos: host "+id+" compromised", "--yes", "-o", "json")
	if err != nil {
		return err
	}
	r.Return = e.H.Now()
	k := e.addFault("revoke-ca", id+"(leader)")
	e.leaderLost()
	cmd := Outcome{What: fmt.Sprintf("pact journal revoke-ca %s --reason ... --yes through %s", id, r.Via), Want: "exit 0, the journal CA and its intermediates revoked"}
	var out cli.RevokedJournalCAs
	if code == 0 && json.Unmarshal([]byte(stdout), &out) == nil {
		for _, in := range out.Intermediates {
			r.Issuers = append(r.Issuers, in.Serial)
		}
	}
	sort.Strings(r.Issuers)
	cmd.Seen = code == 0 && len(out.Revoked) > 0 && len(r.Issuers) > 0
	cmd.Got = fmt.Sprintf("exit %d: %d journal CA(s), %d intermediates revoked", code, len(out.Revoked), len(r.Issuers))
	if code != 0 {
		cmd.Got += ": " + strings.TrimSpace(stderr+stdout)
	}
	r.Outcomes = append(r.Outcomes, cmd)
	e.Logf("%s: %s", cmd.What, cmd.Got)
	if !cmd.Seen {
		return fmt.Errorf("the revocation failed: %s", cmd.Got)
	}

	// Failover: another journal leads, within the bound of every leader
	// loss of the campaign.
	if nl, err := Leader(context.Background(), e.Q, electionWait, others...); err == nil {
		r.Failover, r.NewLeader = time.Since(began), e.Q.ID(nl)
	}
	fo := Outcome{What: fmt.Sprintf("another journal leads after %s's journal CA was revoked", id), Want: fmt.Sprintf("within %v (electionWait, as every leader loss)", electionWait)}
	fo.Seen = r.Failover >= 0
	fo.Got = fmt.Sprintf("none within %v", electionWait)
	if fo.Seen {
		fo.Got = fmt.Sprintf("%s leads %s after the command's start", r.NewLeader, ms(r.Failover))
	}
	r.Outcomes = append(r.Outcomes, fo)
	e.Logf("failover: %s", fo.Got)

	// The agents: every affected one streams again elsewhere.
	failover := r.Failover
	if failover < 0 {
		failover = electionWait
	}
	r.DarkBound = failover + agentRetryBudget()
	for n := range r.Agents {
		a := &r.Agents[n]
		a.Affected = a.Journal == id || slices.Contains(r.Issuers, a.Issuer)
	}
	for deadline := began.Add(darkWait); ; time.Sleep(100 * time.Millisecond) {
		pending := 0
		for n, ag := range agents {
			a := &r.Agents[n]
			if a.Back >= 0 || a.Exit != "" {
				continue
			}
			if x := ag.ended(); x != "" {
				a.Exit = x
				continue
			}
			st, err := ag.status()
			up := err == nil && st.StreamConnected && st.JournalID != "" && st.JournalID != id
			iss := ""
			if up {
				iss = ag.issuer(st.Serial)
				up = iss != "" && !slices.Contains(r.Issuers, iss)
			}
			if !up && a.Dropped == 0 {
				a.Dropped = e.H.Now()
			}
			if !up && err == nil && st.LastFailure != "" {
				a.Last = st.LastFailureReason + ": " + st.LastFailure
			}
			if up && (a.Affected || a.Dropped != 0) {
				a.Back, a.On, a.Reenrolled = time.Since(began), st.JournalID, iss != a.Issuer
				continue
			}
			if a.Affected || a.Dropped != 0 {
				pending++
			}
		}
		if pending == 0 && time.Since(began) > r.DarkBound || time.Now().After(deadline) {
			break
		}
	}
	affected := 0
	for _, a := range r.Agents {
		if a.Affected {
			affected++
		}
	}
	ds := r.darkTimes()
	e.Logf("%d of %d agents affected; back after %s (bound %s)", affected, len(r.Agents), durations(ds), ms(r.DarkBound))

	// The revoked journal is refused as a peer by the others, and reports
	// itself halted.
	peer := Outcome{Refusal: true, What: id + " calling the other journals after its journal CA was revoked",
		Want: `refused: pact_journal_peer_refused_total{reason="revoked_intermediate"} rises on every other journal`}
	peer.Seen = true
	var got []string
	for _, i := range others {
		n := refusedBefore[i]
		for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(200 * time.Millisecond) {
			if n, _ = peerRefused(e.Q.Metrics(i), "revoked_intermediate"); n > refusedBefore[i] {
				break
			}
		}
		peer.Seen = peer.Seen && n > refusedBefore[i]
		got = append(got, fmt.Sprintf("%s %d -> %d", e.Q.ID(i), refusedBefore[i], n))
	}
	peer.Got = "revoked_intermediate on " + strings.Join(got, ", ")
	r.Outcomes = append(r.Outcomes, peer)
	e.Logf("%s: %s", peer.What, peer.Got)

	halted := Outcome{What: id + ", cut off", Want: "reports itself halted: pact_journal_halted 1 on its /metrics, and pact journal status asked of it alone says why"}
	var h int
	for wait := time.Now().Add(10 * time.Second); time.Now().Before(wait); time.Sleep(200 * time.Millisecond) {
		if h, err = metricValue(e.Q.Metrics(l), "pact_journal_halted"); err == nil && h == 1 {
			break
		}
	}
	why := ""
	sout, serr, scode, _ := e.tool(e.pactEnv(l), "pact", "journal", "status", "-o", "json")
	var v cli.QuorumView
	if json.Unmarshal([]byte(sout), &v) == nil {
		for _, m := range v.Members {
			if m.JournalID == id {
				why = m.Halted
			}
		}
	}
	halted.Seen = h == 1 && why != ""
	halted.Got = fmt.Sprintf("pact_journal_halted %d (%v); pact journal status (exit %d) says halted: %q", h, err, scode, why)
	if why == "" && sout == "" {
		halted.Got += ": " + strings.TrimSpace(serr)
	}
	r.Outcomes = append(r.Outcomes, halted)
	e.Logf("%s: %s", halted.What, halted.Got)
	onRevoked := 0
	for _, a := range r.Agents {
		if a.Journal == id {
			onRevoked++
		}
	}
	if onRevoked > 0 {
		// Each stream there ends, by it: journal_halted once it finds itself
		// cut off, or, for a certificate its own intermediate signed,
		// intermediate_revoked as soon as it applies the revocation.
		drops := Outcome{What: fmt.Sprintf("the %d agents streaming on %s", onRevoked, id),
			Want: fmt.Sprintf(`their streams ended by it: pact_journal_stream_drops_total{reason="journal_halted"} and {reason="intermediate_revoked"} rise on it by %d together`, onRevoked)}
		h, err1 := streamDrops(e.Q.Metrics(l), "journal_halted")
		iv, err2 := streamDrops(e.Q.Metrics(l), "intermediate_revoked")
		drops.Seen = err1 == nil && err2 == nil && h+iv-dropsBefore >= onRevoked
		drops.Got = fmt.Sprintf("drops on %s: journal_halted %d -> %d, intermediate_revoked %d -> %d", id, dropsHalted, h, dropsBefore-dropsHalted, iv)
		if err := errors.Join(err1, err2); err != nil {
			drops.Got += fmt.Sprintf(" (%v)", err)
		}
		r.Outcomes = append(r.Outcomes, drops)
	}
	stopAgents()

	// The quorum's size restored the operator's way.
	if err := e.replaceRevoked(pq, l, r); err != nil {
		return err
	}
	e.heal(k)
	r.Readings = append(r.Readings, e.readQuorum("after "+id+" was added back with a new journal CA", e.others(), "", "", 60*time.Second))
	return nil
}

// streamDrops reads pact_journal_stream_drops_total{reason} from a
// journal's /metrics.
func streamDrops(metrics, reason string) (int, error) {
	n, err := metricValue(metrics, `pact_journal_stream_drops_total{reason="`+reason+`"}`)
	if errors.Is(err, errNoSeries) {
		return 0, nil
	}
	return n, err
}

// replaceRevoked removes the revoked journal i (pact journal remove: it
// must exit 3), makes it a new key and journal CA (the ceremony), starts
// it empty with --join and adds it (pact journal add --journal-ca).
func (e *Env) replaceRevoked(pq *ProcQuorum, i int, r *RevokeCAResult) error {
	id := e.Q.ID(i)
	rm := Outcome{What: "pact journal remove " + id + " (its journal CA revoked)", Want: "exit 0"}
	var stdout, stderr string
	var code int
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		// Every journal, the revoked one last: a follower may still name
		// it as leader (docs/quorum.md).
		stdout, stderr, code, err = e.tool(e.pactEnv(append(e.leaderFirst(), i)...), "pact", "journal", "remove", id)
		if err != nil {
			return err
		}
		if code != 7 || time.Now().After(deadline) {
			break
		}
	}
	rm.Got = fmt.Sprintf("pact journal remove: exit %d", code)
	if code != 0 {
		rm.Got += ": " + strings.TrimSpace(stderr+stdout)
	}
	rm.Seen = code == 0
	r.Outcomes = append(r.Outcomes, rm)
	e.Logf("%s: %s", rm.What, rm.Got)
	// A removed journal exits 3 once it learns it was removed; cut off, it
	// cannot (every member refuses it, MemberStatus included): the
	// operator stops it. Noted, not required.
	select {
	case <-pq.Exited(i):
		r.Notes = append(r.Notes, fmt.Sprintf("%s exited %d by itself after its removal", id, exitCode(pq.ExitError(i))))
	case <-time.After(5 * time.Second):
		stopped := time.Now()
		err := pq.StopWithin(i, 40*time.Second)
		note := fmt.Sprintf("%s, cut off, did not exit by itself within 5 s of its removal; SIGTERM stopped it in %s", id, ms(time.Since(stopped)))
		if err != nil {
			note = fmt.Sprintf("%s, cut off, did not exit by itself within 5 s of its removal, nor within 40 s of SIGTERM: %v", id, err)
		}
		r.Notes = append(r.Notes, note)
		e.Logf("%s", note)
	}

	// The ceremony: a new key (the old one is compromised) and its journal
	// CA, signed by the root, at the paths the journal's flags name.
	oldSerial := certSerial(pq.JournalCACert(id))
	if err := os.Remove(pq.JournalCAKey(id)); err != nil {
		return err
	}
	certPath, keyPath := launch.RootFiles(e.Dir)
	root, key, err := ceremony.LoadRoot(certPath, keystore.Spec{Backend: keystore.BackendFile, Location: keyPath}, keystore.Options{}, time.Now())
	if err != nil {
		return err
	}
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	for _, a := range []string{e.Q.GRPC(i), pq.Raft(i)} {
		if host, _, err := net.SplitHostPort(a); err == nil && !slices.Contains(names, host) {
			names = append(names, host)
		}
	}
	err = pq.IssueJournalCA(id, root, key, names)
	key.Close()
	if err != nil {
		return err
	}
	newSerial := certSerial(pq.JournalCACert(id))

	if err := pq.Rejoin(i); err != nil {
		return err
	}
	if err := e.Q.Start(i); err != nil {
		return err
	}
	if err := waitUp(e.Q, i, 60*time.Second); err != nil {
		return err
	}
	add := Outcome{What: fmt.Sprintf("%s, empty, with a new key and journal CA %s (was %s), started with --join; pact journal add %s %s --journal-ca", id, short(newSerial), short(oldSerial), id, pq.Raft(i)),
		Want: "the add succeeds and the journal serves"}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		stdout, stderr, code, err = e.tool(e.pactEnv(e.leaderFirst()...), "pact", "journal", "add", id, pq.Raft(i), "--journal-ca", pq.JournalCACert(id))
		if err != nil {
			return err
		}
		if code != 7 || time.Now().After(deadline) {
			break
		}
	}
	add.Got = fmt.Sprintf("pact journal add: exit %d", code)
	switch {
	case code != 0:
		add.Got += ": " + strings.TrimSpace(stderr+stdout)
	case newSerial == "" || newSerial == oldSerial:
		add.Got += "; the journal CA was not replaced"
	default:
		if err := e.Q.WaitServing(i, 90*time.Second); err != nil {
			add.Got += "; " + err.Error()
		} else {
			add.Seen = true
			add.Got += "; serving"
		}
	}
	r.Outcomes = append(r.Outcomes, add)
	e.Logf("%s: %s", add.What, add.Got)
	if !add.Seen {
		return nil
	}
	// It must stay: the leader's replication to the removed journal may
	// still be under way (hashicorp/raft backs off up to seconds after
	// failures, and this journal was refused since the revocation).
	stays := Outcome{What: fmt.Sprintf("%s, added back", id), Want: fmt.Sprintf("still running and serving %v after its add", addedStay)}
	select {
	case <-pq.Exited(i):
		stays.Got = fmt.Sprintf("exited %d: %s", exitCode(pq.ExitError(i)), tail(pq.CurrentLog(i), 3))
	case <-time.After(addedStay):
		if h, err := metricValue(e.Q.Metrics(i), "pact_journal_halted"); err != nil || h != 0 {
			stays.Got = fmt.Sprintf("pact_journal_halted %d (%v)", h, err)
		} else {
			stays.Seen, stays.Got = true, "running, not halted"
		}
	}
	r.Outcomes = append(r.Outcomes, stays)
	e.Logf("%s: %s", stays.What, stays.Got)
	return nil
}

// addedStay is how long the journal added back must run on before the
// quorum is read.
const addedStay = 10 * time.Second

func certSerial(path string) string {
	b, _ := pem.Decode([]byte(readFile(path)))
	if b == nil {
		return ""
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return ""
	}
	return pki.SerialHex(c.SerialNumber)
}

func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	return fmt.Sprintf("median %s, max %s (%d agents)", ms(ds[len(ds)/2]), ms(ds[len(ds)-1]), len(ds))
}

// RevocationRecords are the revocation as one operation in every node's
// history (OpRevokeCA), for the linearizability check: it took effect
// between the command's start and its answer.
func RevocationRecords(recs []*Record, r *RevokeCAResult) []*Record {
	if r == nil || len(r.Issuers) == 0 || r.Return == 0 {
		return nil
	}
	next := 0
	seen := map[string]bool{}
	var nodes []string
	for _, x := range recs {
		next = max(next, x.ID+1)
		if !seen[x.In.Node] {
			seen[x.In.Node] = true
			nodes = append(nodes, x.In.Node)
		}
	}
	var out []*Record
	for _, n := range nodes {
		out = append(out, &Record{ID: next, Client: revokeClient, Journal: r.Via, Call: r.Call, Return: r.Return,
			In: Input{Kind: OpRevokeCA, Node: n, Issuers: strings.Join(r.Issuers, ",")}, Out: Output{Result: ResultOK}})
		next++
	}
	return out
}

// revokeClient is the client id of the revocation in the history (the
// operator, not one of the workload's clients).
const revokeClient = 99

// CheckRevokedCA: the revocation was made and met everything it must
// (each Outcome), every affected agent streamed again within the bound,
// and the quorum was one of three again after the journal was re-added.
func CheckRevokedCA(r *RevokeCAResult) Check {
	c := Check{Name: InvRevokedCA}
	if r == nil {
		c.fail("the revoke-leader-ca scenario recorded nothing")
		return c
	}
	if r.Err != "" {
		c.fail("%s", r.Err)
	}
	for _, o := range r.Outcomes {
		c.Checked++
		if !o.Seen {
			kind := "expected"
			if o.Refusal {
				kind = "expected refusal did not happen"
			}
			c.fail("%s: %s; wanted %s; got %s", kind, o.What, o.Want, o.Got)
		}
	}
	affected := 0
	for _, a := range r.Agents {
		if !a.Affected {
			if a.Exit != "" {
				c.fail("agent %s (on %s, not affected) stopped: %s", a.Node, a.Journal, a.Exit)
			}
			continue
		}
		affected++
		c.Checked++
		switch {
		case a.Exit != "":
			c.fail("agent %s (streaming on %s, certificate from %s) stopped: %s", a.Node, a.Journal, short(a.Issuer), a.Exit)
		case a.Back < 0:
			c.fail("agent %s (streaming on %s, certificate from %s) did not stream again on another journal with a certificate of a live intermediate within %v; its last failure: %s", a.Node, a.Journal, short(a.Issuer), darkWait, a.Last)
		case a.Back > r.DarkBound:
			c.fail("agent %s (streaming on %s, certificate from %s) was dark %s, beyond the bound %s (failover %s + the agent's retry budget %s)", a.Node, a.Journal, short(a.Issuer), ms(a.Back), ms(r.DarkBound), ms(r.Failover), ms(agentRetryBudget()))
		}
	}
	if r.Journal != "" && affected == 0 {
		c.fail("no agent streamed on %s or held a certificate its intermediates signed: nothing shows the agents move", r.Journal)
	}
	for _, rd := range r.Readings {
		c.Checked += len(rd.Members)
		for _, p := range quorumProblems(rd) {
			c.fail("%s: %s", rd.When, p)
		}
	}
	if len(r.Readings) == 0 && r.Err == "" {
		c.fail("the quorum was not read after the revoked journal was added back")
	}
	ds := r.darkTimes()
	failover := "none"
	if r.Failover >= 0 {
		failover = ms(r.Failover) + " (" + r.NewLeader + ")"
	}
	c.Note = fmt.Sprintf("%s revoked through %s; failover %s; %d of %d agents affected, back after %s, bound %s; %d workload nodes enrolled again at once",
		r.Journal, r.Via, failover, affected, len(r.Agents), durations(ds), ms(r.DarkBound), r.Reenrolled)
	return c
}

// lines is the report's account of the revocation.
func (r *RevokeCAResult) lines() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, o := range r.Outcomes {
		tag := map[bool]string{true: "ok", false: "NOT MET"}[o.Seen]
		if o.Refusal {
			tag = map[bool]string{true: "refused as expected", false: "NOT REFUSED"}[o.Seen]
		}
		line := fmt.Sprintf("  %s: %s: %s", tag, o.What, o.Got)
		if !o.Seen {
			line += " (wanted: " + o.Want + ")"
		}
		out = append(out, line)
	}
	for _, a := range r.Agents {
		back := "not back"
		if a.Back >= 0 {
			back = fmt.Sprintf("back on %s after %s", a.On, ms(a.Back))
			if a.Reenrolled {
				back += ", re-enrolled"
			}
		} else if !a.Affected {
			back = "streamed on"
		}
		if a.Exit != "" {
			back = a.Exit
		}
		if a.Back < 0 && a.Last != "" {
			last := a.Last
			if len(last) > 300 {
				last = last[:300] + "..."
			}
			back += "; last failure " + last
		}
		aff := ""
		if a.Affected {
			aff = " (affected)"
		}
		out = append(out, fmt.Sprintf("  agent %s on %s, certificate from %s%s: %s", a.Node, a.Journal, short(a.Issuer), aff, back))
	}
	for _, rd := range r.Readings {
		if ps := quorumProblems(rd); len(ps) > 0 {
			out = append(out, fmt.Sprintf("  NOT ONE QUORUM %s: %s", rd.When, strings.Join(ps, "; ")))
			continue
		}
		if len(rd.Members) > 0 {
			v := rd.Views[rd.Members[0]]
			out = append(out, fmt.Sprintf("  one quorum %s: %s, all voters, quorum id %s, leader %s; audit trails one history over %d entries", rd.When, strings.Join(rd.Members, " "), v.QuorumID, v.LeaderID, rd.Compared))
		}
	}
	for _, n := range r.Notes {
		out = append(out, "  "+n)
	}
	if r.Err != "" {
		out = append(out, "  revocation stopped: "+r.Err)
	}
	return out
}

// countReenrolled counts audited takeovers of workload nodes whose
// certificate's issuer was revoked with a journal CA.
func countReenrolled(audit []*pactv1.AuditEntry, hw map[string][2]string) int {
	n := 0
	for _, e := range audit {
		if e.GetAction() == "takeover" && strings.Contains(e.GetDetail(), "revoked with journal") {
			if _, ok := hw[e.GetNodeId()]; ok {
				n++
			}
		}
	}
	return n
}
