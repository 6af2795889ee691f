package dist

import (
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The files each package holds, with their modes; both formats agree.
var packageFiles = map[string]string{
	"/usr/bin/pact-journal":                        "-rwxr-xr-x",
	"/usr/bin/pact-agent":                          "-rwxr-xr-x",
	"/usr/bin/pact":                                "-rwxr-xr-x",
	"/usr/lib/systemd/system/pact-journal.service": "-rw-r--r--",
	"/usr/lib/systemd/system/pact-agent.service":   "-rw-r--r--",
	"/usr/lib/sysusers.d/pact.conf":                "-rw-r--r--",
	"/etc/pact/journal.env":                        "-rw-r--r--",
	"/etc/pact/agent.env":                          "-rw-r--r--",
	"/etc/pact/journal.yaml":                       "-rw-r--r--",
	"/etc/pact/agent.yaml":                         "-rw-r--r--",
	"/usr/share/pact/diskless/mkroot.sh":           "-rwxr-xr-x",
	"/usr/share/doc/pact/copyright":                "-rw-r--r--",
	"/usr/share/doc/pact/README.md":                "-rw-r--r--",
	"/usr/share/doc/pact/exit-codes.md":            "-rw-r--r--",
	"/usr/share/doc/pact/quorum.md":                "-rw-r--r--",
	"/usr/share/doc/pact/diskless.md":              "-rw-r--r--",
}

var configFiles = []string{"/etc/pact/agent.env", "/etc/pact/agent.yaml", "/etc/pact/journal.env", "/etc/pact/journal.yaml"}

// makePackage runs `make package` as a user does, into a temp dir, with a
// release version so the package version rule is checked too.
func makePackage(t *testing.T) (deb, rpm string) {
	t.Helper()
	tmp := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", root, "package",
		"BIN="+filepath.Join(tmp, "bin"), "PKG_DIR="+filepath.Join(tmp, "pkg"), "VERSION=v1.2.3-4-gabcdef0", "PKG_ARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make package: %v\n%s", err, out)
	}
	deb = filepath.Join(tmp, "pkg", "pact_1.2.3+git4.gabcdef0-1_amd64.deb")
	rpm = filepath.Join(tmp, "pkg", "pact-1.2.3+git4.gabcdef0-1.x86_64.rpm")
	for _, p := range []string{deb, rpm} {
		if _, err := os.Stat(p); err != nil {
			entries, _ := os.ReadDir(filepath.Join(tmp, "pkg"))
			t.Fatalf("make package did not write %s: %v (it wrote %v)", filepath.Base(p), err, entries)
		}
	}
	return deb, rpm
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// listing is "path -> mode" from ls -l style lines (dpkg-deb -c, rpm -qlvp).
func listing(t *testing.T, out string, pathField int, strip string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) <= pathField {
			t.Fatalf("unexpected listing line %q", l)
		}
		got[strings.TrimSuffix(strings.TrimPrefix(f[pathField], strip), "/")] = f[0]
	}
	return got
}

func checkFiles(t *testing.T, kind string, got map[string]string, owner func(path string) string) {
	t.Helper()
	for path, mode := range packageFiles {
		if got[path] != mode {
			t.Errorf("%s: %s has mode %q, want %q", kind, path, got[path], mode)
		}
		if o := owner(path); o != "root/root" {
			t.Errorf("%s: %s owned by %s, want root/root", kind, path, o)
		}
	}
	for path, mode := range got {
		if strings.HasPrefix(mode, "d") || strings.HasPrefix(path, "/usr/share/doc/pact/") {
			continue
		}
		if _, ok := packageFiles[path]; !ok {
			t.Errorf("%s holds %s, which the test does not expect", kind, path)
		}
	}
}

