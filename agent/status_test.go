package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// secretsOf returns text forms of the live identity's private key that must
// never appear in any output.
func secretsOf(t *testing.T, a *Agent) []string {
	t.Helper()
	key, ok := a.rot.Active().Identity().Key.(*ecdsa.PrivateKey)
	if !ok {
		t.Fatal("the agent's key is not ECDSA")
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := key.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	return []string{
		"PRIVATE KEY",
		strings.Split(pemKey, "\n")[1][:40],
		fmt.Sprintf("%x", d),
		new(big.Int).SetBytes(d).String(),
	}
}

func TestStatusSocketAndCommand(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.StatusSocket = filepath.Join(t.TempDir(), "run", "pact", "agent.sock") // directory made by the agent
	r := runAgent(t, cfg)
	eventually(t, "n1 is ready", func() bool { return r.Status().Ready })
	id := r.rot.Active().Identity()

	fi, err := os.Stat(cfg.StatusSocket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("status socket mode %v, want a socket with 0600", fi.Mode())
	}

	// pact-agent status (agent/agentmain) is ReadStatus then PrintStatus
	// or JSON; its exit codes are tested there.
	read, err := ReadStatus(context.Background(), cfg.StatusSocket)
	if err != nil {
		t.Fatalf("ReadStatus: %v", err)
	}
	var out bytes.Buffer
	if err := PrintStatus(&out, read); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	t.Logf("pact-agent status:\n%s", table)
	for _, want := range []string{"ready:", "yes", "source:", "journal", "node:", "n1", "serial:", id.Serial(),
		"not after:", id.NotAfter.UTC().Format(time.RFC3339), "last rotation:", "stream:", "open", h.Addr, "j1", "last failure:", id.SPIFFEID} {
		if !strings.Contains(table, want) {
			t.Errorf("status table lacks %q", want)
		}
	}

	out.Reset()
	if err := json.NewEncoder(&out).Encode(read); err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, out.String())
	}
	if st.Source != "journal" || st.NodeID != "n1" || st.Serial != id.Serial() || !st.NotAfter.Equal(id.NotAfter) ||
		st.SPIFFEID != "spiffe://pact.local/pact-agent/n1" || !st.StreamConnected || st.Journal != h.Addr || st.JournalID != "j1" ||
		st.LastRotation.IsZero() || st.NextRenewal.IsZero() || !st.Ready {
		t.Errorf("status JSON %+v", st)
	}
	var raw map[string]any
	_ = json.Unmarshal(out.Bytes(), &raw)
	for _, k := range []string{"source", "node_id", "serial", "not_after", "spiffe_id", "last_rotation", "last_failure_reason", "stream_connected", "journal"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("status JSON lacks %q", k)
		}
	}

	for _, secret := range secretsOf(t, r.Agent) {
		if strings.Contains(table, secret) || strings.Contains(out.String(), secret) {
			t.Fatalf("status output contains key material (%q)", secret)
		}
	}

	if _, err := ReadStatus(context.Background(), filepath.Join(t.TempDir(), "none.sock")); err == nil || !strings.Contains(err.Error(), "no agent answers") {
		t.Errorf("status without an agent: %v", err)
	}
}

func TestMetricsAndProbes(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.MetricsListen = "127.0.0.1:0"
	r := runAgent(t, cfg)
	eventually(t, "n1 is ready", func() bool { return r.Status().Ready && r.MetricsAddr() != "" })
	base := "http://" + r.MetricsAddr()

	body := httpGet(t, base+"/metrics", http.StatusOK)
	series := parseMetrics(body)
	id := r.rot.Active().Identity()
	expiry := series["pact_agent_cert_expiry_seconds"]
	if want := time.Until(id.NotAfter).Seconds(); expiry < want-60 || expiry > want+1 {
		t.Errorf("pact_agent_cert_expiry_seconds = %v, want about %v", expiry, want)
	}
	if v := series["pact_agent_cert_renewal_attempts_total"]; v < 2 { // an enrollment and a connection
		t.Errorf("pact_agent_cert_renewal_attempts_total = %v, want at least 2", v)
	}
	if v, ok := series[`pact_agent_cert_renewal_failures_total{reason="endpoint_unreachable"}`]; !ok || v != 0 {
		t.Errorf("failures{endpoint_unreachable} = %v (present %v), want a zero series", v, ok)
	}
	for src, want := range map[string]float64{"journal": 1, "spire": 0, "static": 0} {
		if v, ok := series[`pact_agent_identity_source{source="`+src+`"}`]; !ok || v != want {
			t.Errorf("pact_agent_identity_source{source=%q} = %v (present %v), want %v", src, v, ok, want)
		}
	}
	if v := series["pact_agent_last_successful_stream_timestamp_seconds"]; time.Since(time.Unix(int64(v), 0)) > time.Minute {
		t.Errorf("pact_agent_last_successful_stream_timestamp_seconds = %v, not about now", v)
	}
	for _, secret := range secretsOf(t, r.Agent) {
		if strings.Contains(body, secret) {
			t.Fatalf("/metrics contains key material (%q)", secret)
		}
	}
	httpGet(t, base+"/healthz", http.StatusOK)
	httpGet(t, base+"/readyz", http.StatusOK)

	// Without a stream the agent is not ready, and says why.
	if err := h.J.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "readyz turns 503", func() bool { return get(t, base+"/readyz") == http.StatusServiceUnavailable })
	httpGet(t, base+"/healthz", http.StatusOK)
	stalled := parseMetrics(httpGet(t, base+"/metrics", http.StatusOK))
	if v := stalled["pact_agent_last_successful_stream_timestamp_seconds"]; v == 0 || v > float64(time.Now().Unix())+1 {
		t.Errorf("last stream timestamp %v after the journal went away", v)
	}
	eventually(t, "failures are counted", func() bool {
		m := parseMetrics(httpGet(t, base+"/metrics", http.StatusOK))
		var n float64
		for k, v := range m {
			if strings.HasPrefix(k, "pact_agent_cert_renewal_failures_total{") {
				n += v
			}
		}
		return n > 0
	})
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func httpGet(t *testing.T, url string, want int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %s, want %d: %s", url, resp.Status, want, b)
	}
	return string(b)
}

// parseMetrics reads the text exposition format: series (name and labels as
// printed) to value.
func parseMetrics(body string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// syncBuffer is a log sink several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Enrollment, renewal and their logs at debug level never show a key.
func TestLogsHoldNoKeyMaterial(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	fc := fakeclock.New(time.Now())
	var logs syncBuffer
	cfg := agentConfig(h, fc, "SN1", mac1)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := runAgent(t, cfg)
	eventually(t, "n1 is ready", func() bool { return r.Status().Ready })
	secrets := secretsOf(t, r.Agent)
	first := r.Status()
	fc.Advance(first.NotAfter.Sub(fc.Now()) * 9 / 10)
	eventually(t, "the certificate is renewed", func() bool {
		st := r.Status()
		return st.Ready && st.Serial != first.Serial
	})
	secrets = append(secrets, secretsOf(t, r.Agent)...)
	out := logs.String()
	if !strings.Contains(out, first.Serial) || !strings.Contains(out, "certificate renewed") {
		t.Fatalf("the logs lack the renewal; the check would pass vacuously:\n%s", out)
	}
	for _, secret := range secrets {
		if strings.Contains(out, secret) {
			t.Fatalf("the logs contain key material (%q)", secret)
		}
	}
}
