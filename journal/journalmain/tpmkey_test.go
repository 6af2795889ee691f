package journalmain

import (
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
)

// tpmJournalSettings is the configuration of journal j1 whose journal CA
// key is in the software TPM sw, its certificate signed by a development
// root.
func tpmJournalSettings(t *testing.T, sw *swtpmtest.TPM) string {
	t.Helper()
	rootDir := t.TempDir()
	if _, err := ca.InitDev(rootDir, "site.example", time.Now()); err != nil {
		t.Fatal(err)
	}
	root, err := ca.LoadKeyFileAuthority(filepath.Join(rootDir, ca.RootCertFile), filepath.Join(rootDir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyPath, certPath := filepath.Join(dir, "journal-ca.tpmkey"), filepath.Join(dir, "journal-ca.pem")
	key, err := keystore.Generate(keystore.Spec{Backend: keystore.BackendTPM, Location: keyPath}, keystore.Options{TPMDevice: sw.Device})
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	dnsNames, ips := journal.ServerNames(journal.DefaultConfig().ListenAddr, nil)
	serial, err := pki.NewSerial()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := caprofile.JournalCA(caprofile.JournalCAParams{Domain: "site.example", JournalID: "j1", DNSNames: append([]string{"j1"}, dnsNames...), IPs: ips,
		Serial: serial, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(caprofile.DefaultJournalCALifetime)})
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.Root(), key.Public(), root.Signer())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pki.EncodeCertsPEM(der), 0o644); err != nil {
		t.Fatal(err)
	}
	return "node-id: j1\ndata-dir: " + filepath.Join(t.TempDir(), "data") + "\nroot-cert: " + filepath.Join(rootDir, ca.RootCertFile) +
		"\nroot-key: \"\"\njournal-ca-cert: " + certPath + "\njournal-ca-key: tpm:" + keyPath + "\ntpm-device: " + sw.Device + "\n"
}

// Transient objects that killed clients left fill the TPM: --check-config
// and a start say so, and how to clear them, as what it is, not a
// configuration problem, and exit 1, which the unit restarts (not 2, which
// it does not). Once the TPM is cleared, the check passes.
func TestTPMObjectMemoryFullIsNoConfigurationProblem(t *testing.T) {
	sw := swtpmtest.Start(t)
	file := tpmJournalSettings(t, sw)
	if code, out, errOut := runWith(t, file, nil, "--check-config"); code != 0 {
		t.Fatalf("check with a free TPM: exit %d\n%s%s", code, out, errOut)
	}
	sw.Fill(t, 0)
	for _, args := range [][]string{{"--check-config"}, nil} {
		code, out, errOut := runWith(t, file, nil, args...)
		if code != 1 {
			t.Errorf("%v with the TPM full: exit %d, want 1\n%s%s", args, code, out, errOut)
		}
		for _, want := range []string{"the TPM cannot be used now; this is not a configuration problem", "TPM_RC_OBJECT_MEMORY",
			"transient objects that pact did not load", "tpm2_flushcontext -t", "reboot"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, errOut)
			}
		}
		if strings.Contains(out+errOut, "configuration problem;") {
			t.Errorf("%v: reported as a configuration problem:\n%s%s", args, out, errOut)
		}
	}
	sw.FlushTransient(t)
	if code, out, errOut := runWith(t, file, nil, "--check-config"); code != 0 {
		t.Fatalf("check once the TPM is cleared: exit %d\n%s%s", code, out, errOut)
	}
}

// --check-config notes a tpm: key used through a raw TPM device while
// the kernel's resource manager is beside it.
func TestCheckConfigWarnsOfRawTPMDevice(t *testing.T) {
	dir := t.TempDir()
	raw, rm := filepath.Join(dir, "tpm0"), filepath.Join(dir, "tpmrm0")
	for _, f := range []string{raw, rm} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := "node-id: j1\ndata-dir: " + filepath.Join(dir, "data") + "\nroot-key: \"\"\njournal-ca-key: tpm:" + filepath.Join(dir, "k") + "\ntpm-device: " + raw + "\n"
	_, out, errOut := runWith(t, file, nil, "--check-config")
	if want := "pact-journal: note: the TPM is used through " + raw + ", which admits one program at a time"; !strings.Contains(out, want) || !strings.Contains(out, "--tpm-device "+rm) {
		t.Errorf("no note about %s:\n%s%s", raw, out, errOut)
	}
}