func TestPackages(t *testing.T) {
	need(t, "dpkg-deb")
	need(t, "rpm")
	if testing.Short() {
		t.Skip("builds the binaries and both packages")
	}
	deb, rpm := makePackage(t)

	t.Run("deb", func(t *testing.T) {
		out := run(t, "dpkg-deb", "-c", deb)
		owners := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			owners[strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")] = f[1]
		}
		checkFiles(t, "deb", listing(t, out, 5, "."), func(p string) string { return owners[p] })
		for field, want := range map[string]string{"Package": "pact", "Version": "1.2.3+git4.gabcdef0-1", "Architecture": "amd64"} {
			if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, field)); got != want {
				t.Errorf("%s: %q, want %q", field, got, want)
			}
		}
		ctrl := t.TempDir()
		run(t, "dpkg-deb", "-e", deb, ctrl)
		for member, src := range map[string]string{"postinst": "scripts/postinstall.sh", "prerm": "scripts/preremove.sh", "postrm": "scripts/postremove.sh"} {
			got, err := os.ReadFile(filepath.Join(ctrl, member))
			want, _ := os.ReadFile(src)
			if err != nil || string(got) != string(want) {
				t.Errorf("%s is not %s: %v", member, src, err)
			}
			if st, err := os.Stat(filepath.Join(ctrl, member)); err != nil || st.Mode().Perm() != 0o755 {
				t.Errorf("%s mode: %v %v", member, st.Mode(), err)
			}
		}
		conf, _ := os.ReadFile(filepath.Join(ctrl, "conffiles"))
		if got := strings.Fields(string(conf)); !slices.Equal(sorted(got), configFiles) {
			t.Errorf("conffiles %v, want %v", got, configFiles)
		}
		// The binaries in the package carry the version make stamped, and
		// are stripped: no symbol table, no DWARF.
		x := t.TempDir()
		run(t, "dpkg-deb", "-x", deb, x)
		var binaries []string
		for _, b := range []string{"pact-journal", "pact-agent", "pact"} {
			p := filepath.Join(x, "usr/bin", b)
			binaries = append(binaries, p)
			if out := run(t, p, "--version"); !strings.HasPrefix(out, b+" v1.2.3-4-gabcdef0 (commit ") {
				t.Errorf("%s --version from the package: %q", b, out)
			}
			f, err := elf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, sec := range f.Sections {
				if sec.Name == ".symtab" || strings.HasPrefix(sec.Name, ".debug_") || strings.HasPrefix(sec.Name, ".zdebug_") {
					t.Errorf("%s is not stripped: it has %s", b, sec.Name)
				}
			}
			f.Close()
		}
		checkCopyright(t, filepath.Join(x, "usr/share/doc/pact/copyright"), binaries)
		checkInstalledMkroot(t, x)
	})
	t.Run("rpm", func(t *testing.T) {
		if got := strings.Fields(run(t, "rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH}\n", rpm)); !slices.Equal(got, []string{"pact", "1.2.3+git4.gabcdef0", "1", "x86_64"}) {
			t.Errorf("rpm header %v", got)
		}
		if got := strings.Fields(run(t, "rpm", "-qlp", rpm)); len(got) < len(packageFiles) {
			t.Errorf("rpm -qlp lists %d files: %v", len(got), got)
		}
		out := run(t, "rpm", "-qlvp", rpm)
		owners := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			owners[f[8]] = f[2] + "/" + f[3]
		}
		checkFiles(t, "rpm", listing(t, out, 8, ""), func(p string) string { return owners[p] })
		if got := strings.Fields(run(t, "rpm", "-qcp", rpm)); !slices.Equal(sorted(got), configFiles) {
			t.Errorf("rpm config files %v, want %v", got, configFiles)
		}
		scripts := run(t, "rpm", "-qp", "--scripts", rpm)
		for _, s := range []string{"postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet", "systemd-sysusers", "systemctl disable --now"} {
			if !strings.Contains(scripts, s) {
				t.Errorf("rpm scripts lack %q:\n%s", s, scripts)
			}
		}
	})
}

func sorted(s []string) []string { slices.Sort(s); return s }

// checkCopyright: the copyright file is in Debian's machine-readable
// format and names, with a license text, the Go standard library and
// every module the packaged binaries were built with.
func checkCopyright(t *testing.T, path string, binaries []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.HasPrefix(text, "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n") ||
		!strings.Contains(text, "\nFiles: *\nCopyright: The pact developers\nLicense: Apache-2.0\n") {
		t.Errorf("copyright: not DEP-5, or pact's own license missing:\n%.600s", text)
	}
	licenses := map[string]bool{}
	for _, para := range strings.Split(text, "\n\n") {
		if name, ok := strings.CutPrefix(para, "License: "); ok {
			name, body, _ := strings.Cut(name, "\n")
			licenses[name] = len(body) > 200
		}
	}
	mods := map[string]bool{"go": true}
	for _, bin := range binaries {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range info.Deps {
			mods["go-module/"+d.Path] = true
		}
	}
	if len(mods) < 20 {
		t.Fatalf("only %d modules in the binaries' build information", len(mods))
	}
	for m := range mods {
		i := strings.Index(text, "\nFiles: "+m+"/*\n")
		if i < 0 {
			t.Errorf("copyright does not name %s", m)
			continue
		}
		para, _, _ := strings.Cut(text[i+1:], "\n\n")
		_, lic, _ := strings.Cut(para, "\nLicense: ")
		lic, _, _ = strings.Cut(lic, "\n")
		if !licenses[lic] {
			t.Errorf("copyright: %s has license %q, whose text is not in the file", m, lic)
		}
	}
}

// checkInstalledMkroot: mkroot.sh as the package installs it, run with no
// UNITDIR, takes the unit and the sysusers.d file the package installs.
func checkInstalledMkroot(t *testing.T, x string) {
	t.Helper()
	root := t.TempDir()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("a CA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "sh", filepath.Join(x, "usr/share/pact/diskless/mkroot.sh"), root, filepath.Join(x, "usr/bin/pact-agent"), ca, "10.0.0.1:7443")
	for _, f := range []string{"usr/lib/systemd/system/pact-agent.service", "usr/lib/sysusers.d/pact.conf"} {
		got, err := os.ReadFile(filepath.Join(root, f))
		want, _ := os.ReadFile(filepath.Join(x, f))
		if err != nil || len(want) == 0 || string(got) != string(want) {
			t.Errorf("the installed mkroot.sh put another %s into the image: %v", f, err)
		}
	}
}

// The maintainer scripts are valid sh and handle both deb's and rpm's
// arguments for removal versus upgrade.
func TestPackageScripts(t *testing.T) {
	for _, s := range []string{"scripts/postinstall.sh", "scripts/preremove.sh", "scripts/postremove.sh"} {
		run(t, "sh", "-n", s)
	}
	b, _ := os.ReadFile("scripts/preremove.sh")
	if !regexp.MustCompile(`(?m)^remove \| 0\)`).Match(b) {
		t.Error("preremove must stop the units on deb 'remove' and rpm '0' only")
	}
}
