package monitoringtest

import (
	"slices"
	"testing"
)

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`up{job="pact-journal"} == 0`, []string{"up"}},
		{`sum by (reason) (rate(pact_journal_auth_refused_total[5m])) > 0.2`, []string{"pact_journal_auth_refused_total"}},
		{`max(a) - on () group_right () b`, []string{"a", "b"}},
		{`sum without (instance, job) (x offset 10m) or on (instance) vector(0)`, []string{"x"}},
		{`label_replace(rate(m_total[5m]), "call", "enroll", "", "")`, []string{"m_total"}},
		{`histogram_quantile(0.99, sum by (le, op) (rate(h_bucket{op=~"a|b}"}[5m])))`, []string{"h_bucket"}},
		{`a / b > bool 0.9 and c unless d`, []string{"a", "b", "c", "d"}},
		{`topk(5, pact:journal_nodes) * 1e3 + 0x1f - Inf`, []string{"pact:journal_nodes"}},
		{`x{a='}'} # a comment with words`, []string{"x"}},
		{`max_over_time(y[1h:5m]) @ end()`, []string{"y"}},
	}
	for _, tt := range tests {
		got, err := MetricNames(tt.expr)
		if err != nil {
			t.Errorf("%s: %v", tt.expr, err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("MetricNames(%s) = %v, want %v", tt.expr, got, tt.want)
		}
	}
	for _, bad := range []string{`x{a="b}`, `rate(x[5m)`} {
		if _, err := MetricNames(bad); err == nil {
			t.Errorf("MetricNames(%s) found no error", bad)
		}
	}
}

func TestGrafanaToPromQL(t *testing.T) {
	for in, want := range map[string]string{
		`label_values(pact_journal_is_leader, instance)`:      `pact_journal_is_leader`,
		`label_values(instance)`:                              ``,
		`rate(x{instance=~"$instance"}[$__rate_interval])`:    `rate(x{instance=~".+"}[5m])`,
		`sum(y{job="${job}"})`:                                `sum(y{job=".+"})`,
		`label_values(pact_journal_nodes{job="$job"}, state)`: `pact_journal_nodes{job=".+"}`,
	} {
		if got := GrafanaToPromQL(in); got != want {
			t.Errorf("GrafanaToPromQL(%s) = %q, want %q", in, got, want)
		}
	}
}
