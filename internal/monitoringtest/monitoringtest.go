// Package monitoringtest reads the Prometheus rules and Grafana dashboards
// pact ships (dist/monitoring) and finds the metric names their queries
// use, so that the journal's and the agent's tests can check every one
// against what their real registries register: a renamed metric fails
// those tests instead of leaving a dashboard panel empty or an alert that
// can never fire.
package monitoringtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// Query is one PromQL expression the shipped files hold.
type Query struct {
	File  string // relative to dist/monitoring
	Where string // the rule or panel it belongs to
	Expr  string
}

// Shipped is what dist/monitoring holds.
type Shipped struct {
	Dir     string
	Queries []Query
	// Recorded are the names the recording rules define: a query may use
	// them like any metric.
	Recorded map[string]bool
	// Alerts are the alert names, in file order.
	Alerts []string
}

// Dir is dist/monitoring of the module the test runs in.
func Dir(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "dist", "monitoring")
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", wd)
		}
	}
}

// RuleFiles are the Prometheus rule files shipped (not their tests).
func RuleFiles(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, ".test.yml") })
	if len(files) == 0 {
		t.Fatalf("no rule files in %s", dir)
	}
	return files
}

// Dashboards are the Grafana dashboards shipped.
func Dashboards(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "grafana", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no dashboards in %s/grafana", dir)
	}
	return files
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// Load reads every rule file and dashboard of dir.
func Load(t testing.TB, dir string) *Shipped {
	t.Helper()
	s := &Shipped{Dir: dir, Recorded: map[string]bool{}}
	for _, f := range RuleFiles(t, dir) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf ruleFile
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				where := g.Name + "/" + r.Record + r.Alert
				if r.Record != "" {
					s.Recorded[r.Record] = true
				}
				if r.Alert != "" {
					s.Alerts = append(s.Alerts, r.Alert)
				}
				s.Queries = append(s.Queries, Query{File: filepath.Base(f), Where: where, Expr: r.Expr})
			}
		}
	}
	for _, f := range Dashboards(t, dir) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d any
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		s.Queries = append(s.Queries, dashboardQueries(filepath.Join("grafana", filepath.Base(f)), d)...)
	}
	return s
}

// dashboardQueries finds the queries of a dashboard: every target's expr
// and every query variable's query, wherever they are nested (rows hold
// panels).
func dashboardQueries(file string, d any) []Query {
	var out []Query
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			title, _ := v["title"].(string)
			if title == "" {
				title, _ = v["name"].(string)
			}
			if title != "" {
				path += "/" + title
			}
			if expr, ok := v["expr"].(string); ok {
				out = append(out, Query{File: file, Where: path, Expr: expr})
			}
			if v["type"] == "query" {
				switch q := v["query"].(type) {
				case string:
					out = append(out, Query{File: file, Where: path, Expr: q})
				case map[string]any:
					if s, ok := q["query"].(string); ok {
						out = append(out, Query{File: file, Where: path, Expr: s})
					}
				}
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(path, v[k])
			}
		case []any:
			for _, e := range v {
				walk(path, e)
			}
		}
	}
	walk("", d)
	return out
}

