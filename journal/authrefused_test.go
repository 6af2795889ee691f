package journal_test

import (
	"bytes"
	"crypto/ecdsa"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// scrape returns the journal's /metrics.
func scrape(t testing.TB, h *journaltest.Harness) string {
	t.Helper()
	resp, err := http.Get("http://" + h.J.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// Refused authentications are counted by reason and logged, with the
// caller's SPIFFE ID, serial and address and never its key, as a warning at
// most once a minute per reason, certificate and host (the repeats at debug
// level, counted in the next warning).
func TestAuthRefusedCountedAndLogged(t *testing.T) {
	logs := &lockedBuffer{}
	e := newSPIREEnv(t, func(c *journal.Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	now := e.fc.Now()
	e.register(t, "n1", "SN1", mac1)
	rogue := newSPIRECA(t, "pact.local", now)
	other := newSPIRECA(t, "other.org", now)
	forged := rogue.issue(t, now.Add(-time.Minute), now.Add(time.Hour), agentID("n1"))
	foreign := other.issue(t, now.Add(-time.Minute), now.Add(time.Hour), "spiffe://other.org/pact-agent/n1")
	unmapped := e.ca.issue(t, now.Add(-time.Minute), now.Add(time.Hour), agentID("ghost"))
	early := e.ca.issue(t, now.Add(time.Hour), now.Add(2*time.Hour), agentID("n1"))

	tests := []struct {
		name   string
		s      svid
		times  int
		reason apierr.Reason
		code   codes.Code
	}{
		{"forged SPIRE CA", forged, 3, apierr.SPIREBundleUntrusted, codes.Unauthenticated},
		{"foreign trust domain", foreign, 1, apierr.TrustDomainNotAccepted, codes.Unauthenticated},
		{"unmapped SPIFFE ID", unmapped, 2, apierr.SPIFFEIDUnmapped, codes.PermissionDenied},
		{"clock skew", early, 1, apierr.CertNotYetValid, codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range tt.times {
				_, err := e.ping(t, tt.s.agent(""))
				wantErr(t, err, tt.code, tt.reason)
			}
			body := scrape(t, e.h)
			want := `pact_journal_auth_refused_total{reason="` + string(tt.reason) + `"} ` + string(rune('0'+tt.times))
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
			var warns, debugs []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if !strings.Contains(line, `msg="authentication refused"`) || !strings.Contains(line, "serial="+tt.s.serial()) {
					continue
				}
				if strings.Contains(line, "level=WARN") {
					warns = append(warns, line)
				} else {
					debugs = append(debugs, line)
				}
			}
			if len(warns) != 1 || len(debugs) != tt.times-1 {
				t.Fatalf("%d warnings and %d debug lines for %d refusals, want 1 and %d:\n%s", len(warns), len(debugs), tt.times, tt.times-1, logs.String())
			}
			for _, want := range []string{"reason=" + string(tt.reason), "spiffe_id=" + tt.s.leaf.URIs[0].String(), "source=127.0.0.1:", "method=Ping"} {
				if !strings.Contains(warns[0], want) {
					t.Errorf("log line lacks %q: %s", want, warns[0])
				}
			}
		})
	}

	// A minute later the next refusal of the same kind warns again and
	// says how many were held back.
	e.tick(t, time.Minute)
	_, err := e.ping(t, forged.agent(""))
	wantErr(t, err, codes.Unauthenticated, apierr.SPIREBundleUntrusted)
	if !strings.Contains(logs.String(), "suppressed=2") {
		t.Errorf("the warning after the quiet minute does not count the 2 held back:\n%s", logs.String())
	}
	for _, tt := range tests {
		raw, err := tt.s.cert.PrivateKey.(*ecdsa.PrivateKey).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		d := new(big.Int).SetBytes(raw) // the private scalar as a number
		for _, secret := range []string{d.Text(16), d.String()} {
			if strings.Contains(logs.String(), secret) {
				t.Fatalf("the journal's log holds the private key of the %s SVID", tt.name)
			}
		}
	}
}
