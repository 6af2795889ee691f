package journal

import "github.com/prometheus/client_golang/prometheus"

// MetricsRegistry is the journal's Prometheus registry: the monitoring
// tests read what it registers (dist/monitoring names nothing else) and
// its counters after the journal stopped serving /metrics.
func (j *Journal) MetricsRegistry() *prometheus.Registry { return j.metrics.reg }
