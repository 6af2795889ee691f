package main

// The journals' connection timings during a storm: where a connection
// spent its time before it was served (the wait for a handshake slot, the
// TLS handshake, accept to first call; pact_journal_handshake_slot_wait_seconds,
// pact_journal_handshake_seconds, pact_journal_first_call_seconds, by
// port), summed over the journals, as the difference of their histograms
// before and after the storm.

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pact-hpc/pact/journal/connlimit"
)

// timingMetrics are the histograms read, by the short name the report
// gives each.
var timingMetrics = []struct{ short, name string }{
	{"slot_wait", "pact_journal_handshake_slot_wait_seconds"},
	{"handshake", "pact_journal_handshake_seconds"},
	{"first_call", "pact_journal_first_call_seconds"},
}

// histograms are cumulative bucket counts by short name, port and upper
// bound (seconds; +Inf included).
type histograms map[string]map[string]map[float64]float64

// parseTimings reads the timing histograms of one /metrics text into h,
// adding to what h holds (the journals are summed).
func parseTimings(h histograms, text string) {
	for _, line := range strings.Split(text, "\n") {
		for _, m := range timingMetrics {
			rest, ok := strings.CutPrefix(line, m.name+"_bucket{")
			if !ok {
				continue
			}
			labels, value, ok := strings.Cut(rest, "} ")
			if !ok {
				continue
			}
			port, le := labelValue(labels, "port"), labelValue(labels, "le")
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil || port == "" {
				continue
			}
			v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
			if err != nil {
				continue
			}
			if h[m.short] == nil {
				h[m.short] = map[string]map[float64]float64{}
			}
			if h[m.short][port] == nil {
				h[m.short][port] = map[float64]float64{}
			}
			h[m.short][port][bound] += v
		}
	}
}

func labelValue(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// timingFigure is one histogram's figures over a storm: how many were
// observed, and the median and 99th percentile in milliseconds,
// interpolated within their bucket as Prometheus's histogram_quantile
// does (a percentile in the last bucket, past 15 s, is its lower bound).
type timingFigure struct {
	Count float64 `json:"count"`
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
}

// timingsDelta is the figures of after minus before, by port and short
// name; ports with nothing observed are left out.
func timingsDelta(before, after histograms) map[string]map[string]timingFigure {
	out := map[string]map[string]timingFigure{}
	for short, ports := range after {
		for port, buckets := range ports {
			delta := map[float64]float64{}
			for b, v := range buckets {
				delta[b] = v - before[short][port][b]
			}
			fig, ok := figureOf(delta)
			if !ok {
				continue
			}
			if out[port] == nil {
				out[port] = map[string]timingFigure{}
			}
			out[port][short] = fig
		}
	}
	return out
}

func figureOf(cum map[float64]float64) (timingFigure, bool) {
	bounds := make([]float64, 0, len(cum))
	for b := range cum {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return timingFigure{}, false
	}
	total := cum[bounds[len(bounds)-1]]
	if total <= 0 {
		return timingFigure{}, false
	}
	q := func(p float64) float64 {
		rank := p * total
		lower, below := 0.0, 0.0
		for _, b := range bounds {
			if cum[b] >= rank {
				if math.IsInf(b, 1) {
					return lower
				}
				in := cum[b] - below
				if in <= 0 {
					return b
				}
				return lower + (b-lower)*(rank-below)/in
			}
			lower, below = b, cum[b]
		}
		return lower
	}
	return timingFigure{Count: total, P50ms: round(1000*q(0.5), 2), P99ms: round(1000*q(0.99), 2)}, true
}

// timingLine is the figures in one line of the log, port by port.
func timingLine(t map[string]map[string]timingFigure) string {
	var parts []string
	for _, port := range slices.Sorted(maps.Keys(t)) {
		var f []string
		for _, m := range timingMetrics {
			if fig, ok := t[port][m.short]; ok {
				f = append(f, fmt.Sprintf("%s p50 %.1f ms p99 %.1f ms (%.0f)", m.short, fig.P50ms, fig.P99ms, fig.Count))
			}
		}
		parts = append(parts, port+": "+strings.Join(f, ", "))
	}
	if len(parts) == 0 {
		return "none observed"
	}
	return strings.Join(parts, "; ")
}

// timingsText is t in the text format of a journal's /metrics, as port's
// (the floor's stubs serve it: their limiter is the journal's).
func timingsText(port string, t connlimit.Timings) string {
	var b strings.Builder
	for _, m := range timingMetrics {
		var h connlimit.Histogram
		switch m.short {
		case "slot_wait":
			h = t.SlotWait
		case "handshake":
			h = t.Handshake
		case "first_call":
			h = t.FirstCall
		}
		for _, bound := range slices.Sorted(maps.Keys(h.Buckets)) {
			fmt.Fprintf(&b, "%s_bucket{port=%q,le=\"%g\"} %d\n", m.name, port, bound, h.Buckets[bound])
		}
		fmt.Fprintf(&b, "%s_bucket{port=%q,le=\"+Inf\"} %d\n", m.name, port, h.Count)
	}
	return b.String()
}

// timings reads every journal's timing histograms, summed.
func (c *cluster) timings() histograms {
	h := histograms{}
	for i := range c.journals {
		if m, err := c.metrics(i); err == nil {
			parseTimings(h, m)
		}
	}
	return h
}
