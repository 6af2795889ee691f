package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEndToEndJoinTokenAndFence runs what docs/security.md recommends for
// a site without TPMs, with the real binaries: a node registered with
// --require-token, a token written by pact to a 0600 file, an agent that
// presents it; then the node is fenced and its agent stops with
// NODE_FENCED. The token never appears in any process's output.
func TestEndToEndJoinTokenAndFence(t *testing.T) {
	dir := t.TempDir()
	j := startJournal(t, dir, "127.0.0.1:0")
	if out, code := j.pact(t, "node", "enroll", "node-010", "--mac", "52:54:00:00:01:10", "--require-token"); code != 0 {
		t.Fatalf("enroll --require-token: exit %d\n%s", code, out)
	}
	agentArgs := []string{"--journal", j.addr, "--ca", filepath.Join(dir, "ca.pem"), "--mac", "52:54:00:00:01:10", "--status-socket", "", "--spire-socket", ""}

	// Without a token: refused, exit 5, and the message says what to do.
	p := start(t, nil, "pact-agent", agentArgs...)
	if code := p.wait(t); code != 5 || !strings.Contains(p.output(), "JOIN_TOKEN_REQUIRED") || !strings.Contains(p.output(), "pact node token create node-010") {
		t.Fatalf("agent without a token: exit %d\n%s", code, p.output())
	}

	tokenFile := filepath.Join(t.TempDir(), "node-010.token")
	out, code := j.pact(t, "node", "token", "create", "node-010", "--ttl", "10m", "--out", tokenFile)
	if code != 0 {
		t.Fatalf("token create: exit %d\n%s", code, out)
	}
	raw, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))
	a := start(t, nil, "pact-agent", append(agentArgs, "--join-token-file", tokenFile)...)
	a.waitLine(t, enrolledRE)
	a.waitLine(t, streamOpenRE)
	if n := j.inspect(t, "node-010"); n.State != "active" {
		t.Fatalf("after the agent enrolled with its token: %+v", n)
	}

	// A clone with the same hardware and the same (now used) token.
	clone := start(t, nil, "pact-agent", append(agentArgs, "--join-token-file", tokenFile)...)
	if code := clone.wait(t); code != 5 && code != 6 {
		t.Errorf("a clone with the used token: exit %d\n%s", code, clone.output())
	}

	out, code = j.pact(t, "node", "fence", "node-010", "--reason", "e2e: suspected clone")
	if code != 0 {
		t.Fatalf("fence: exit %d\n%s", code, out)
	}
	if code := a.wait(t); code != 5 || !strings.Contains(a.output(), "NODE_FENCED") {
		t.Errorf("the fenced node's agent: exit %d\n%s", code, a.output())
	}
	if out, code := j.pact(t, "audit", "--node", "node-010", "-o", "json"); code != 0 || !strings.Contains(out, "e2e: suspected clone") {
		t.Errorf("audit: exit %d\n%s", code, out)
	}

	secret := strings.TrimPrefix(token, "pactjt_")[:16]
	for name, text := range map[string]string{"journal": j.proc.output(), "agent": a.output() + p.output() + clone.output()} {
		if strings.Contains(text, secret) {
			t.Errorf("the %s output holds the join token", name)
		}
	}
	list, _ := j.pact(t, "node", "token", "list", "-o", "json")
	audit, _ := j.pact(t, "audit", "-o", "json")
	if strings.Contains(list+audit, secret) {
		t.Error("pact -o json shows the join token")
	}
}
