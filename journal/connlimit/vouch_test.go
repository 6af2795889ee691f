package connlimit_test

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/connlimit"
)

func tcpAddr(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 1} }

// At the cap, whoever has proved something goes last: connections from
// unvouched addresses go first (silent, then idle past their handshake
// for ProveWithin, then spoken, then, for a newer one from a vouched
// address, idle however briefly), those from vouched addresses only for a
// newer one from a vouched address, and a connection proven by an
// authenticated call, or with a call under way, not at all.
func TestAtTheCapVouchedAndProvenConnectionsGoLast(t *testing.T) {
	type step = string
	for _, tc := range []struct {
		name    string
		steps   []step // "dial SRC WANT", "vouch SRC", "handshake N", "hello N", "read N", "call N", "done N", "prove N", "wait"
		evicted []int
		stats   connlimit.Stats // Evicted, EvictedSpoken, EvictedIdle, EvictedVouched, RefusedTotal, Unproven are compared
	}{
		{
			name: "a vouched address's connections go after every unvouched one",
			steps: []step{"vouch 127.0.0.1", "dial 127.0.0.1 0", "dial 127.0.0.2 1", "dial 127.0.0.3 2",
				"dial 127.0.0.4 3", "dial 127.0.0.5 4", "dial 127.0.0.6 5"},
			evicted: []int{1, 2, 3},
			stats:   connlimit.Stats{Evicted: 3},
		},
		{
			name:    "an unvouched newcomer is refused rather than evict a vouched connection",
			steps:   []step{"vouch 127.0.0.1", "vouch 127.0.0.2", "dial 127.0.0.1 0", "dial 127.0.0.1 1", "dial 127.0.0.2 2", "dial 127.0.0.3 -1"},
			evicted: nil,
			stats:   connlimit.Stats{RefusedTotal: 1},
		},
		{
			name: "a vouched newcomer evicts the oldest vouched one, silent before spoken",
			steps: []step{"vouch 127.0.0.1", "vouch 127.0.0.2", "dial 127.0.0.1 0", "read 0", "dial 127.0.0.1 1", "dial 127.0.0.2 2",
				"dial 127.0.0.2 3", "dial 127.0.0.3 -1"},
			evicted: []int{1},
			stats:   connlimit.Stats{Evicted: 1, EvictedVouched: 1, RefusedTotal: 1},
		},
		{
			name: "a connection idle past its handshake goes after ProveWithin, before one that has spoken",
			steps: []step{"dial 127.0.0.1 0", "handshake 0", "dial 127.0.0.2 1", "read 1", "dial 127.0.0.3 2", "hello 2",
				"dial 127.0.0.4 3", "hello 3", "wait", "dial 127.0.0.5 4"},
			evicted: []int{1, 0},
			stats:   connlimit.Stats{Evicted: 2, EvictedSpoken: 1, EvictedIdle: 1},
		},
		{
			name: "a call under way keeps a connection from idling; a proven one stays",
			steps: []step{"dial 127.0.0.1 0", "handshake 0", "call 0", "dial 127.0.0.2 1", "handshake 1", "prove 1",
				"dial 127.0.0.3 2", "handshake 2", "wait", "dial 127.0.0.4 3", "handshake 3", "done 0",
				"dial 127.0.0.5 -1", "wait", "dial 127.0.0.6 4"},
			evicted: []int{2, 3},
			stats:   connlimit.Stats{Evicted: 2, EvictedIdle: 2, RefusedTotal: 1, Unproven: 1},
		},
		{
			name:    "a connection past its handshake from a vouched address is never idle",
			steps:   []step{"vouch 127.0.0.1", "dial 127.0.0.1 0", "handshake 0", "dial 127.0.0.2 1", "handshake 1", "dial 127.0.0.3 2", "handshake 2", "wait", "dial 127.0.0.4 3"},
			evicted: []int{1},
			stats:   connlimit.Stats{Evicted: 1, EvictedIdle: 1, Unproven: 1},
		},
		{
			name: "a vouched newcomer evicts one idle past its handshake before ProveWithin, an unvouched one is refused",
			steps: []step{"vouch 127.0.0.9", "dial 127.0.0.1 0", "handshake 0", "dial 127.0.0.2 1", "handshake 1",
				"dial 127.0.0.3 2", "handshake 2", "dial 127.0.0.4 -1", "dial 127.0.0.9 3"},
			evicted: []int{0},
			stats:   connlimit.Stats{Evicted: 1, EvictedIdle: 1, RefusedTotal: 1, Unproven: 2},
		},
		{
			name:    "a vouch lapses after VouchFor",
			steps:   []step{"vouch 127.0.0.1", "wait 11m", "dial 127.0.0.1 0", "dial 127.0.0.2 1", "dial 127.0.0.3 2", "dial 127.0.0.4 3"},
			evicted: []int{0},
			stats:   connlimit.Stats{Evicted: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := fakeclock.New(time.Unix(1e9, 0))
			h := newCapHarnessWith(t, func(c *connlimit.Config) {
				c.MaxConns, c.MaxConnsPerSource = 3, 2
				c.ProveWithin = connlimit.DefaultProveWithin
				c.Clock = fc
			})
			done := map[int]func(){}
			for _, s := range tc.steps {
				f := strings.Fields(s)
				var n int
				switch {
				case f[0] == "dial":
					var want int
					scan(f[2], "%d", &want)
					if got := h.dial(f[1]); got != want {
						t.Fatalf("%s: admitted as %d, want %d", s, got, want)
					}
				case f[0] == "vouch":
					h.l.Vouch(tcpAddr(f[1]))
				case f[0] == "wait":
					d := 4 * time.Second // past ProveWithin
					if len(f) > 1 {
						d, _ = time.ParseDuration(f[1])
					}
					fc.Advance(d)
				case scan(s, "handshake %d", &n):
					if err := h.server[n].SetDeadline(time.Time{}); err != nil {
						t.Fatalf("%s: %v", s, err)
					}
				case scan(s, "hello %d", &n):
					h.send(n, clientHello)
					polltest.Until(t, 30*time.Second, time.Millisecond, func() bool { return connlimit.HelloWaiting(h.server[n]) },
						"%s: the ClientHello never reached the server's socket", s)
				case scan(s, "read %d", &n):
					h.send(n, clientHello)
					if _, err := connlimit.AwaitHello(h.server[n]); err != nil {
						t.Fatalf("%s: %v", s, err)
					}
				case scan(s, "call %d", &n):
					done[n] = h.l.Call(h.server[n].RemoteAddr(), false)
				case scan(s, "done %d", &n):
					done[n]()
				case scan(s, "prove %d", &n):
					h.l.Call(h.server[n].RemoteAddr(), true)()
				default:
					t.Fatalf("bad step %q", s)
				}
			}
			want := map[int]bool{}
			for _, i := range tc.evicted {
				want[i] = true
			}
			for i := range h.server {
				if got := h.evicted(i); got != want[i] {
					t.Errorf("connection %d evicted: %v, want %v", i, got, want[i])
				}
			}
			st := h.l.Stats()
			if st.Evicted != tc.stats.Evicted || st.EvictedSpoken != tc.stats.EvictedSpoken || st.EvictedIdle != tc.stats.EvictedIdle ||
				st.EvictedVouched != tc.stats.EvictedVouched || st.RefusedTotal != tc.stats.RefusedTotal || st.Unproven != tc.stats.Unproven {
				t.Errorf("stats %+v, want %+v", st, tc.stats)
			}
		})
	}
}

