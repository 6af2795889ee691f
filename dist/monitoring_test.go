package dist

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/pact-hpc/pact/internal/monitoringtest"
)

// The packages ship the rules, their tests and the dashboards, and the page
// that documents them (package_test.go checks the packages hold them).
func init() {
	maps.Copy(packageFiles, map[string]string{
		"/usr/share/pact/monitoring/prometheus/pact-rules.yml":      "-rw-r--r--",
		"/usr/share/pact/monitoring/prometheus/pact-rules.test.yml": "-rw-r--r--",
		"/usr/share/pact/monitoring/grafana/pact-quorum.json":       "-rw-r--r--",
		"/usr/share/pact/monitoring/grafana/pact-fleet.json":        "-rw-r--r--",
		"/usr/share/doc/pact/monitoring.md":                         "-rw-r--r--",
	})
}

// promtool is the pinned promtool the Makefile installs into .tools/ (make
// test and .ci/run install it); without it the rule tests fail under CI
// and are skipped elsewhere.
func promtool(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, ".tools", "promtool")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing; make test and .ci/run install it (make .tools/promtool)", p)
		}
		t.Skipf("%s is not installed (make .tools/promtool)", p)
	}
	// The binary is the pinned one: go records the module version.
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PROMTOOL_VERSION\s*\?=\s*(\S+)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile pins no PROMTOOL_VERSION")
	}
	out := run(t, "go", "version", "-m", p)
	if !regexp.MustCompile(`(?m)^\s*mod\s+github.com/prometheus/prometheus\s+` + regexp.QuoteMeta(string(m[1])) + `\s`).MatchString(out) {
		t.Fatalf("%s is not promtool %s (rm it; make .tools/promtool):\n%s", p, m[1], out)
	}
	return p
}

// The rules load, and promtool's unit tests pass on them.
func TestMonitoringRules(t *testing.T) {
	pt := promtool(t)
	dir := monitoringtest.Dir(t)
	for _, f := range monitoringtest.RuleFiles(t, dir) {
		cmd := exec.Command(pt, "check", "rules", f)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", f, err, out)
		}
	}
	cmd := exec.Command(pt, "test", "rules", "pact-rules.test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

// ruleTests is the part of a promtool test file this test reads.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name       string `yaml:"name"`
		AlertTests []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// Every alert is reproduced by a test: some series make it fire.
func TestEveryAlertIsReproduced(t *testing.T) {
	dir := monitoringtest.Dir(t)
	s := monitoringtest.Load(t, dir)
	b, err := os.ReadFile(filepath.Join(dir, "pact-rules.test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatal(err)
	}
	fired := map[string]bool{}
	for _, tc := range rt.Tests {
		for _, at := range tc.AlertTests {
			if len(at.ExpAlerts) > 0 {
				fired[at.Alertname] = true
			}
		}
	}
	if len(s.Alerts) < 20 {
		t.Fatalf("only %d alerts read from the rules", len(s.Alerts))
	}
	for _, a := range s.Alerts {
		if !fired[a] {
			t.Errorf("no test in pact-rules.test.yml makes %s fire", a)
		}
	}
	var files []string
	for _, f := range monitoringtest.RuleFiles(t, dir) {
		files = append(files, filepath.Base(f))
	}
	if !slices.Equal(rt.RuleFiles, files) {
		t.Errorf("the tests load %v, the rule files are %v", rt.RuleFiles, files)
	}
}

// anchor is the fragment GitHub (and most Markdown renderers) give a
// heading: lower case, spaces to dashes, punctuation dropped.
func anchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// docs/monitoring.md has a runbook section for every alert (the anchor its
// runbook annotation points to) and describes every dashboard panel.
func TestMonitoringDocumented(t *testing.T) {
	dir := monitoringtest.Dir(t)
	doc, err := os.ReadFile(filepath.Join(dir, "..", "..", "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{2,4} (.+)$`).FindAllSubmatch(doc, -1) {
		anchors[anchor(string(m[1]))] = true
	}
	for _, f := range monitoringtest.RuleFiles(t, dir) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `yaml:"alert"`
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatal(err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				rb := r.Annotations["runbook"]
				frag, ok := strings.CutPrefix(rb, "docs/monitoring.md#")
				if !ok {
					t.Errorf("%s: runbook %q is not a section of docs/monitoring.md", r.Alert, rb)
					continue
				}
				if !anchors[frag] {
					t.Errorf("%s: docs/monitoring.md has no section #%s", r.Alert, frag)
				}
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: a summary and a description are required", r.Alert)
				}
			}
		}
	}
	for _, f := range monitoringtest.Dashboards(t, dir) {
		for _, p := range panels(t, f) {
			if p.Type == "row" {
				if !strings.Contains(string(doc), p.Title) {
					t.Errorf("%s: docs/monitoring.md does not name the row %q", filepath.Base(f), p.Title)
				}
				continue
			}
			if !strings.Contains(string(doc), "**"+p.Title+"**") {
				t.Errorf("%s: docs/monitoring.md does not describe the panel **%s**", filepath.Base(f), p.Title)
			}
			if p.Description == "" {
				t.Errorf("%s: panel %q has no description", filepath.Base(f), p.Title)
			}
		}
	}
}

type panel struct {
	Type, Title, Description string
	Datasource               struct{ UID string }
	Targets                  []struct {
		Expr       string
		Datasource struct{ UID string }
	}
	Panels []panel
}

func panels(t *testing.T, file string) []panel {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID, Title string
		Panels     []panel
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: a dashboard needs a uid and a title", file)
	}
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(out) < 10 {
		t.Fatalf("%s: only %d panels", file, len(out))
	}
	return out
}

// Every dashboard query is PromQL Prometheus parses (with Grafana's
// variables filled in), and every panel queries the datasource variable.
func TestDashboardQueriesParse(t *testing.T) {
	pt := promtool(t)
	dir := monitoringtest.Dir(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	n := 0
	for _, q := range monitoringtest.Load(t, dir).Queries {
		if !strings.HasPrefix(q.File, "grafana") {
			continue
		}
		expr := monitoringtest.GrafanaToPromQL(q.Expr)
		if expr == "" {
			continue
		}
		n++
		quoted, _ := json.Marshal(expr)
		fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", n, quoted)
	}
	if n < 20 {
		t.Fatalf("only %d dashboard queries", n)
	}
	f := filepath.Join(t.TempDir(), "dashboards.yml")
	if err := os.WriteFile(f, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(pt, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("the dashboards' queries do not parse: %v\n%s", err, out)
	}
	for _, file := range monitoringtest.Dashboards(t, dir) {
		for _, p := range panels(t, file) {
			if p.Type == "row" {
				continue
			}
			if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has datasource %q and %d queries", filepath.Base(file), p.Title, p.Datasource.UID, len(p.Targets))
			}
			for _, tg := range p.Targets {
				if tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: a query of panel %q has datasource %q", filepath.Base(file), p.Title, tg.Datasource.UID)
				}
			}
		}
	}
}
