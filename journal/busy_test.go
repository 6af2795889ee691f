package journal_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// clientHello is a real TLS ClientHello record for serverName.
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		_ = tls.Client(client, &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS13}).Handshake()
		client.Close()
	}()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(server, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(server, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// A journal whose handshake slots are all taken answers a new client busy,
// before any cryptography: pact's client credentials turn the answer into
// a *transport.BusyError carrying the retry-after (and apierr sees it), a plain
// TLS client fails at once on a record that is no TLS, and the journal
// counts the answers.
func TestSaturatedJournalAnswersBusy(t *testing.T) {
	cfg := journaltest.Config(t.TempDir())
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.Connections.MaxHandshakes = 1
	// Answer busy whenever no slot is free: no queue.
	cfg.Connections.HandshakeQueueWait = 0
	// The held handshake below keeps its slot until this timeout, far
	// longer than the test.
	cfg.Connections.HandshakeTimeout = 50 * time.Second
	h := journaltest.Start(t, cfg)

	// Hold the only slot: a ClientHello, and then silence. The journal
	// answers it and waits for the client's Finished.
	held := dialFrom(t, "127.0.5.1", h.Addr)
	if _, err := held.Write(clientHello(t, "127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	// The journal's flight (ServerHello...Finished) says the slot is taken.
	if _, err := held.Read(make([]byte, 1)); err != nil {
		t.Fatalf("the held handshake got no answer: %v", err)
	}

	// pact's credentials: a typed error with the retry-after: at the
	// optimistic first rate (10 handshakes a second for one slot), one
	// handshake's time, plus at most 20 ms of jitter.
	creds := channel.NewClientCredentials(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: h.Roots})
	conn, err := grpc.NewClient("passthrough:///"+h.Addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = pactv1.NewEnrollmentServiceClient(conn).Ping(ctx, &pactv1.PingRequest{})
	err = creds.Explain(err)
	var busy *transport.BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("Ping at a saturated journal: %v, want a *transport.BusyError", err)
	}
	if busy.RetryAfter < 100*time.Millisecond || busy.RetryAfter > 120*time.Millisecond {
		t.Errorf("retry-after %v, want 100-120ms", busy.RetryAfter)
	}
	if ra := apierr.FromError(err).RetryAfter; ra != busy.RetryAfter {
		t.Errorf("apierr.FromError sees a retry-after of %v, want %v", ra, busy.RetryAfter)
	}

	// A plain TLS client (an old agent, openssl s_client) fails at once:
	// the busy line is no TLS record.
	_, err = tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", h.Addr, &tls.Config{RootCAs: h.Roots, ServerName: "127.0.0.1"})
	if err == nil || !strings.Contains(err.Error(), "does not look like a TLS handshake") {
		t.Fatalf("plain TLS client: %v, want the record-header error", err)
	}
	// And a person reading the port sees the line.
	c := dialFrom(t, "127.0.5.2", h.Addr)
	if _, err := c.Write(clientHello(t, "127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := io.ReadAll(c)
	if _, perr := transport.ParseBusy(line); err != nil || perr != nil {
		t.Fatalf("raw answer %q (%v): %v", line, err, perr)
	}
	if m := `pact_journal_connections_busy_total{port="grpc"} 3`; !strings.Contains(scrape(t, h), m) {
		t.Fatalf("/metrics lacks %s", m)
	}
}
