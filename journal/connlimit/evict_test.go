package connlimit_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/connlimit"
)

// capHarness is a limited loopback listener whose accepted connections
// the test holds, in the order they were admitted.
type capHarness struct {
	t        *testing.T
	l        *connlimit.Limiter
	addr     string
	accepted chan net.Conn
	server   []net.Conn      // the server side of every admitted connection
	client   []net.Conn      // and its client side
	gone     []chan struct{} // closed when the client side of it sees the server close
}

// newCapHarness is on a limiter whose calls nobody reports (ProveWithin
// 0, the default): a connection past its handshake is never evicted.
func newCapHarness(t *testing.T, maxConns, perSource int) *capHarness {
	t.Helper()
	return newCapHarnessWith(t, func(c *connlimit.Config) { c.MaxConns, c.MaxConnsPerSource = maxConns, perSource })
}

func newCapHarnessWith(t *testing.T, mutate func(*connlimit.Config)) *capHarness {
	t.Helper()
	l := newLimiter(t, mutate)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := l.Listener(raw)
	t.Cleanup(func() { lis.Close() })
	h := &capHarness{t: t, l: l, addr: raw.Addr().String(), accepted: make(chan net.Conn, 64)}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				close(h.accepted)
				return
			}
			h.accepted <- c
		}
	}()
	t.Cleanup(func() {
		for _, c := range h.server {
			c.Close()
		}
	})
	return h
}

// dial connects from src and reports whether the listener admitted the
// connection (its index in h.server) or closed it at once (-1). Accept
// closes an evicted connection before it hands on the one that took its
// place, so when dial returns the eviction, if any, has happened.
func (h *capHarness) dial(src string) int {
	h.t.Helper()
	c := dialFrom(h.t, src, h.addr)
	closed := make(chan struct{})
	go func() {
		_, _ = c.Read(make([]byte, 1)) // returns when the server closes (or cleanup does)
		close(closed)
	}()
	select {
	case sc := <-h.accepted:
		h.server = append(h.server, sc)
		h.client = append(h.client, c)
		h.gone = append(h.gone, closed)
		return len(h.server) - 1
	case <-closed:
		return -1
	case <-time.After(30 * time.Second): // a hang guard
		h.t.Fatalf("a connection from %s was neither admitted nor closed", src)
		return -1
	}
}

// evicted reports whether the server side of connection i was evicted;
// otherwise it must still be open. The answer is immediate: an evicted
// connection's read fails at once, an open one's times out at once.
func (h *capHarness) evicted(i int) bool {
	h.t.Helper()
	c := h.server[i]
	_ = c.SetReadDeadline(time.Now())
	_, err := c.Read(make([]byte, 1))
	switch {
	case errors.Is(err, connlimit.ErrEvicted) && errors.Is(err, net.ErrClosed):
		return true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false
	}
	h.t.Fatalf("connection %d: read %v, want evicted or open", i, err)
	return false
}

