package integration

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notifySocket is what systemd gives a Type=notify service: a unixgram
// socket named by NOTIFY_SOCKET. Its datagrams arrive on the channel.
func notifySocket(t *testing.T) (env string, msgs <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			ch <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return "NOTIFY_SOCKET=" + path, ch
}

// nextNotify waits for the next datagram; the bound is only against a
// hung test, the datagram comes as soon as the process gets there.
func nextNotify(t *testing.T, msgs <-chan string, p *proc) string {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-p.exited:
		select {
		case m := <-msgs: // sent just before it exited
			return m
		case <-time.After(10 * time.Second):
			// A hang guard too: STOPPING=1 comes just before the exit,
			// and the goroutine that reads the socket may be slower to
			// run than the exit is to be noticed.
		}
		t.Fatalf("process exited (%v) before notifying systemd:\n%s", p.err, p.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("no sd_notify datagram:\n%s", p.output())
	}
	return ""
}

// The journal and the agent speak systemd's Type=notify protocol: READY=1
// once serving (the journal) or holding an identity with an open stream
// (the agent), RELOADING=1 then READY=1 around a SIGHUP reload, and
// STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	dir := t.TempDir()
	env, msgs := notifySocket(t)
	p := start(t, []string{env}, "pact-journal", "--dev", "--data-dir", dir, "--listen", "127.0.0.1:0")
	addr := p.waitLine(t, servingRE)[1]
	if m := nextNotify(t, msgs, p); !strings.HasPrefix(m, "READY=1\nSTATUS=serving on "+addr) {
		t.Fatalf("journal's first notification %q", m)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if m := nextNotify(t, msgs, p); !strings.HasPrefix(m, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Errorf("on SIGHUP %q", m)
	}
	if m := nextNotify(t, msgs, p); m != "READY=1\n" {
		t.Errorf("after the reload %q", m)
	}
	j := &devJournal{proc: p, dir: dir, addr: addr, env: []string{
		"PACT_JOURNAL=" + addr,
		"PACT_CA=" + filepath.Join(dir, "ca.pem"),
		"PACT_CERT=" + filepath.Join(dir, "admin.pem"),
		"PACT_KEY=" + filepath.Join(dir, "admin-key.pem"),
	}}
	if out, code := j.pact(t, "node", "enroll", "node-001", "--mac", "52:54:00:00:00:01", "--bmc-serial", "SN-0001"); code != 0 {
		t.Fatalf("pact node enroll: exit %d\n%s", code, out)
	}

	aenv, amsgs := notifySocket(t)
	a := start(t, []string{aenv}, "pact-agent", "--journal", addr, "--ca", filepath.Join(dir, "ca.pem"),
		"--mac", "52:54:00:00:00:01", "--bmc-serial", "SN-0001", "--status-socket", "")
	if m := nextNotify(t, amsgs, a); m != "READY=1\nSTATUS=enrolled, stream open\n" {
		t.Errorf("agent's first notification %q", m)
	}
	if n := j.inspect(t, "node-001"); n.State != "active" {
		t.Errorf("READY=1 before the node is active: %+v", n)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	if m := nextNotify(t, amsgs, a); m != "STOPPING=1\n" {
		t.Errorf("agent on SIGTERM %q", m)
	}
	if code := a.wait(t); code != 0 {
		t.Errorf("agent exit %d on SIGTERM", code)
	}
	j.stop(t)
	if m := nextNotify(t, msgs, p); m != "STOPPING=1\n" {
		t.Errorf("journal on SIGTERM %q", m)
	}
	_ = os.Remove(dir)
}

// A clean stop (SIGTERM, what systemctl stop/restart sends) releases the
// node: the same hardware with a new key enrolls at once. A crash
// (SIGKILL) does not: the next agent is refused ALREADY_ACTIVE (exit 6)
// until the takeover window (60s here) has passed.
func TestAgentReleaseOnCleanStop(t *testing.T) {
	j := startJournal(t, t.TempDir(), "127.0.0.1:0")
	if out, code := j.pact(t, "node", "enroll", "node-001", "--mac", "52:54:00:00:00:01", "--bmc-serial", "SN-0001"); code != 0 {
		t.Fatalf("pact node enroll: exit %d\n%s", code, out)
	}
	agent := func() *proc {
		return start(t, nil, "pact-agent", "--journal", j.addr, "--ca", filepath.Join(j.dir, "ca.pem"),
			"--mac", "52:54:00:00:00:01", "--bmc-serial", "SN-0001", "--status-socket", "")
	}

	first := agent()
	serial1 := first.waitLine(t, enrolledRE)[1]
	first.waitLine(t, streamOpenRE)
	first.cmd.Process.Signal(syscall.SIGTERM)
	if code := first.wait(t); code != 0 {
		t.Fatalf("agent exit %d on SIGTERM", code)
	}
	if !strings.Contains(first.output(), "node released") {
		t.Errorf("the stopping agent did not release the node:\n%s", first.output())
	}
	// The journal sees a planned end of the stream, not a client gone
	// (pact_journal_stream_drops_total{reason="released"}, outside the
	// PactStreamsDropping alert).
	j.proc.waitLine(t, regexp.MustCompile(`msg="agent stream closed" .*node_id=node-001 serial=`+serial1+` reason=released`))
	// The operator sees it: active, released, until it enrolls again.
	if n := j.inspect(t, "node-001"); n.State != "active" || !n.Released || n.CertSerial != serial1 {
		t.Errorf("after a clean stop: %+v, want active and released", n)
	}
	if out, code := j.pact(t, "node", "list", "--state", "released"); code != 0 || !regexp.MustCompile(`node-001\s+active,released\s`).MatchString(out) {
		t.Errorf("pact node list --state released: exit %d\n%s", code, out)
	}

	second := agent()
	serial2 := second.waitLine(t, enrolledRE)[1]
	second.waitLine(t, streamOpenRE)
	if serial2 == serial1 {
		t.Fatalf("the restarted agent holds the old certificate %s", serial1)
	}
	if n := j.inspect(t, "node-001"); n.State != "active" || n.CertSerial != serial2 || n.Released {
		t.Errorf("after the restart: %+v, want active (not released) with %s", n, serial2)
	}
	audit, _ := j.pact(t, "audit", "--node", "node-001")
	if !strings.Contains(audit, "release") {
		t.Errorf("the release is not audited:\n%s", audit)
	}

	// A crash: no release, so a new key must wait for the window: the next
	// agent is refused ALREADY_ACTIVE (and waits it out, retrying), and the
	// registry keeps the crashed agent's certificate.
	second.cmd.Process.Signal(syscall.SIGKILL)
	second.wait(t)
	j.proc.waitLine(t, regexp.MustCompile(`msg="agent stream closed" .*node_id=node-001 serial=`+serial2+` reason=client_gone`))
	third := agent()
	third.waitLine(t, regexp.MustCompile(`ALREADY_ACTIVE: node node-001 is active with another key`))
	if n := j.inspect(t, "node-001"); n.CertSerial != serial2 || n.Released {
		t.Errorf("after a crash the next agent enrolled at once, or the node shows released: %+v", n)
	}
	if strings.Contains(third.output(), "msg=enrolled") {
		t.Errorf("after a crash the next agent enrolled before the takeover window:\n%s", third.output())
	}
}
