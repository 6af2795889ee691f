// Calls through the Rotator: it is a grpc.ClientConnInterface whose calls
// take the active channel, and a unary call the journal refused as stale
// during a rotation is retried once on the new channel.

package channel

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
)

// Invoke runs a unary call on the active channel. If the journal refused it
// with STALE_CERTIFICATE because the channel's certificate was superseded by
// a rotation under way (or just finished), it is retried once on the new
// channel; see Rotator.
func (r *Rotator) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	retried := false
	for {
		ch := r.active.Load()
		if ch == nil {
			return status.Error(codes.Unavailable, ErrNoChannel.Error())
		}
		err := ch.conn.Invoke(ctx, method, args, reply, opts...)
		switch {
		case err == nil || ctx.Err() != nil:
			return err
		case errors.Is(err, ErrReplaced):
			// Not sent: the channel began draining after we loaded it.
			if r.isClosed() {
				return status.Error(codes.Unavailable, ErrRotatorClosed.Error())
			}
			continue
		case retried || apierr.FromError(err).Reason != apierr.StaleCertificate:
			return err
		}
		if !r.awaitNewer(ctx, ch) {
			return err
		}
		retried = true
		r.retries.Add(1)
	}
}

// NewStream opens a stream on the active channel. Streams are not moved
// across swaps: one opened on a replaced channel ends when it closes.
func (r *Rotator) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ch := r.active.Load()
	if ch == nil {
		return nil, status.Error(codes.Unavailable, ErrNoChannel.Error())
	}
	return ch.conn.NewStream(ctx, desc, method, opts...)
}

// awaitNewer reports whether a channel newer than ch is (or, once the
// rotation under way ends, has become) active.
func (r *Rotator) awaitNewer(ctx context.Context, ch *Channel) bool {
	r.mu.Lock()
	rot := r.rotating
	r.mu.Unlock()
	if r.active.Load() != ch {
		return true
	}
	if rot == nil {
		return false
	}
	select {
	case <-rot:
	case <-ctx.Done():
		return false
	}
	return r.active.Load() != ch
}

func (r *Rotator) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}
