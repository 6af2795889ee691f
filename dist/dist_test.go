package dist

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/agent"
	"github.com/pact-hpc/pact/internal/bintest"
)

var binDir string

func TestMain(m *testing.M) {
	dir, remove := bintest.Main(bintest.Commands...)
	binDir = dir
	code := m.Run()
	remove()
	os.Exit(code)
}

// need finds a system tool; CI installs it (.ci/run), so there its absence
// fails the test instead of skipping it.
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing; .ci/run installs it", tool)
	}
	t.Skipf("%s is not installed (CI installs it)", tool)
	return ""
}

var units = []string{"pact-journal.service", "pact-agent.service"}

// verifyUnits runs systemd-analyze verify on the units in dir, with
// /usr/bin/ pointing at the freshly built binaries (verify checks that
// ExecStart is executable). It returns everything systemd-analyze said:
// it exits 0 for an unknown key or a bad value it ignores, so any output
// is a failure.
func verifyUnits(t *testing.T, dir string) string {
	t.Helper()
	tool := need(t, "systemd-analyze")
	tmp := t.TempDir()
	var paths []string
	for _, u := range units {
		b, err := os.ReadFile(filepath.Join(dir, u))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(tmp, u)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/usr/bin/", binDir+"/")), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(tool, append([]string{"verify"}, paths...)...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil && s == "" {
		s = err.Error()
	}
	return s
}

func TestUnitsVerify(t *testing.T) {
	if out := verifyUnits(t, "systemd"); out != "" {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
}

// The check itself catches what systemd only warns about.
func TestUnitsVerifyCatchesMistakes(t *testing.T) {
	dir := t.TempDir()
	for _, u := range units {
		b, err := os.ReadFile(filepath.Join("systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), "ProtectSystem=strict", "ProtectSystem=strickt", 1))
		if err := os.WriteFile(filepath.Join(dir, u), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out := verifyUnits(t, dir); !strings.Contains(out, "strickt") {
		t.Errorf("a bad ProtectSystem value went unnoticed: %q", out)
	}
}

// unitValues is every value of key in the unit file, in order.
func unitValues(t *testing.T, unit, key string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("systemd", unit))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// The agent's restart policy follows its exit codes (docs/exit-codes.md):
// no restart on what needs an operator, a restart on ALREADY_ACTIVE.
func TestAgentRestartPolicy(t *testing.T) {
	var got []int
	for _, v := range unitValues(t, "pact-agent.service", "RestartPreventExitStatus") {
		for _, f := range strings.Fields(v) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("RestartPreventExitStatus %q", v)
			}
			got = append(got, n)
		}
	}
	slices.Sort(got)
	want := []int{agent.ExitUsage, agent.ExitNotEnrolled, agent.ExitConflict, agent.ExitRevoked}
	if !slices.Equal(got, want) {
		t.Errorf("RestartPreventExitStatus %v, want %v", got, want)
	}
	if slices.Contains(got, agent.ExitAlreadyActive) || slices.Contains(got, agent.ExitError) {
		t.Error("ALREADY_ACTIVE and transient errors must be restarted")
	}
	if r := unitValues(t, "pact-agent.service", "Restart"); !slices.Equal(r, []string{"on-failure"}) {
		t.Errorf("Restart=%v", r)
	}
}

// The hardening the issue asks for, in both units.
func TestUnitsHardened(t *testing.T) {
	for _, u := range units {
		for key, want := range map[string]string{
			"Type": "notify", "User": "pact", "ProtectSystem": "strict", "NoNewPrivileges": "yes",
			"RuntimeDirectory": "", "PrivateTmp": "yes", "ProtectHome": "yes",
		} {
			v := unitValues(t, u, key)
			if len(v) != 1 || (want != "" && v[0] != want) || v[0] == "" {
				t.Errorf("%s: %s=%v, want %q", u, key, v, want)
			}
		}
	}
	if v := unitValues(t, "pact-journal.service", "CapabilityBoundingSet"); !slices.Equal(v, []string{""}) {
		t.Errorf("pact-journal needs no capability: %v", v)
	}
	if v := unitValues(t, "pact-journal.service", "StateDirectory"); !slices.Equal(v, []string{"pact-journal"}) {
		t.Errorf("pact-journal StateDirectory %v", v)
	}
	if v := unitValues(t, "pact-agent.service", "CapabilityBoundingSet"); !slices.Equal(v, []string{"CAP_DAC_READ_SEARCH"}) {
		t.Errorf("pact-agent keeps only CAP_DAC_READ_SEARCH: %v", v)
	}
	// Both may reach the TPM and no other device: the agent for TPM
	// attestation, the journal for a journal CA key in it (tpm:).
	for _, u := range units {
		if v := unitValues(t, u, "DevicePolicy"); !slices.Equal(v, []string{"closed"}) {
			t.Errorf("%s: DevicePolicy=%v, want closed", u, v)
		}
		if v := unitValues(t, u, "DeviceAllow"); !slices.Equal(v, []string{"/dev/tpmrm0 rw"}) {
			t.Errorf("%s: DeviceAllow=%v, want /dev/tpmrm0 rw", u, v)
		}
		if v := unitValues(t, u, "PrivateDevices"); slices.Contains(v, "yes") {
			t.Errorf("%s: PrivateDevices=yes hides /dev/tpmrm0", u)
		}
	}
	// The agent's status socket default is in its RuntimeDirectory.
	if v := unitValues(t, "pact-agent.service", "RuntimeDirectory"); !slices.Equal(v, []string{filepath.Base(filepath.Dir(agent.DefaultStatusSocket))}) {
		t.Errorf("RuntimeDirectory %v does not hold %s", v, agent.DefaultStatusSocket)
	}
}

var envVarRE = regexp.MustCompile(`^#?(PACT_[A-Z0-9_]+)=`)

// Every variable the example settings and the units set is one the binary
// reads (its --help names it), so the examples cannot drift.
func TestExampleSettingsKnown(t *testing.T) {
	for _, c := range []struct{ file, unit, bin string }{
		{"etc/journal.env", "pact-journal.service", "pact-journal"},
		{"etc/agent.env", "pact-agent.service", "pact-agent"},
	} {
		help, _ := exec.Command(filepath.Join(binDir, c.bin), "--help").CombinedOutput()
		vars := map[string]bool{}
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if m := envVarRE.FindStringSubmatch(l); m != nil {
				vars[m[1]] = true
			}
		}
		for _, v := range unitValues(t, c.unit, "Environment") {
			for _, kv := range strings.Fields(v) {
				vars[strings.SplitN(kv, "=", 2)[0]] = true
			}
		}
		if len(vars) < 3 {
			t.Fatalf("%s: found only %v", c.file, vars)
		}
		for v := range vars {
			if !strings.Contains(string(help), "("+v+")") && !strings.Contains(string(help), "("+v+",") {
				t.Errorf("%s sets %s, which %s --help does not name", c.file, v, c.bin)
			}
		}
	}
}
