package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// After dpkg -i both units are disabled: the postinstall says how to
// enable them, and says nothing on a host where one is enabled already
// (an upgrade). It runs here with stand-ins for systemctl and
// systemd-sysusers, so it creates no user and touches no unit.
func TestPostinstallSaysHowToEnableTheUnits(t *testing.T) {
	for _, tt := range []struct {
		name    string
		enabled bool
		want    []string
	}{
		{"a fresh install", false, []string{"neither unit is enabled", "systemctl enable --now pact-journal", "systemctl enable --now pact-agent", "--check-config"}},
		{"an upgrade of a unit in service", true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			isEnabled := "exit 1"
			if tt.enabled {
				isEnabled = "exit 0"
			}
			for name, body := range map[string]string{
				"systemctl":        "#!/bin/sh\n[ \"$1\" = is-enabled ] && " + isEnabled + "\nexit 0\n",
				"systemd-sysusers": "#!/bin/sh\nexit 0\n",
			} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("/bin/sh", "scripts/postinstall.sh", "configure")
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("postinstall: %v\n%s", err, out)
			}
			if len(tt.want) == 0 && len(out) != 0 {
				t.Errorf("postinstall said %q, want nothing", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("postinstall output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
