package connlimit_test

import (
	"net"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/journal/connlimit"
)

// The port's timings: the wait for a handshake slot (0 when one is free),
// how long a successful handshake held its slot (a failed one is not
// timed), and the time from the accept to the connection's first call,
// once per connection. Real TCP on loopback; the limiter's clock is fake.
func TestTimingsOfSlotHandshakeAndFirstCall(t *testing.T) {
	fc := fakeclock.New(time.Unix(1e9, 0))
	l := newLimiter(t, func(c *connlimit.Config) { c.Clock = fc })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := l.Listener(lis)
	defer ln.Close()
	client := dialFrom(t, "127.0.0.1", lis.Addr().String())
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	release, err := l.AcquireHandshake()
	if err != nil {
		t.Fatal(err)
	}
	fc.Advance(30 * time.Millisecond)
	release()
	second, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	second() // at once: a handshake of 0
	failed, err := l.AdmitReporting()
	if err != nil {
		t.Fatal(err)
	}
	fc.Advance(time.Second)
	failed(false) // a failed handshake: its wait counted, its time not
	fc.Advance(170 * time.Millisecond)
	l.Call(server.RemoteAddr(), true)
	fc.Advance(time.Second)
	l.Call(server.RemoteAddr(), false)() // not its first call: not timed again

	tm := l.Timings()
	if tm.SlotWait.Count != 3 || tm.SlotWait.Sum != 0 {
		t.Errorf("slot wait: %d observations summing %v s, want 3 of 0 (free slots)", tm.SlotWait.Count, tm.SlotWait.Sum)
	}
	if tm.Handshake.Count != 2 || tm.Handshake.Buckets[0.025] != 1 || tm.Handshake.Buckets[0.05] != 2 {
		t.Errorf("handshake: %+v, want one at 30 ms and one at 0", tm.Handshake)
	}
	if tm.FirstCall.Count != 1 || tm.FirstCall.Sum != 1.2 || tm.FirstCall.Buckets[1] != 0 || tm.FirstCall.Buckets[2.5] != 1 {
		t.Errorf("first call: %+v, want one at 1.2 s", tm.FirstCall)
	}
	if got := len(tm.FirstCall.Buckets); got != len(connlimit.TimingBuckets) {
		t.Errorf("%d buckets, want %d", got, len(connlimit.TimingBuckets))
	}
	client.Close()
}
