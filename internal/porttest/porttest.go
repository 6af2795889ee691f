// Package porttest picks loopback TCP ports for tests that must know a
// journal's address before it starts (a Raft peer list, a restart on the
// same address).
//
// A port the kernel hands out for ":0" lies in its ephemeral range
// (32768-60999 by default), and once the picking listener is closed the
// kernel soon hands the same port to an outgoing connection of another
// test (go test runs packages in parallel), so the journal meant to listen
// there finds it taken. Ports below that range are only ever taken by a
// listener that asks for them, so Listen picks at random among those.
//
// A port is handed out at most once per process: a caller that closes the
// listener at once (journaltest.FreeAddr, once per address of a quorum)
// would otherwise, now and then, be given the same port twice, and two
// journals of one test would try to listen on it.
package porttest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// Range is where Listen picks: under the default ephemeral range.
const (
	rangeFirst = 20000
	rangeSize  = 12000
)

var (
	mu    sync.Mutex
	given = map[int]bool{} // ports Listen has returned in this process
)

// Listen returns a listener on 127.0.0.1 at a random port below the
// ephemeral range that it has not returned before in this process; the
// caller closes it once every address it needs is picked and then hands
// the address on. After 64 ports taken or already given it falls back to
// ":0".
func Listen() (net.Listener, error) {
	mu.Lock()
	defer mu.Unlock()
	for range 64 {
		port := rangeFirst + rand.IntN(rangeSize)
		if given[port] {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			given[port] = true
			return l, nil
		}
	}
	// Hold the ports already given while asking again, so the kernel
	// cannot hand the same one back.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 1024 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !given[port] {
			given[port] = true
			return l, nil
		}
		held = append(held, l)
	}
	return nil, errors.New("porttest: no loopback port left that was not handed out already")
}
