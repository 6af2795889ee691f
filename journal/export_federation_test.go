package journal

import (
	"crypto/tls"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ServerCertificate is the journal's current server certificate and key:
// what a hostile federated domain holds of its own journals.
func (j *Journal) ServerCertificate() *tls.Certificate { return j.ca.ServerCertificate() }

// FederationFailures is the failed-fetch counter of one federated domain.
func (j *Journal) FederationFailures(domain string) prometheus.Counter {
	return j.federation.failures.WithLabelValues(domain)
}

// SetFederationRefreshFloor lowers the shortest refresh interval of the
// federated bundles (30s) so a test sees several refreshes.
func (j *Journal) SetFederationRefreshFloor(d time.Duration) { j.federation.floor.Store(int64(d)) }