func TestAtTheCapANewConnectionEvictsTheOldestStillInItsHandshake(t *testing.T) {
	// Each step dials from a source ("dial 127.0.0.2", the result checked
	// against want: the index the connection is admitted as, or -1 if it
	// is refused), finishes the handshake of connection n ("handshake n"),
	// or closes it on the server side ("close n"). At the end the
	// connections in evicted are evicted, every other one is open.
	type step struct {
		do   string
		want int
	}
	dial := func(src string, want int) step { return step{"dial " + src, want} }
	handshake := func(n int) step { return step{fmt.Sprintf("handshake %d", n), 0} }
	// The client of n sends a whole ClientHello, which its server side has
	// not read yet (its goroutine has not run); read: has read it;
	// trickle: the client sends only part of it.
	hello := func(n int) step { return step{fmt.Sprintf("hello %d", n), 0} }
	read := func(n int) step { return step{fmt.Sprintf("read %d", n), 0} }
	trickle := func(n int) step { return step{fmt.Sprintf("trickle %d", n), 0} }
	closeConn := func(n int) step { return step{fmt.Sprintf("close %d", n), 0} }
	for _, tc := range []struct {
		name      string
		steps     []step
		evicted   []int
		stats     connlimit.Stats // Open, Evicted, EvictedSpoken, RefusedTotal and RefusedPerSource are compared
		clientHas int             // an evicted connection whose client must see the close (-1: none)
	}{
		{
			name:      "the oldest in its handshake goes",
			steps:     []step{dial("127.0.0.1", 0), dial("127.0.0.2", 1), dial("127.0.0.3", 2), dial("127.0.0.4", 3), dial("127.0.0.5", 4)},
			evicted:   []int{0, 1},
			stats:     connlimit.Stats{Open: 3, Evicted: 2},
			clientHas: 0,
		},
		{
			name: "a connection past its handshake is never evicted, however old",
			steps: []step{dial("127.0.0.1", 0), handshake(0), dial("127.0.0.2", 1), dial("127.0.0.3", 2), handshake(2),
				dial("127.0.0.4", 3), dial("127.0.0.5", 4), dial("127.0.0.6", 5)},
			evicted:   []int{1, 3, 4},
			stats:     connlimit.Stats{Open: 3, Evicted: 3},
			clientHas: 1,
		},
		{
			name:      "every connection past its handshake: the new one is refused",
			steps:     []step{dial("127.0.0.1", 0), handshake(0), dial("127.0.0.2", 1), handshake(1), dial("127.0.0.3", 2), handshake(2), dial("127.0.0.4", -1)},
			stats:     connlimit.Stats{Open: 3, RefusedTotal: 1},
			clientHas: -1,
		},
		{
			name: "the per-source cap refuses before the total cap evicts",
			steps: []step{dial("127.0.0.1", 0), dial("127.0.0.1", 1), dial("127.0.0.2", 2),
				dial("127.0.0.1", -1), dial("127.0.0.2", 3)},
			evicted:   []int{0},
			stats:     connlimit.Stats{Open: 3, Evicted: 1, RefusedPerSource: 1},
			clientHas: 0,
		},
		{
			name:      "a connection closed is no longer there to evict",
			steps:     []step{dial("127.0.0.1", 0), dial("127.0.0.2", 1), dial("127.0.0.3", 2), closeConn(0), dial("127.0.0.4", 3), dial("127.0.0.5", 4)},
			evicted:   []int{1},
			stats:     connlimit.Stats{Open: 3, Evicted: 1},
			clientHas: 1,
		},
		{
			name:      "a silent connection goes before an older one whose ClientHello waits unread",
			steps:     []step{dial("127.0.0.1", 0), hello(0), dial("127.0.0.2", 1), dial("127.0.0.3", 2), dial("127.0.0.4", 3), dial("127.0.0.5", 4)},
			evicted:   []int{1, 2},
			stats:     connlimit.Stats{Open: 3, Evicted: 2},
			clientHas: 1,
		},
		{
			name:      "a silent connection goes before an older one whose ClientHello was read",
			steps:     []step{dial("127.0.0.1", 0), read(0), dial("127.0.0.2", 1), dial("127.0.0.3", 2), dial("127.0.0.4", 3), dial("127.0.0.5", 4)},
			evicted:   []int{1, 2},
			stats:     connlimit.Stats{Open: 3, Evicted: 2},
			clientHas: 2,
		},
		{
			name:      "part of a ClientHello is silence",
			steps:     []step{dial("127.0.0.1", 0), trickle(0), dial("127.0.0.2", 1), dial("127.0.0.3", 2), dial("127.0.0.4", 3)},
			evicted:   []int{0},
			stats:     connlimit.Stats{Open: 3, Evicted: 1},
			clientHas: 0,
		},
		{
			// The first seen to have spoken: 1, read at once; 0 and 2 are
			// found to have spoken when the limiter looks for a victim.
			name: "with no silent connection left, the first seen to have spoken goes",
			steps: []step{dial("127.0.0.1", 0), hello(0), dial("127.0.0.2", 1), read(1), dial("127.0.0.3", 2), hello(2),
				dial("127.0.0.4", 3), dial("127.0.0.5", 4)},
			evicted:   []int{1, 3},
			stats:     connlimit.Stats{Open: 3, Evicted: 2, EvictedSpoken: 1},
			clientHas: 1,
		},
		{
			name: "handshakes finishing out of order",
			steps: []step{dial("127.0.0.1", 0), dial("127.0.0.2", 1), dial("127.0.0.3", 2), handshake(1),
				dial("127.0.0.4", 3), dial("127.0.0.5", 4), dial("127.0.0.6", 5)},
			evicted:   []int{0, 2, 3},
			stats:     connlimit.Stats{Open: 3, Evicted: 3},
			clientHas: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCapHarness(t, 3, 2)
			closed := map[int]bool{}
			for _, s := range tc.steps {
				var src string
				var n int
				switch {
				case scan(s.do, "dial %s", &src):
					if got := h.dial(src); got != s.want {
						t.Fatalf("%s: admitted as %d, want %d", s.do, got, s.want)
					}
				case scan(s.do, "handshake %d", &n):
					if err := h.server[n].SetDeadline(time.Time{}); err != nil {
						t.Fatalf("%s: %v", s.do, err)
					}
				case scan(s.do, "hello %d", &n):
					h.send(n, clientHello)
					polltest.Until(t, 30*time.Second, time.Millisecond, func() bool { return connlimit.HelloWaiting(h.server[n]) },
						"%s: the ClientHello never reached the server's socket", s.do)
				case scan(s.do, "read %d", &n):
					h.send(n, clientHello)
					if _, err := connlimit.AwaitHello(h.server[n]); err != nil {
						t.Fatalf("%s: %v", s.do, err)
					}
				case scan(s.do, "trickle %d", &n):
					h.send(n, clientHello[:len(clientHello)-1])
				case scan(s.do, "close %d", &n):
					h.server[n].Close()
					closed[n] = true
				default:
					t.Fatalf("bad step %q", s.do)
				}
			}
			want := map[int]bool{}
			for _, i := range tc.evicted {
				want[i] = true
			}
			for i := range h.server {
				if closed[i] {
					continue
				}
				if got := h.evicted(i); got != want[i] {
					t.Errorf("connection %d evicted: %v, want %v", i, got, want[i])
				}
			}
			st := h.l.Stats()
			if st.Open != tc.stats.Open || st.Evicted != tc.stats.Evicted || st.EvictedSpoken != tc.stats.EvictedSpoken || st.RefusedTotal != tc.stats.RefusedTotal || st.RefusedPerSource != tc.stats.RefusedPerSource {
				t.Errorf("stats %+v, want %+v", st, tc.stats)
			}
			if tc.clientHas >= 0 {
				select {
				case <-h.gone[tc.clientHas]:
				case <-time.After(30 * time.Second): // a hang guard
					t.Errorf("the client of evicted connection %d did not see it closed", tc.clientHas)
				}
			}
			// An evicted connection is past saving: its handshake cannot
			// finish, and closing it again gives back nothing.
			for _, i := range tc.evicted {
				if err := h.server[i].SetDeadline(time.Time{}); !errors.Is(err, connlimit.ErrEvicted) {
					t.Errorf("finishing the handshake of evicted connection %d: %v, want ErrEvicted", i, err)
				}
				h.server[i].Close()
			}
			if st := h.l.Stats(); st.Open != tc.stats.Open {
				t.Errorf("open %d after closing the evicted connections, want %d", st.Open, tc.stats.Open)
			}
		})
	}
}

