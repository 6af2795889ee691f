package dist

import (
	"bufio"
	"context"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

var pemKeyRE = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----\r?\n[A-Za-z0-9+/]`)

// The worked example of docs/diskless.md: mkroot.sh adds pact-agent to a
// plain image root tree (nothing downloaded), the tree holds exactly what
// the guide says and no key, and the agent started from the tree with
// only the tree's settings enrolls with a real journal and tells systemd
// it is ready.
func TestDisklessImageRoot(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "cn-0001", "SN-DISKLESS-1", "52:54:00:aa:00:01")
	caFile := filepath.Join(h.Dir, ca.RootCertFile)

	root := t.TempDir()
	if out, err := exec.Command("sh", "diskless/mkroot.sh", root, filepath.Join(binDir, "pact-agent"), caFile, h.Addr).CombinedOutput(); err != nil {
		t.Fatalf("mkroot.sh: %v\n%s", err, out)
	}

	want := map[string]fs.FileMode{
		"usr/bin/pact-agent":                                            0o755,
		"etc/pact/ca.pem":                                               0o644,
		"etc/pact/agent.env":                                            0o644,
		"usr/lib/systemd/system/pact-agent.service":                     0o644,
		"usr/lib/sysusers.d/pact.conf":                                  0o644,
		"etc/systemd/system/pact-agent.service.d/diskless.conf":         0o644,
		"etc/systemd/system/multi-user.target.wants/pact-agent.service": fs.ModeSymlink,
	}
	got := map[string]fs.FileMode{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			got[rel] = fs.ModeSymlink
			return nil
		}
		got[rel] = info.Mode().Perm()
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if pemKeyRE.Match(b) {
			t.Errorf("%s holds a private key: the image must not", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, m := range want {
		if got[p] != m {
			t.Errorf("%s: mode %v, want %v", p, got[p], m)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("the image holds %s, which the guide does not list", p)
		}
	}
	// Enabled offline: the symlink resolves inside the image.
	link, err := os.Readlink(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/pact-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, link)); err != nil {
		t.Errorf("enable symlink points at %s, not in the image: %v", link, err)
	}
	dropIn, _ := os.ReadFile(filepath.Join(root, "etc/systemd/system/pact-agent.service.d/diskless.conf"))
	if !strings.Contains(string(dropIn), "After=network-online.target") {
		t.Errorf("diskless drop-in does not order after network-online.target:\n%s", dropIn)
	}

	bootImage(t, h, root, "cn-0001", "52:54:00:aa:00:01", "SN-DISKLESS-1")
}

// A node registered with --require-token, from an image made with
// JOIN_TOKEN_FILE: the boot puts a fresh token at that path (a tmpfs on a
// real node) and the agent from the image enrolls with it. The image's
// /etc stays as built: the pact user is baked in on the build host with
// systemd-sysusers --root, as docs/diskless.md says for a read-only /etc.
func TestDisklessImageRootWithJoinToken(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	if _, err := h.AdminClient(t).RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{
		NodeId: "cn-0002", Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:aa:00:02"}, BmcSerial: "SN-DISKLESS-2"},
		Credentials: &pactv1.CredentialPolicy{RequireJoinToken: true},
	}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	cmd := exec.Command("sh", "diskless/mkroot.sh", root, filepath.Join(binDir, "pact-agent"), filepath.Join(h.Dir, ca.RootCertFile), h.Addr)
	cmd.Env = append(os.Environ(), "JOIN_TOKEN_FILE=/run/pact-token/join-token")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkroot.sh: %v\n%s", err, out)
	}
	envFile, _ := os.ReadFile(filepath.Join(root, "etc/pact/agent.env"))
	if !strings.Contains(string(envFile), "\nPACT_AGENT_JOIN_TOKEN_FILE=/run/pact-token/join-token\n") {
		t.Fatalf("agent.env does not name the token file:\n%s", envFile)
	}

	// The read-only /etc recipe: the user and its tss membership in the
	// image's own passwd and group.
	run(t, need(t, "systemd-sysusers"), "--root="+root)
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	group, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if !regexp.MustCompile(`(?m)^pact:x:\d+:\d+:`).Match(passwd) || !regexp.MustCompile(`(?m)^tss:x:\d+:(.*,)?pact(,|$)`).Match(group) {
		t.Errorf("systemd-sysusers --root did not bake the pact user into the image:\n%s\n%s", passwd, group)
	}

	// This boot's token, delivered before the agent starts.
	created, err := h.AdminClient(t).CreateJoinToken(context.Background(), &pactv1.CreateJoinTokenRequest{NodeId: "cn-0002", TtlSeconds: 900})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(root, "run/pact-token/join-token")
	if err := os.MkdirAll(filepath.Dir(tokenFile), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	bootImage(t, h, root, "cn-0002", "52:54:00:aa:00:02", "SN-DISKLESS-2")
}

// bootImage starts the agent of the image tree root with only the tree's
// settings and waits for its READY=1; the node is then active. The
// settings come from the image's agent.env; absolute paths in it are
// resolved inside the tree (no chroot in a test). The test machine has no
// NIC registered to the node, so the hardware identity is passed in the
// environment, the one thing that differs from a real boot.
func bootImage(t *testing.T, h *journaltest.Harness, root, node, mac, bmc string) {
	t.Helper()
	env := []string{"PACT_AGENT_MACS=" + mac, "PACT_AGENT_BMC_SERIAL=" + bmc, "PACT_AGENT_STATUS_SOCKET="}
	f, err := os.Open(filepath.Join(root, "etc/pact/agent.env"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		if strings.HasPrefix(v, "/") {
			v = filepath.Join(root, v)
		}
		env = append(env, k+"="+v)
	}
	f.Close()
	if !slices.ContainsFunc(env, func(s string) bool { return strings.HasPrefix(s, "PACT_JOURNAL=") }) {
		t.Fatalf("agent.env sets no PACT_JOURNAL: %v", env)
	}
	sock := filepath.Join(t.TempDir(), "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cmd := exec.Command(filepath.Join(root, "usr/bin/pact-agent"))
	cmd.Env = append(env, "NOTIFY_SOCKET="+sock)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("agent output:\n%s", out.String())
		}
	}()
	// Bound only against a hung agent; READY=1 comes once it enrolled.
	nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	buf := make([]byte, 512)
	n, err := nc.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "READY=1") {
		t.Fatalf("no READY=1 from the image's agent: %q %v", buf[:n], err)
	}
	got, err := h.AdminClient(t).InspectNode(context.Background(), &pactv1.InspectNodeRequest{NodeId: node})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetNode().GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
		t.Errorf("after READY=1 %s is %v", node, got.GetNode().GetState())
	}
}
