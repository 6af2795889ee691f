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
package porttest

import (
	"fmt"
	"math/rand/v2"
	"net"
)

// Range is where Listen picks: under the default ephemeral range.
const (
	rangeFirst = 20000
	rangeSize  = 12000
)

// Listen returns a listener on 127.0.0.1 at a random port below the
// ephemeral range; the caller closes it once every address it needs is
// picked (holding it meanwhile keeps the pick unique) and then hands the
// address on. After 64 taken ports it falls back to ":0".
func Listen() (net.Listener, error) {
	for range 64 {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", rangeFirst+rand.IntN(rangeSize))); err == nil {
			return l, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}
