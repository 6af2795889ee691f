package agent

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/connlimit"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// busyProxy stands in front of a journal: it reads each connection's
// ClientHello, then either answers busy, as a saturated journal does, or
// relays the connection to the journal.
type busyProxy struct {
	addr       string
	all        *helloCount // ClientHellos at every proxy of a test
	mu         sync.Mutex
	hellos     int              // ClientHellos at this proxy
	busy       func(n int) bool // whether the n-th ClientHello (from 1, of all) is answered busy
	closes     func(n int) bool // whether it is closed unanswered, as by a full handshake queue (nil: none)
	retryAfter time.Duration
}

type helloCount struct {
	mu sync.Mutex
	n  int
}

func startBusyProxy(t *testing.T, all *helloCount, journal string, retryAfter time.Duration, busy func(int) bool) *busyProxy {
	t.Helper()
	return startProxy(t, all, journal, retryAfter, busy, nil)
}

// startProxy is startBusyProxy that also closes, unanswered, the
// ClientHellos closes picks.
func startProxy(t *testing.T, all *helloCount, journal string, retryAfter time.Duration, busy, closes func(int) bool) *busyProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	p := &busyProxy{addr: lis.Addr().String(), all: all, busy: busy, closes: closes, retryAfter: retryAfter}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.serve(c, journal)
		}
	}()
	return p
}

func (p *busyProxy) serve(c net.Conn, journal string) {
	defer c.Close()
	hello, err := connlimit.AwaitHello(c)
	if err != nil {
		return
	}
	p.all.mu.Lock()
	p.all.n++
	busy := p.busy(p.all.n)
	closes := p.closes != nil && p.closes(p.all.n)
	p.all.mu.Unlock()
	p.mu.Lock()
	p.hellos++
	p.mu.Unlock()
	if closes {
		return
	}
	if busy {
		_, _ = c.Write(transport.FormatBusy(p.retryAfter))
		_ = c.(*net.TCPConn).CloseWrite()
		return
	}
	up, err := net.Dial("tcp", journal)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(up, hello)
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(c, up)
}

func (p *busyProxy) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hellos
}

// A journal that answers busy is no failure: the agent comes back to that
// journal, not the next one, at the time it named and not before (its
// backoff, 10-100 ms here, does not apply), for its enrollment and for its
// channel alike.
func TestAgentComesBackToABusyJournalWhenItSaid(t *testing.T) {
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	h.Register(t, "n1", "SN1", mac1)
	const retryAfter = 3 * time.Second
	// Two journals (proxies of the one journal); the first ClientHello
	// (the Enroll) and the third (the channel's) are answered busy,
	// wherever they arrive.
	var all helloCount
	policy := func(n int) bool { return n == 1 || n == 3 }
	a1, a2 := startBusyProxy(t, &all, h.Addr, retryAfter, policy), startBusyProxy(t, &all, h.Addr, retryAfter, policy)
	fc := fakeclock.New(time.Now())
	cfg := agentConfig(h, fc, "SN1", mac1)
	cfg.JournalAddrs = []string{a1.addr, a2.addr}
	a := runAgent(t, cfg)
	busy := func() float64 {
		return float64(a.metrics.busy.Load())
	}

	var first, other *busyProxy
	for round, hellos := range []int{1, 3} {
		eventually(t, "the journal answers busy", func() bool { return busy() == float64(round+1) && fc.Timers() > 0 })
		if first == nil {
			first, other = a1, a2 // the agent starts at a journal of its choice
			if a2.count() > 0 {
				first, other = a2, a1
			}
		}
		// Before the retry-after: nothing, anywhere (a failure's backoff
		// would have brought the agent back, to the other journal).
		advanceAndSettle(t, fc, retryAfter-500*time.Millisecond)
		if first.count() != hellos || other.count() != 0 {
			t.Fatalf("round %d: before the retry-after, %d ClientHellos at the busy journal (want %d) and %d at the other (want 0)", round, first.count(), hellos, other.count())
		}
		// After it (and the jitter, at most 5 %): back at the same journal.
		fc.Advance(time.Second)
		eventually(t, fmt.Sprintf("the agent comes back in round %d", round), func() bool { return first.count() > hellos })
	}
	eventually(t, "n1 is active with one stream", func() bool {
		return inspect(t, h, "n1").GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && h.J.OpenStreams("n1") == 1
	})
	if other.count() != 0 || busy() != 2 {
		t.Fatalf("%d ClientHellos at the other journal, %v busy answers counted; want 0 and 2", other.count(), busy())
	}
	if st := a.Status(); st.LastFailureReason != "" {
		t.Errorf("status after busy answers: %+v, want no failure recorded", st)
	}
}
