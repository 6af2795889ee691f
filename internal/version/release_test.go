package version_test

// The release tooling's pieces (docs/releases.md): RELEASES names commits
// of this history, CHANGELOG.md has an entry for each, make release refuses
// what it must and names the versions the Makefile stamps, and make
// release-previous says what it needs. None of this builds a release (make
// release takes minutes); TestMakeBuildStampsEveryBinary and dist's package
// tests check that a stamped version reaches the binaries and the packages.

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// semverRE is semver.org's grammar without build metadata, as
// scripts/release.sh accepts it.
var semverRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?$`)

type release struct{ version, commit string }

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// readReleases parses RELEASES: "VERSION COMMIT" lines, # comments.
func readReleases(t *testing.T, root string) []release {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "RELEASES"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rs []release
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || !semverRE.MatchString(fields[0]) || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(fields[1]) {
			t.Errorf("RELEASES:%d: %q is not \"VERSION COMMIT\" (a semantic version without a v, a full 40-digit commit)", n, line)
			continue
		}
		rs = append(rs, release{fields[0], fields[1]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 {
		t.Fatal("RELEASES records no release")
	}
	return rs
}

// compareSemver orders two semantic versions as semver.org's section 11.
func compareSemver(a, b string) int {
	ma, mb := semverRE.FindStringSubmatch(a), semverRE.FindStringSubmatch(b)
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(ma[i])
		y, _ := strconv.Atoi(mb[i])
		if x != y {
			return x - y
		}
	}
	pa, pb := ma[4], mb[4]
	switch {
	case pa == pb:
		return 0
	case pa == "":
		return 1 // a release sorts after its pre-releases
	case pb == "":
		return -1
	}
	ia, ib := strings.Split(pa, "."), strings.Split(pb, ".")
	for i := 0; i < len(ia) && i < len(ib); i++ {
		x, errx := strconv.Atoi(ia[i])
		y, erry := strconv.Atoi(ib[i])
		switch {
		case errx == nil && erry == nil && x != y:
			return x - y
		case errx == nil && erry != nil:
			return -1
		case errx != nil && erry == nil:
			return 1
		case errx != nil && erry != nil && ia[i] != ib[i]:
			return strings.Compare(ia[i], ib[i])
		}
	}
	return len(ia) - len(ib)
}

func TestCompareSemver(t *testing.T) {
	// semver.org's own example, in order.
	order := []string{"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0"}
	for i := range order {
		for j := range order {
			got := compareSemver(order[i], order[j])
			if (i < j && got >= 0) || (i == j && got != 0) || (i > j && got <= 0) {
				t.Errorf("compareSemver(%s, %s) = %d", order[i], order[j], got)
			}
		}
	}
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Every release RELEASES records is a commit of this history, an ancestor
// of what is checked out, in increasing version order: make
// release-previous builds it from there.
func TestReleasesNameCommitsOfThisHistory(t *testing.T) {
	root := repoRoot(t)
	rs := readReleases(t, root)
	for i := 1; i < len(rs); i++ {
		if compareSemver(rs[i-1].version, rs[i].version) >= 0 {
			t.Errorf("RELEASES: %s after %s: oldest first, each version above the one before", rs[i].version, rs[i-1].version)
		}
	}
	if _, err := git(root, "rev-parse", "--git-dir"); err != nil {
		t.Skip("not a git checkout: RELEASES's commits cannot be looked up")
	}
	shallow, _ := git(root, "rev-parse", "--is-shallow-repository")
	for _, r := range rs {
		if _, err := git(root, "cat-file", "-e", r.commit+"^{commit}"); err != nil {
			if shallow == "true" {
				t.Skipf("this clone is shallow and does not hold release %s's commit %s: clone with full history (or git fetch --unshallow) to check RELEASES", r.version, r.commit)
			}
			t.Errorf("RELEASES: release %s names commit %s, which is not in this repository's history", r.version, r.commit)
			continue
		}
		if _, err := git(root, "merge-base", "--is-ancestor", r.commit, "HEAD"); err != nil {
			t.Errorf("RELEASES: release %s's commit %s is not an ancestor of HEAD", r.version, r.commit)
		}
	}
}

// changelogSections returns CHANGELOG.md's "## " headings and each one's text.
func changelogSections(t *testing.T, root string) (headings []string, body map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	body = map[string]string{}
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			cur = h
			headings = append(headings, h)
			continue
		}
		if cur != "" {
			body[cur] += line + "\n"
		}
	}
	return headings, body
}

// CHANGELOG.md has an entry for every release, "## VERSION (YYYY-MM-DD)",
// newest first below "## Unreleased", each with its upgrade notes.
func TestChangelogHasEveryRelease(t *testing.T) {
	root := repoRoot(t)
	rs := readReleases(t, root)
	headings, body := changelogSections(t, root)
	headingRE := regexp.MustCompile(`^(\S+) \(\d{4}-\d{2}-\d{2}\)$`)
	var versions []string
	for i, h := range headings {
		if h == "Unreleased" {
			if i != 0 {
				t.Errorf("CHANGELOG.md: ## Unreleased is section %d; it goes first", i+1)
			}
		} else if m := headingRE.FindStringSubmatch(h); m == nil || !semverRE.MatchString(m[1]) {
			t.Errorf("CHANGELOG.md: heading %q is neither \"Unreleased\" nor \"VERSION (YYYY-MM-DD)\"", h)
			continue
		} else {
			versions = append(versions, m[1])
		}
		if !strings.Contains(body[h], "\n### Upgrading from the previous release") {
			t.Errorf("CHANGELOG.md: ## %s has no \"### Upgrading from the previous release\" section", h)
		}
	}
	for i := 1; i < len(versions); i++ {
		if compareSemver(versions[i-1], versions[i]) <= 0 {
			t.Errorf("CHANGELOG.md: %s below %s: newest first", versions[i], versions[i-1])
		}
	}
	for _, r := range rs {
		found := false
		for _, v := range versions {
			found = found || v == r.version
		}
		if !found {
			t.Errorf("CHANGELOG.md has no entry for release %s (RELEASES): add \"## %s (DATE)\" with its upgrade notes", r.version, r.version)
		}
	}
}

// runScript runs a release script and returns its exit code and output.
func runScript(t *testing.T, dir, script string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "scripts", script), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	return 0, ""
}

// make release refuses, before it builds anything, a version that is not
// semver, and says what to type instead.
func TestReleaseRefusesAVersionThatIsNotSemver(t *testing.T) {
	root := repoRoot(t)
	for _, tt := range []struct{ version, want string }{
		{"", "make release VERSION=0.2.0"},
		{"1.2", "MAJOR.MINOR.PATCH"},
		{"v1.2.3", "without the v: make release VERSION=1.2.3"},
		{"1.2.3+build.5", "make release VERSION=1.2.3"},
		{"01.2.3", "MAJOR.MINOR.PATCH"},
		{"1.2.3-rc.01", "MAJOR.MINOR.PATCH"},
		{"74e1bd4-dirty", "that is a git commit"},
	} {
		code, out := runScript(t, root, "release.sh", tt.version)
		if code != 2 || !strings.Contains(out, "is not a semantic version") || !strings.Contains(out, tt.want) {
			t.Errorf("release.sh %q: exit %d, want 2 and %q in:\n%s", tt.version, code, tt.want, out)
		}
	}
}

// The versions a release stamps come from the Makefile (make print-version),
// the one place make build and make package take them from: binaries vX,
// packages X with '~' for a pre-release's '-'.
func TestReleasePlanStampsTheMakefilesVersions(t *testing.T) {
	root := repoRoot(t)
	for _, tt := range []struct{ version, binaries, packages string }{
		{"0.2.0", "v0.2.0", "0.2.0-1"},
		{"0.2.0-rc.1", "v0.2.0-rc.1", "0.2.0~rc.1-1"},
		{"1.10.3-beta-2.x", "v1.10.3-beta-2.x", "1.10.3~beta~2.x-1"},
	} {
		code, out := runScript(t, root, "release.sh", "--plan", tt.version)
		if code != 0 {
			t.Fatalf("release.sh --plan %s: exit %d\n%s", tt.version, code, out)
		}
		for _, want := range []string{
			"binaries print  " + tt.binaries + "\n",
			"packages        " + tt.packages + "\n",
			"image           pact:" + tt.binaries + " ",
			"directory       bin/release/" + tt.version + "\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("release.sh --plan %s: no %q in:\n%s", tt.version, want, out)
			}
		}
	}
}

// scratchRepo is a git repository holding the release script and the
// Makefile (for make print-version) and the given files, committed.
func scratchRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	for _, f := range []string{"Makefile", "scripts/release.sh", "scripts/release-previous.sh"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = string(b)
	}
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "."},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "scratch"},
	} {
		if out, err := git(dir, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// make release refuses a tree that is not clean, a version released from
// another commit, and a final release CHANGELOG.md has no entry for, each
// saying what to do, before it builds anything.
func TestReleaseRefusesWhatIsNotAReleaseCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	changelog := "# Changelog\n\n## Unreleased\n\n### Upgrading from the previous release\n\n## 1.0.0 (2026-01-01)\n\n### Upgrading from the previous release\n"
	other := strings.Repeat("ab", 20)

	t.Run("dirty", func(t *testing.T) {
		dir := scratchRepo(t, map[string]string{"CHANGELOG.md": changelog})
		if err := os.WriteFile(filepath.Join(dir, "stray.go"), []byte("package stray\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out := runScript(t, dir, "release.sh", "1.1.0-rc.1")
		for _, want := range []string{"the tree is not clean", "?? stray.go", "git worktree add"} {
			if code != 2 || !strings.Contains(out, want) {
				t.Errorf("exit %d, want 2 and %q in:\n%s", code, want, out)
			}
		}
	})
	t.Run("released from another commit", func(t *testing.T) {
		dir := scratchRepo(t, map[string]string{"CHANGELOG.md": changelog, "RELEASES": "# comment\n1.0.0 " + other + "\n"})
		code, out := runScript(t, dir, "release.sh", "1.0.0")
		if code != 2 || !strings.Contains(out, "1.0.0 was released from "+other[:12]) || !strings.Contains(out, "choose the next one") {
			t.Errorf("exit %d, want 2 and the recorded commit in:\n%s", code, out)
		}
	})
	t.Run("no changelog entry", func(t *testing.T) {
		dir := scratchRepo(t, map[string]string{"CHANGELOG.md": changelog})
		code, out := runScript(t, dir, "release.sh", "1.1.0")
		if code != 2 || !strings.Contains(out, "CHANGELOG.md has no entry for 1.1.0") || !strings.Contains(out, "'## 1.1.0 (") {
			t.Errorf("exit %d, want 2 and how to add the entry in:\n%s", code, out)
		}
	})
}

// make release-previous names what it cannot build, and in a shallow clone
// without the release's commit says so and fetches nothing.
func TestReleasePreviousSaysWhatItNeeds(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root := repoRoot(t)
	code, out := runScript(t, root, "release-previous.sh", "99.0.0")
	if code != 2 || !strings.Contains(out, "RELEASES records no release 99.0.0") {
		t.Errorf("release-previous.sh 99.0.0: exit %d, want 2 and the releases recorded in:\n%s", code, out)
	}

	// A history without the recorded commit: a scratch repository
	// grafted to look shallow is what a --depth clone is.
	dir := scratchRepo(t, map[string]string{"RELEASES": "0.1.0 " + strings.Repeat("cd", 20) + "\n"})
	head, err := git(dir, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	code, out = runScript(t, dir, "release-previous.sh")
	if code != 2 || !strings.Contains(out, "is not in this repository's history") {
		t.Errorf("full history without the commit: exit %d, want 2 and a word on RELEASES in:\n%s", code, out)
	}
	if err := os.WriteFile(filepath.Join(dir, ".git", "shallow"), []byte(head+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out = runScript(t, dir, "release-previous.sh")
	if code != 2 || !strings.Contains(out, "it is shallow") || !strings.Contains(out, "git fetch --unshallow") || !strings.Contains(out, "fetches nothing") {
		t.Errorf("shallow clone: exit %d, want 2 and what to do in:\n%s", code, out)
	}
}

// printVersion is make print-version for VERSION: the stamp and the
// packages' version.
func printVersion(t *testing.T, root, version string) (stamp, pkg string) {
	t.Helper()
	out, err := exec.Command("make", "-s", "--no-print-directory", "-C", root, "print-version", "VERSION="+version).CombinedOutput()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 2 {
		t.Fatalf("make print-version VERSION=%s: %v\n%s", version, err, out)
	}
	return f[0], f[1]
}

// The packages' versions sort as the builds they come from, for dpkg and
// for rpm: a pre-release before its release, a build past a release after
// it and before the next, so installing the newer is always an upgrade.
func TestPackageVersionsSortAsTheirBuilds(t *testing.T) {
	root := repoRoot(t)
	builds := []string{
		"74e1bd4-dirty", // no release behind it (0.0.0~git...)
		"v0.1.0",
		"v0.1.0-9-gabcdef0",
		"v0.1.0-10-g0123456-dirty",
		"v0.1.0-10-g0123456",
		"v0.2.0-rc.1",
		"v0.2.0-rc.1-3-gabcdef0",
		"v0.2.0-rc.2",
		"v0.2.0",
		"v0.10.0",
	}
	var pkgs []string
	for _, b := range builds {
		_, p := printVersion(t, root, b)
		if strings.Contains(p, "-") {
			t.Errorf("VERSION=%s: package version %q has a '-' (rpm refuses it; dpkg reads it as the revision)", b, p)
		}
		pkgs = append(pkgs, p)
	}
	checked := 0
	if _, err := exec.LookPath("dpkg"); err == nil {
		checked++
		for i := 1; i < len(pkgs); i++ {
			if err := exec.Command("dpkg", "--compare-versions", pkgs[i-1], "lt", pkgs[i]).Run(); err != nil {
				t.Errorf("dpkg: %s (%s) does not sort before %s (%s)", pkgs[i-1], builds[i-1], pkgs[i], builds[i])
			}
		}
	}
	if _, err := exec.LookPath("rpm"); err == nil {
		checked++
		for i := 1; i < len(pkgs); i++ {
			out, err := exec.Command("rpm", "--eval", `%{lua: print(rpm.vercmp("`+pkgs[i-1]+`", "`+pkgs[i]+`"))}`).Output()
			if err != nil || strings.TrimSpace(string(out)) != "-1" {
				t.Errorf("rpm: %s (%s) does not sort before %s (%s): %q %v", pkgs[i-1], builds[i-1], pkgs[i], builds[i], out, err)
			}
		}
	}
	if checked < 2 && os.Getenv("CI") == "true" {
		t.Fatal("dpkg and rpm are needed to check the package versions' order (.ci/run installs them)")
	}
}

// A build with no release tag in the clone is stamped from RELEASES as git
// describe would stamp it with the tag: v0.1.0 on the release's commit,
// v0.1.0-N-gHASH past it, -dirty with changes; without RELEASES's commit
// in the history, git describe's commit.
func TestUntaggedBuildsAreStampedFromReleases(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	version := func(dir string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(dir, "scripts", "version.sh")).CombinedOutput()
		if err != nil {
			t.Fatalf("version.sh: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(dir, msg string) string {
		t.Helper()
		if out, err := git(dir, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "-m", msg); err != nil {
			t.Fatalf("git commit: %v\n%s", err, out)
		}
		h, _ := git(dir, "rev-parse", "HEAD")
		return h
	}
	dir := scratchRepo(t, map[string]string{"scripts/version.sh": mustRead(t, filepath.Join(repoRoot(t), "scripts", "version.sh"))})
	short, _ := git(dir, "rev-parse", "--short", "HEAD")
	if got := version(dir); got != short {
		t.Errorf("no RELEASES: %q, want git describe's %q", got, short)
	}
	first, _ := git(dir, "rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(dir, "RELEASES"), []byte("# releases\n0.1.0 "+first+"\n0.2.0 "+strings.Repeat("ef", 20)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := version(dir); got != "v0.1.0" {
		t.Errorf("on the release's commit (RELEASES untracked, which git describe does not count as dirty): %q, want v0.1.0", got)
	}
	if out, err := git(dir, "add", "RELEASES"); err != nil {
		t.Fatal(err, out)
	}
	commit(dir, "record 0.1.0")
	commit(dir, "more")
	short, _ = git(dir, "rev-parse", "--short", "HEAD")
	if got, want := version(dir), "v0.1.0-2-g"+short; got != want {
		t.Errorf("two commits past 0.1.0 (0.2.0's commit not in this history): %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := version(dir), "v0.1.0-2-g"+short+"-dirty"; got != want {
		t.Errorf("with a tracked file changed: %q, want %q", got, want)
	}
	if out, err := git(dir, "checkout", "-q", "--", "Makefile"); err != nil {
		t.Fatal(err, out)
	}
	if out, err := git(dir, "tag", "v0.1.1"); err != nil {
		t.Fatal(err, out)
	}
	if got := version(dir); got != "v0.1.1" {
		t.Errorf("with a release tag: %q, want git describe's v0.1.1", got)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