// A client from a vouched address takes one of the VouchedHandshakes
// slots when every other is taken, ahead of the clients queued for those;
// a client from an unvouched address never takes one.
func TestAVouchedClientHelloTakesAReservedSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := fakeclock.New(time.Unix(1e9, 0))
		l := admitLimiter(t, fc, noJitter, func(c *connlimit.Config) { c.VouchedHandshakes = 1 })
		vouched, stranger := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
		l.Vouch(&net.TCPAddr{IP: vouched.AsSlice(), Port: 7})
		held, err := l.AdmitFrom(stranger)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			r, err := l.AdmitFrom(stranger)
			if err == nil {
				r()
			}
			got <- err
		}()
		queued(t, fc, l, 1)
		r, err := l.AdmitFrom(vouched)
		if err != nil {
			t.Fatalf("vouched: %v, want the reserved slot at once", err)
		}
		if st := l.Stats(); st.Handshakes != 2 || st.Queued != 1 {
			t.Fatalf("stats %+v, want 2 handshakes in progress and the stranger still queued", st)
		}
		r()
		// The reserve is free again, and not the stranger's to take.
		synctest.Wait()
		if st := l.Stats(); st.Handshakes != 1 || st.Queued != 1 {
			t.Fatalf("stats %+v, want the stranger still queued", st)
		}
		held()
		if err := <-got; err != nil {
			t.Fatalf("stranger: %v", err)
		}
	})
}

// At most MaxVouched addresses are remembered, the least recently
// vouched forgotten first; a vouch lasts VouchFor.
func TestVouchesAreBoundedAndLapse(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := newLimiter(t, func(c *connlimit.Config) {
		c.Clock = fc
		c.MaxVouched = 4
		c.VouchFor = time.Minute
	})
	for i := range 10 {
		l.Vouch(tcpAddr(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}).String()))
		// The first, vouched again and again, stays.
		l.Vouch(tcpAddr("10.0.0.0"))
	}
	if got := l.Stats().Vouched; got < 2 || got > 4 {
		t.Fatalf("%d vouched, want 2 to 4 (MaxVouched 4)", got)
	}
	for _, ip := range []string{"10.0.0.0", "10.0.0.9"} {
		if !l.IsVouched(netip.MustParseAddr(ip)) {
			t.Errorf("%s is not vouched for", ip)
		}
	}
	if l.IsVouched(netip.MustParseAddr("10.0.0.1")) {
		t.Errorf("10.0.0.1, the least recently vouched, is still vouched for")
	}
	fc.Advance(time.Minute)
	if got := l.Stats().Vouched; got != 0 || l.IsVouched(netip.MustParseAddr("10.0.0.9")) {
		t.Fatalf("%d vouched a VouchFor later, want 0", got)
	}
}