// Grafana's label_values(selector, label) and label_values(label) are not
// PromQL: the first selects series, the second none.
var (
	labelValues     = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	labelValuesOnly = regexp.MustCompile(`^\s*label_values\(\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
)

// GrafanaToPromQL turns a dashboard query into PromQL: Grafana's
// label_values(...) becomes its metric selector, and the template
// variables become what Prometheus parses in their place.
func GrafanaToPromQL(expr string) string {
	if labelValuesOnly.MatchString(expr) {
		return ""
	}
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	r := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	expr = r.Replace(expr)
	// Any other variable is used in a matcher: "$instance", "${job}".
	return regexp.MustCompile(`\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?`).ReplaceAllString(expr, ".+")
}

// Words of PromQL that are not metric names where they stand unfollowed
// by a parenthesis.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "start": true, "end": true,
	// Aggregations may take their grouping before the parenthesis.
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// grouping keywords are followed by a parenthesized list of label names.
var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// MetricNames lists the metric names a PromQL expression selects: the
// identifiers that are neither a function, a keyword, a label name (in a
// matcher or a grouping) nor part of a string, number or duration.
func MetricNames(expr string) ([]string, error) {
	var names []string
	i := 0
	skipSpace := func() {
		for i < len(expr) && strings.ContainsRune(" \t\r\n", rune(expr[i])) {
			i++
		}
	}
	skipString := func() error {
		q := expr[i]
		for i++; i < len(expr); i++ {
			if expr[i] == '\\' && q != '`' {
				i++
				continue
			}
			if expr[i] == q {
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string in %q", expr)
	}
	skipTo := func(closing byte) error {
		for i++; i < len(expr); {
			switch c := expr[i]; {
			case c == '"' || c == '\'' || c == '`':
				if err := skipString(); err != nil {
					return err
				}
			case c == closing:
				i++
				return nil
			default:
				i++
			}
		}
		return fmt.Errorf("unclosed %q in %q", closing, expr)
	}
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return nil, err
			}
		case c == '{':
			if err := skipTo('}'); err != nil {
				return nil, err
			}
		case c == '[':
			if err := skipTo(']'); err != nil {
				return nil, err
			}
		case c >= '0' && c <= '9' || c == '.':
			// A number or a duration: 0.4, 1e3, 0x1f, 10m, 1h30m.
			for i < len(expr) && (isIdentByte(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdentByte(expr[i]) {
				i++
			}
			word := expr[start:i]
			skipSpace()
			next := byte(0)
			if i < len(expr) {
				next = expr[i]
			}
			switch {
			case grouping[strings.ToLower(word)] && next == '(':
				if err := skipTo(')'); err != nil {
					return nil, err
				}
			case next == '(':
				// A function or an aggregation.
			case keywords[strings.ToLower(word)]:
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentByte(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// descName reads the fully-qualified name out of a Desc: client_golang
// exposes it only through String().
var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

// Registered is every metric name c describes (a registry describes all
// its collectors), with the histogram and summary series names for those
// whose type gathered tells (a vector without a child yet has no type).
func Registered(t testing.TB, c prometheus.Collector, gathered prometheus.Gatherer) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		m := descName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names[m[1]] = true
	}
	mfs, err := gathered.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetType().String() {
		case "HISTOGRAM", "GAUGE_HISTOGRAM":
			names[mf.GetName()+"_bucket"] = true
			fallthrough
		case "SUMMARY":
			names[mf.GetName()+"_sum"] = true
			names[mf.GetName()+"_count"] = true
		}
	}
	return names
}

// Synthesized are series Prometheus makes for every target itself.
var Synthesized = map[string]bool{"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true}

// Check fails the test for every metric name a shipped query uses that
// owns says is this test's to check and that is neither registered, nor
// recorded by a shipped rule, nor made by Prometheus. It returns how many
// names it checked, so a caller can make sure it checked something.
func Check(t testing.TB, s *Shipped, registered map[string]bool, owns func(name string) bool) int {
	t.Helper()
	checked := 0
	for _, q := range s.Queries {
		expr := q.Expr
		if strings.HasPrefix(q.File, "grafana") {
			expr = GrafanaToPromQL(expr)
		}
		names, err := MetricNames(expr)
		if err != nil {
			t.Errorf("%s %s: %v", q.File, q.Where, err)
			continue
		}
		if len(names) == 0 && expr != "" {
			t.Errorf("%s %s: %q uses no metric", q.File, q.Where, q.Expr)
		}
		for _, n := range names {
			if !owns(n) || s.Recorded[n] || Synthesized[n] {
				continue
			}
			checked++
			if !registered[n] {
				t.Errorf("%s %s uses %s, which is not registered", q.File, q.Where, n)
			}
		}
	}
	return checked
}

// variableLabels reads the variable label names out of a Desc's String().
var variableLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)

// Labelled is, for every metric c describes that has variable labels, the
// names of those labels: a vector whose series are made as they happen
// (WithLabelValues) or a collector's labelled metrics.
func Labelled(t testing.TB, c prometheus.Collector) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	out := map[string][]string{}
	for d := range ch {
		s := d.String()
		n := descName.FindStringSubmatch(s)
		v := variableLabels.FindStringSubmatch(s)
		if n == nil || v == nil {
			t.Fatalf("cannot read the name and labels of %s", s)
		}
		if v[1] == "" {
			continue
		}
		for _, l := range strings.Split(v[1], ",") {
			l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")")
			out[n[1]] = append(out[n[1]], l)
		}
	}
	return out
}

// Reads is every metric name a shipped query selects that owns says is
// the caller's (and neither a recorded rule's nor Prometheus's own), with
// where each is read.
func Reads(t testing.TB, s *Shipped, owns func(name string) bool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, q := range s.Queries {
		expr := q.Expr
		if strings.HasPrefix(q.File, "grafana") {
			expr = GrafanaToPromQL(expr)
		}
		names, err := MetricNames(expr)
		if err != nil {
			t.Errorf("%s %s: %v", q.File, q.Where, err)
			continue
		}
		for _, n := range names {
			if owns(n) && !s.Recorded[n] && !Synthesized[n] {
				out[n] = append(out[n], q.File+" "+q.Where)
			}
		}
	}
	return out
}

// Series is the value of every series of the metric name that g gathers,
// keyed by its labels as name=value pairs joined with commas in label
// name order (the empty string for a series with no label).
func Series(t testing.TB, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(pairs)
			v := m.GetUntyped().GetValue()
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			}
			out[strings.Join(pairs, ",")] = v
		}
	}
	return out
}

// Key is the Series key of a series with these labels (name, value pairs).
func Key(labels ...string) string {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+"="+labels[i+1])
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}
