// One channel: an mTLS connection with one identity, its Subscribe
// stream, and the count of unary calls in flight that a swap drains.

package channel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/identity"
)

// Channel is one mTLS channel with one identity, and its Subscribe stream.
// Its accessors are safe for concurrent use.
type Channel struct {
	id        *identity.Identity
	target    string
	conn      *grpc.ClientConn
	creds     *ClientCredentials
	nodeID    string
	journalID string
	published time.Time

	cancel context.CancelFunc
	first  chan struct{} // closed on the stream's first event
	done   chan struct{} // closed when the stream has ended

	mu         sync.Mutex
	stopped    bool
	streamErr  error
	events     int
	firstEvent time.Time
	lastEvent  time.Time
	closedAt   time.Time
	inFlight   int
	draining   bool
	idle       chan struct{} // closed when draining and inFlight reaches 0
}

// Identity is the identity the channel presents.
func (c *Channel) Identity() *identity.Identity { return c.id }

// Target is the journal address.
func (c *Channel) Target() string { return c.target }

// Conn is the channel's connection.
func (c *Channel) Conn() *grpc.ClientConn { return c.conn }

// NodeID is the node the journal's health check answered for.
func (c *Channel) NodeID() string { return c.nodeID }

// JournalID is the journal that answered the health check.
func (c *Channel) JournalID() string { return c.journalID }

// Published is when the channel went live.
func (c *Channel) Published() time.Time { return c.published }

// StreamDone is closed when the channel's stream has ended.
func (c *Channel) StreamDone() <-chan struct{} { return c.done }

// StreamAlive reports whether the stream is open.
func (c *Channel) StreamAlive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// StreamErr is why the stream ended (nil while it is open). A stream the
// rotator stopped after replacing the channel ends with a non-nil error that
// is no gRPC status.
func (c *Channel) StreamErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streamErr
}

// StreamStopped reports whether the rotator stopped the stream itself
// (after a swap or at Close) rather than the journal or the network ending
// it.
func (c *Channel) StreamStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped && errors.Is(c.streamErr, errStreamStopped)
}

// StreamTimes returns when the stream delivered its first and its latest
// event and when it ended (zero for what has not happened), as wall-clock
// readings.
func (c *Channel) StreamTimes() (first, last, closed time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstEvent, c.lastEvent, c.closedAt
}

// Events is how many events the stream has delivered.
func (c *Channel) Events() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events
}

// InFlight is how many unary calls are running on the channel.
func (c *Channel) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

func (c *Channel) identityOrNil() *identity.Identity {
	if c == nil {
		return nil
	}
	return c.id
}

// countCalls is the channel's unary interceptor: it counts calls in flight
// for the drain, and refuses new ones once the channel drains.
func (c *Channel) countCalls(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	if c.draining {
		c.mu.Unlock()
		return fmt.Errorf("%w (%s, serial %s)", ErrReplaced, c.target, c.id.Serial())
	}
	c.inFlight++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight--
		if c.inFlight == 0 && c.idle != nil {
			close(c.idle)
			c.idle = nil
		}
		c.mu.Unlock()
	}()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// startDraining refuses new calls and returns a channel closed when none is
// in flight.
func (c *Channel) startDraining() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.draining = true
	idle := make(chan struct{})
	if c.inFlight == 0 {
		close(idle)
	} else {
		c.idle = idle
	}
	return idle
}

func (c *Channel) stopStream() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// close abandons a channel that never went live.
func (c *Channel) close() {
	c.stopStream()
	_ = c.conn.Close()
	if c.cancel != nil {
		<-c.done
	}
}
