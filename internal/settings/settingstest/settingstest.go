// Package settingstest checks a command's settings the way an operator
// reaches them: as a flag, as an environment variable and as a key of the
// configuration file.
package settingstest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/settings"
)

// Resolve parses args and env through a command's real settings, from its
// defaults, and returns what the command would run with (anything
// comparable with reflect.DeepEqual).
type Resolve func(t *testing.T, args []string, env map[string]string) (any, error)

// EveryWay fails t unless every setting of s has a PACT_* variable and each
// of its three ways (flag, variable, file key) changes the resolved
// configuration. samples holds a value unlike the default per setting name,
// or else per kind (string, bool, int, uint, duration, list); the --config
// setting itself is skipped.
func EveryWay(t *testing.T, s *settings.Set, samples map[string]string, resolve Resolve) {
	t.Helper()
	def, err := resolve(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range s.Settings() {
		if !strings.HasPrefix(st.Env, "PACT_") {
			t.Errorf("--%s has no PACT_* variable (%q)", st.Name, st.Env)
		}
		if st.Name == "config" {
			continue
		}
		v, ok := samples[st.Name]
		if !ok {
			v = samples[st.Kind]
		}
		path := filepath.Join(t.TempDir(), "settings.yaml")
		if err := os.WriteFile(path, []byte(st.Name+": "+v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for way, r := range map[string]struct {
			args []string
			env  map[string]string
		}{
			"flag": {[]string{"--" + st.Name + "=" + v}, nil},
			"env":  {nil, map[string]string{st.Env: v}},
			"file": {[]string{"--config", path}, nil},
		} {
			got, err := resolve(t, r.args, r.env)
			if err != nil {
				t.Errorf("%s by %s = %q: %v", st.Name, way, v, err)
				continue
			}
			if reflect.DeepEqual(got, def) {
				t.Errorf("%s by %s = %q changed nothing", st.Name, way, v)
			}
		}
	}
}
