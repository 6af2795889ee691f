// Package holdproxy is a loopback TCP proxy for tests that holds each new
// connection, unanswered, before it passes it on: what a client sees of a
// journal whose handshake queue keeps its ClientHello waiting for a slot
// (journal/connlimit) before the handshake starts.
package holdproxy

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Start listens on 127.0.0.1 and returns the address; each connection it
// accepts waits hold, then is joined to a new connection to upstream. The
// proxy and every connection through it end with the test.
func Start(t testing.TB, upstream string, hold time.Duration) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = lis.Close()
		close(done)
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(c, upstream, hold, done, &wg)
			}()
		}
	}()
	return lis.Addr().String()
}

func serve(c net.Conn, upstream string, hold time.Duration, done <-chan struct{}, wg *sync.WaitGroup) {
	defer c.Close()
	timer := time.NewTimer(hold)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-done:
		return
	}
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	// Either side ending, or the test, ends both.
	stop := make(chan struct{})
	defer close(stop)
	wg.Add(2)
	go func() {
		defer wg.Done()
		select {
		case <-done:
		case <-stop:
		}
		_ = c.Close()
		_ = u.Close()
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(u, c)
		_ = u.Close()
	}()
	_, _ = io.Copy(c, u)
}