// clientHello is a whole TLS handshake record, as far as framing goes.
var clientHello = []byte{22, 3, 1, 0, 4, 1, 0, 0, 0}

// send writes b from the client side of connection i.
func (h *capHarness) send(i int, b []byte) {
	h.t.Helper()
	if _, err := h.client[i].Write(b); err != nil {
		h.t.Fatal(err)
	}
}

func scan(s, format string, arg any) bool {
	_, err := fmt.Sscanf(s, format, arg)
	return err == nil
}

// Many clients from a few sources at once, while the server finishes
// handshakes and closes connections: no connection past its handshake is
// ever evicted, the caps hold, and the counts add up.
func TestEvictionUnderConcurrentAcceptsHandshakesAndCloses(t *testing.T) {
	const (
		maxConns  = 16
		perSource = 6
		sources   = 4
		dials     = 50 // per source
	)
	l := newLimiter(t, func(c *connlimit.Config) { c.MaxConns, c.MaxConnsPerSource = maxConns, perSource })
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := l.Listener(raw)
	defer lis.Close()

	type served struct {
		c          net.Conn
		handshaken bool // SetDeadline(zero) succeeded: never to be evicted
		closed     bool // the server closed it
	}
	var mu sync.Mutex
	var all []*served
	var servers sync.WaitGroup
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for i := 0; ; i++ {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s := &served{c: c}
			mu.Lock()
			all = append(all, s)
			mu.Unlock()
			servers.Add(1)
			go func() {
				defer servers.Done()
				switch i % 4 {
				case 0, 1: // finishes its handshake
					err := c.SetDeadline(time.Time{})
					mu.Lock()
					s.handshaken = err == nil
					mu.Unlock()
					if i%8 == 0 && err == nil {
						c.Close()
						mu.Lock()
						s.closed = true
						mu.Unlock()
					}
				case 2: // gives up in its handshake
					c.Close()
					mu.Lock()
					s.closed = true
					mu.Unlock()
				}
				// case 3: stays in its handshake, evictable
			}()
		}
	}()

	var clients sync.WaitGroup
	held := make(chan net.Conn, sources*dials) // the clients keep every connection open
	defer func() {
		close(held)
		for c := range held {
			c.Close()
		}
	}()
	for s := range sources {
		clients.Add(1)
		go func() {
			defer clients.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+s))}, Timeout: 5 * time.Second}
			for range dials {
				c, err := d.Dial("tcp", raw.Addr().String())
				if err != nil {
					t.Error(err)
					return
				}
				held <- c
			}
		}()
	}
	clients.Wait()
	// Every dial has been accepted by the kernel; wait until the limiter
	// has decided on each (admitted, refused at a cap) before looking.
	var last polltest.Last
	polltest.Until(t, 30*time.Second, 10*time.Millisecond, func() bool {
		st := l.Stats()
		mu.Lock()
		n := uint64(len(all))
		mu.Unlock()
		last.Value = fmt.Sprintf("%d decided: %+v", n+st.RefusedPerSource+st.RefusedTotal, st)
		return n+st.RefusedPerSource+st.RefusedTotal == sources*dials
	}, "of %d dials, only %v", sources*dials, &last)
	servers.Wait()

	open, evicted := 0, 0
	mu.Lock()
	defer mu.Unlock()
	for i, s := range all {
		// A connection the server closed was evicted first if its read
		// says so (closing takes it off the list).
		_ = s.c.SetReadDeadline(time.Now())
		_, err := s.c.Read(make([]byte, 1))
		switch {
		case errors.Is(err, connlimit.ErrEvicted):
			evicted++
			if s.handshaken {
				t.Errorf("connection %d was evicted after its handshake finished", i)
			}
		case s.closed && errors.Is(err, net.ErrClosed):
		case !s.closed && errors.Is(err, os.ErrDeadlineExceeded):
			open++
		default:
			t.Errorf("connection %d: read %v", i, err)
		}
	}
	st := l.Stats()
	if st.Open != open || st.Evicted != uint64(evicted) || open > maxConns {
		t.Fatalf("stats %+v; the connections say %d open, %d evicted (cap %d)", st, open, evicted, maxConns)
	}
	if st.Evicted == 0 {
		t.Fatalf("stats %+v: nothing was evicted, the test did not reach the cap", st)
	}
	t.Logf("%d dials: %d admitted, %d evicted, %d refused per source, %d refused at the total cap, %d open at the end", sources*dials, len(all), st.Evicted, st.RefusedPerSource, st.RefusedTotal, st.Open)
}
