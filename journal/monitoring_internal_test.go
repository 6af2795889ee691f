package journal

import (
	"testing"
)

// Node certificates: the earliest expiry, overdue past five sixths of each
// one's own lifetime (a 3-day certificate and a 1-hour SVID alike), expired.
func TestNodeCertExpiry(t *testing.T) {
	const now = 1_000_000
	e := nodeCertExpiry{now: now}
	day := int64(24 * 3600)
	e.add(now-day, now+2*day)       // a 3-day certificate, a day in: fine
	e.add(now-3*day+3600, now+3600) // a 3-day certificate, an hour left: overdue
	e.add(now-1800, now+1800)       // a 1-hour SVID, half left: fine
	e.add(now-3060, now+540)        // a 1-hour SVID, 9 minutes left: overdue (a sixth is 10)
	e.add(now-3*day-60, now-60)     // expired a minute ago
	if e.overdue != 2 || e.expired != 1 || e.earliest != now-60 {
		t.Errorf("overdue %d, expired %d, earliest %d; want 2, 1, %d", e.overdue, e.expired, e.earliest, now-60)
	}
}
