package holdproxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// A connection through the proxy gets its first answer no sooner than the
// hold, and then carries bytes both ways.
func TestHoldsThenPasses(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // echo
	}()
	const hold = 300 * time.Millisecond
	addr := Start(t, lis.Addr().String(), hold)
	// The proxy's hold starts when it accepts, which can be before Dial
	// returns here; the clock starts before Dial so that it never starts
	// after the hold did.
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if string(buf) != "hello" {
		t.Fatalf("echo %q", buf)
	}
	if waited := time.Since(start); waited < hold {
		t.Fatalf("answered after %v, before the %v hold", waited, hold)
	}
}
