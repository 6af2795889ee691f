package version_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/internal/bintest"
	"github.com/pact-hpc/pact/internal/version"
)

func TestStringShortensCommit(t *testing.T) {
	tests := []struct {
		in   version.Info
		want string
	}{
		{version.Info{Version: "v0.3.0", Commit: "0123456789abcdef0123", Go: "go1.26.0", Platform: "linux/amd64"}, "v0.3.0 (commit 0123456789ab, go1.26.0, linux/amd64)"},
		{version.Info{Version: "(devel)", Go: "go1.26.0", Platform: "linux/arm64"}, "(devel) (commit unknown, go1.26.0, linux/arm64)"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.in, got, tt.want)
		}
	}
}

// The binaries built the way `make build` builds them (its -ldflags, from
// `make print-ldflags`) all print the git version and commit for --version.
func TestMakeBuildStampsEveryBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-s", "--no-print-directory", "-C", root, "print-ldflags", "VERSION=v9.8.7-test", "COMMIT=feedfacecafebeef0011").CombinedOutput()
	if err != nil {
		t.Fatalf("make print-ldflags: %v\n%s", err, out)
	}
	ldflags := strings.TrimSpace(string(out))
	bin := t.TempDir()
	if err := bintest.Build(bin, ldflags, bintest.Commands...); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^v9\.8\.7-test \(commit feedfacecafe, go[^,]+, [a-z0-9]+/[a-z0-9]+\)$`)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"pact-journal", []string{"--version"}},
		{"pact-agent", []string{"--version"}},
		{"pact", []string{"--version"}},
		{"pact", []string{"version", "--client"}},
	} {
		cmd := exec.Command(filepath.Join(bin, c.name), c.args...)
		cmd.Env = []string{} // no PACT_JOURNAL from the developer's shell
		out, err := cmd.CombinedOutput()
		line := strings.TrimSpace(string(out))
		rest, ok := strings.CutPrefix(line, c.name+" ")
		if err != nil || !ok || !want.MatchString(rest) {
			t.Errorf("%s %v: %v, printed %q", c.name, c.args, err, line)
		}
	}
}