// timerClock is a fake clock that reports every timer it makes.
type timerClock struct {
	*fakeclock.Clock
	made chan time.Duration
}

func (c timerClock) NewTimer(d time.Duration) clock.Timer {
	tm := c.Clock.NewTimer(d)
	c.made <- d
	return tm
}

// pact-journal ca-request with a TPM that another process holds (swtpm
// serves one client at a time, as /dev/tpm0 admits one program) gives up
// after --tpm-timeout, naming the holder, instead of hanging; once the
// holder is gone it makes the key.
func TestCARequestTPMHeld(t *testing.T) {
	sw := swtpmtest.Start(t)
	holder := sw.Hold(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "journal-ca.tpmkey")
	clk := timerClock{fakeclock.New(time.Unix(1_700_000_000, 0)), make(chan time.Duration, 100)}
	tpmClock = clk
	defer func() { tpmClock = nil }()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := caRequest(t, "--journal-id", "j1", "--key", "tpm:"+keyFile, "--tpm-device", sw.Device,
			"--tpm-timeout", "20s", "--out", filepath.Join(dir, "j1.csr"))
		done <- result{code, stdout, stderr}
	}()
	for i := 0; i < 2; i++ { // the open, then the first command
		select {
		case <-clk.made:
		case <-time.After(20 * time.Second):
			t.Fatal("ca-request sent the TPM no command")
		}
	}
	clk.Advance(20 * time.Second)
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("ca-request hangs on a held TPM")
	}
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	for _, want := range []string{sw.Device, "did not answer", "within 20s", fmt.Sprintf("pid %d (", holder.Pid)} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	tpmClock = nil
	holder.Kill()
	code, stdout, stderr := caRequest(t, "--journal-id", "j1", "--key", "tpm:"+keyFile, "--tpm-device", sw.Device, "--out", filepath.Join(dir, "j1-again.csr"))
	if code != 0 || !strings.Contains(stdout, "made the journal CA key") {
		t.Fatalf("once the holder is gone: %d\n%s%s", code, stdout, stderr)
	}
}

// The journal's TPM timeout is a setting (tpm-timeout, PACT_TPM_TIMEOUT,
// --tpm-timeout): --check-config with a TPM that another client holds
// (swtpm serves one at a time, so it never answers this one) gives up
// after it, naming the device and the holder, and exits 1 (a TPM busy is
// no configuration problem: the unit restarts the journal). The timeout is
// short and real here: the TPM cannot answer, so it decides nothing but
// how long the test waits. A timeout that is not positive is refused.
func TestJournalTPMTimeoutSetting(t *testing.T) {
	for _, how := range []struct {
		yaml, want string
		env        map[string]string
		args       []string
	}{
		{yaml: "tpm-timeout: 50ms\n", want: "within 50ms"},
		{env: map[string]string{"PACT_TPM_TIMEOUT": "60ms"}, want: "within 60ms"},
		{args: []string{"--tpm-timeout", "70ms"}, want: "within 70ms"},
	} {
		sw := swtpmtest.Start(t)
		file := tpmJournalSettings(t, sw)
		holder := sw.Hold(t)
		code, out, errOut := runWith(t, file+how.yaml, how.env, append(how.args, "--check-config")...)
		if code != 1 {
			t.Errorf("%q %v %v: exit %d with the TPM held, want 1\n%s%s", how.yaml, how.env, how.args, code, out, errOut)
		}
		for _, want := range []string{sw.Device, how.want, fmt.Sprintf("pid %d (", holder.Pid)} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%q %v %v: output lacks %q:\n%s", how.yaml, how.env, how.args, want, errOut)
			}
		}
		holder.Kill()
	}
	for _, bad := range []string{"0s", "-1s"} {
		code, out, errOut := runWith(t, "node-id: j1\ndata-dir: "+t.TempDir()+"\ntpm-timeout: "+bad+"\n", nil, "--check-config")
		if code != 2 || !strings.Contains(errOut, "tpm timeout") || !strings.Contains(errOut, "give a positive duration") {
			t.Errorf("tpm-timeout: %s: exit %d, want 2 naming the setting\n%s%s", bad, code, out, errOut)
		}
	}
}
