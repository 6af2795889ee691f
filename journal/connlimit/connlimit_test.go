package connlimit_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/connlimit"
)

func newLimiter(t *testing.T, mutate func(*connlimit.Config)) *connlimit.Limiter {
	t.Helper()
	cfg := connlimit.DefaultConfig()
	mutate(&cfg)
	l, err := connlimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// dialFrom connects to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closed c (EOF or reset) within
// d rather than leaving it open. A read returns as soon as the server
// closes, so a test that expects a close passes a generous d (a hang
// guard that load cannot trip); one that expects c to stay open can only
// watch it for a while.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// closedByServer waits, bounded by a hang guard, for the server to close c.
func closedByServer(c net.Conn) bool { return closedWithin(c, 30*time.Second) }

// keptOpen reports whether c is still open after the server had a second
// to close it.
func keptOpen(c net.Conn) bool { return !closedWithin(c, time.Second) }

func TestAcceptEnforcesPerSourceAndTotalCaps(t *testing.T) {
	l := newLimiter(t, func(c *connlimit.Config) { c.MaxConnsPerSource = 2; c.MaxConns = 3 })
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := l.Listener(raw)
	defer lis.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := raw.Addr().String()
	// Every connection accepted finishes its handshake at once, so none
	// can be evicted: the total cap refuses.
	handshaken := func() net.Conn {
		c := <-accepted
		if err := c.SetDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a1, a2 := dialFrom(t, "127.0.0.1", addr), dialFrom(t, "127.0.0.1", addr)
	got := []net.Conn{handshaken(), handshaken()}
	a3 := dialFrom(t, "127.0.0.1", addr) // third from the same source
	if !closedByServer(a3) {
		t.Fatal("a third connection from one source was not closed")
	}
	b1 := dialFrom(t, "127.0.0.2", addr) // another source: under both caps
	got = append(got, handshaken())
	b2 := dialFrom(t, "127.0.0.3", addr) // the fourth in all
	if !closedByServer(b2) {
		t.Fatal("a connection over the total cap was not closed")
	}
	for _, c := range []net.Conn{a1, a2, b1} {
		if !keptOpen(c) {
			t.Fatal("a connection under the caps was closed")
		}
	}
	st := l.Stats()
	if st.Open != 3 || st.RefusedPerSource != 1 || st.RefusedTotal != 1 {
		t.Fatalf("stats %+v, want 3 open, 1 refused per source, 1 over the total", st)
	}
	// Closing gives the place back (twice closing gives it back once).
	got[0].Close()
	got[0].Close()
	a4 := dialFrom(t, "127.0.0.1", addr)
	<-accepted
	if !keptOpen(a4) {
		t.Fatal("a connection after a close was refused")
	}
	if st := l.Stats(); st.Open != 3 || st.Evicted != 0 {
		t.Fatalf("stats %+v after one close and one accept, want 3 open and none evicted", st)
	}
}

func TestHandshakeSlotsAreTakenOnlyAfterTheClientHello(t *testing.T) {
	// A client that finds every slot taken for the whole queue wait is
	// refused (the slot is held throughout, so the short wait decides
	// nothing but how long the test takes).
	busy := newLimiter(t, func(c *connlimit.Config) { c.MaxHandshakes = 1; c.HandshakeQueueWait = 50 * time.Millisecond })
	held, err := busy.AcquireHandshake()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := busy.AcquireHandshake(); !errors.Is(err, connlimit.ErrHandshakesBusy) {
		t.Fatalf("second slot: %v, want ErrHandshakesBusy", err)
	}
	if st := busy.Stats(); st.Handshakes != 1 || st.RefusedBusy != 1 {
		t.Fatalf("stats %+v, want 1 handshake in progress and 1 refused", st)
	}
	held()
	held() // idempotent
	if st := busy.Stats(); st.Handshakes != 0 {
		t.Fatalf("stats %+v after a double release, want no handshake in progress", st)
	}

	// A slot freed while a client waits goes to it. The queue wait is far
	// longer than the test can take: the waiting client must not give up
	// before the release however slowly this goroutine runs.
	l := newLimiter(t, func(c *connlimit.Config) {
		c.MaxHandshakes = 1
		c.HandshakeTimeout, c.HandshakeQueueWait = time.Minute, 50*time.Second
	})
	release, err := l.AcquireHandshake()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := l.AcquireHandshake()
		if err == nil {
			r()
		}
		got <- err
	}()
	release()
	if err := <-got; err != nil {
		t.Fatalf("a waiting client did not get the freed slot: %v", err)
	}
	if st := l.Stats(); st.Handshakes != 0 || st.RefusedBusy != 0 {
		t.Fatalf("stats %+v, want no handshake in progress and none refused", st)
	}

	// A real TLS handshake goes through AwaitHello's replay intact.
	cert := selfSigned(t)
	client, server := net.Pipe()
	done := make(chan error, 1)
	go func() {
		pc, err := connlimit.AwaitHello(server)
		if err != nil {
			done <- err
			return
		}
		done <- tls.Server(pc, &tls.Config{Certificates: []tls.Certificate{cert}}).Handshake()
	}()
	tc := tls.Client(client, &tls.Config{InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server handshake after AwaitHello: %v", err)
	}

	// Bytes that are no TLS record are refused without a handshake.
	client, server = net.Pipe()
	go func() { _, _ = io.WriteString(client, "GET / HTTP/1.1\r\n\r\n") }()
	if _, err := connlimit.AwaitHello(server); !errors.Is(err, connlimit.ErrNotTLS) {
		t.Fatalf("plain HTTP: %v, want ErrNotTLS", err)
	}
	// A silent client is bounded by the connection's deadline.
	client, server = net.Pipe()
	defer client.Close()
	_ = server.SetDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := connlimit.AwaitHello(server); err == nil || !strings.Contains(err.Error(), "ClientHello") {
		t.Fatalf("silent client: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*connlimit.Config)
		want   string
	}{
		{"per source", func(c *connlimit.Config) { c.MaxConnsPerSource = 0 }, "MaxConnsPerSource"},
		{"total below per source", func(c *connlimit.Config) { c.MaxConns = 4; c.MaxConnsPerSource = 8 }, "MaxConns 4"},
		{"handshakes", func(c *connlimit.Config) { c.MaxHandshakes = 0 }, "MaxHandshakes"},
		{"timeout", func(c *connlimit.Config) { c.HandshakeTimeout = 120 * time.Second }, "HandshakeTimeout"},
		{"queue wait", func(c *connlimit.Config) { c.HandshakeQueueWait = c.HandshakeTimeout }, "HandshakeQueueWait"},
		{"retry-after below the queue wait", func(c *connlimit.Config) { c.MaxRetryAfter = c.HandshakeQueueWait / 2 }, "MaxRetryAfter"},
		{"near answers", func(c *connlimit.Config) { c.NearAnswers = -1 }, "NearAnswers"},
		{"vouch for", func(c *connlimit.Config) { c.VouchFor = time.Millisecond }, "VouchFor"},
		{"max vouched", func(c *connlimit.Config) { c.MaxVouched = 1 }, "MaxVouched"},
		{"vouched handshakes", func(c *connlimit.Config) { c.VouchedHandshakes = -1 }, "VouchedHandshakes"},
		{"prove within", func(c *connlimit.Config) { c.ProveWithin = time.Millisecond }, "ProveWithin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := connlimit.DefaultConfig()
			tc.mutate(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if err := connlimit.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// FuzzAwaitHello: whatever a client sends first, AwaitHello either refuses
// it or hands on a connection that reads back exactly what was sent.
func FuzzAwaitHello(f *testing.F) {
	f.Add([]byte{22, 3, 1, 0, 5, 1, 0, 0, 1, 0, 'x'})
	f.Add([]byte{22, 3, 1, 0x40, 0x01})
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add([]byte{22, 3, 3, 0, 0})
	f.Fuzz(func(t *testing.T, sent []byte) {
		client, server := net.Pipe()
		go func() {
			_, _ = client.Write(sent)
			client.Close()
		}()
		_ = server.SetDeadline(time.Now().Add(5 * time.Second))
		c, err := connlimit.AwaitHello(server)
		if err != nil {
			server.Close()
			return
		}
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) != string(sent) {
			t.Fatalf("read back %x, sent %x", got, sent)
		}
		if len(sent) < 5 || sent[0] != 22 {
			t.Fatalf("accepted %x, which starts with no TLS handshake record header", sent)
		}
		if n := int(sent[3])<<8 | int(sent[4]); len(sent) < 5+n || n == 0 || n > 1<<14 {
			t.Fatalf("accepted %x without a whole first record", sent)
		}
	})
}

// AdmitHandshake over loopback TCP: with the only slot taken and no queue,
// a client's real ClientHello is answered with the busy line (which the
// client side of internal/transport reads as a retry-after) and the connection
// half-closed; once the slot is free, the next client's TLS handshake goes
// through the replayed ClientHello.
func TestAdmitHandshakeAnswersBusyOrReplaysTheHello(t *testing.T) {
	l := newLimiter(t, func(c *connlimit.Config) { c.MaxHandshakes = 1; c.HandshakeQueueWait = 0 })
	cert := selfSigned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serve := func() chan error {
		done := make(chan error, 1)
		go func() {
			raw, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer raw.Close()
			hello, release, err := l.AdmitHandshake(raw)
			if err != nil {
				done <- err
				return
			}
			err = tls.Server(hello, &tls.Config{Certificates: []tls.Certificate{cert}}).Handshake()
			release(err == nil)
			done <- err
		}()
		return done
	}

	held, err := l.AcquireHandshake()
	if err != nil {
		t.Fatal(err)
	}
	done := serve()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	err = tls.Client(transport.BusyAware(c), &tls.Config{InsecureSkipVerify: true}).Handshake()
	c.Close()
	var busy *transport.BusyError
	if !errors.As(err, &busy) || busy.RetryAfter <= 0 {
		t.Fatalf("client of a full journal: %v, want a busy answer with a retry-after", err)
	}
	var served *connlimit.BusyError
	if err := <-done; !errors.As(err, &served) {
		t.Fatalf("server side: %v, want *connlimit.BusyError", err)
	}

	held()
	done = serve()
	c, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake(); err != nil {
		t.Fatalf("client once a slot is free: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server handshake after AdmitHandshake: %v", err)
	}
	if st := l.Stats(); st.Handshakes != 0 {
		t.Fatalf("stats %+v: the slot was not given back", st)
	}
}

// A client's time in the handshake queue is the journal's: once it has
// its slot, its handshake gets the whole HandshakeTimeout, whatever of the
// caller's deadline (set at the accept, as gRPC's ConnectionTimeout) the
// queue used up. Here the client queues 2 s of a 4 s deadline and the
// journal then takes 2.5 s to get to its handshake (a saturated one
// does): counted from the accept the handshake would miss the deadline by
// half a second; counted from its slot it has 1.5 s to spare, and the
// queue wait 1.8 s more than the 2 s the client queues (a loaded
// machine's scheduling does not decide the verdict).
func TestAdmitHandshakeGivesTheHandshakeItsTimeFromItsSlot(t *testing.T) {
	const timeout = 4 * time.Second
	l := newLimiter(t, func(c *connlimit.Config) {
		c.MaxHandshakes, c.HandshakeQueueWait, c.HandshakeTimeout = 1, 3800*time.Millisecond, timeout
	})
	cert := selfSigned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held, err := l.AcquireHandshake()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(timeout))
		hello, release, err := l.AdmitHandshake(raw)
		if err != nil {
			done <- err
			return
		}
		time.Sleep(2500 * time.Millisecond)
		err = tls.Server(hello, &tls.Config{Certificates: []tls.Certificate{cert}}).Handshake()
		release(err == nil)
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	client := make(chan error, 1)
	go func() { client <- tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake() }()
	time.Sleep(2 * time.Second)
	held()
	if err := <-done; err != nil {
		t.Fatalf("server handshake of a client served from the queue: %v", err)
	}
	if err := <-client; err != nil {
		t.Fatalf("client served from the queue: %v", err)
	}
}
