// Before a new channel goes live: the health check (Ping answers for this
// node and this certificate, with a clock close to ours) and the stream
// (Subscribe has delivered its first event).

package channel

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ClockSkewError is a failed health check: the journal's clock, as its
// Ping answered, differs from ours by more than the tolerance.
type ClockSkewError struct {
	Local, Journal time.Time
	Skew           time.Duration // Local - Journal
	Tolerance      time.Duration
}

func (e *ClockSkewError) Error() string {
	return fmt.Sprintf("channel: local clock %s differs from the journal's %s by %v (tolerance %v); fix NTP on this node",
		e.Local.UTC().Format(time.RFC3339), e.Journal.UTC().Format(time.RFC3339), e.Skew.Round(time.Second), e.Tolerance)
}

// Is makes a ClockSkewError match ErrClockSkew.
func (e *ClockSkewError) Is(target error) bool { return target == ErrClockSkew }

// check is the health check: Ping must answer, for the node and the
// certificate the channel was built with, with a clock close to ours. The
// Ping makes the channel's connection, which may wait in the journal's
// handshake queue first (Config.HandshakeQueueWait).
func (r *Rotator) check(ctx context.Context, ch *Channel) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout+r.cfg.HandshakeQueueWait)
	defer cancel()
	resp, err := pactv1.NewEnrollmentServiceClient(ch.conn).Ping(cctx, &pactv1.PingRequest{})
	if err != nil {
		return fmt.Errorf("channel: health check of %s with %s: %w", ch.target, ch.id, ch.creds.Explain(err))
	}
	r.mu.Lock()
	want := r.nodeID
	r.mu.Unlock()
	if want != "" && resp.GetNodeId() != want {
		return fmt.Errorf("%w: journal %s says %s is node %q, this agent is node %q", ErrWrongNode, ch.target, ch.id, resp.GetNodeId(), want)
	}
	if s := resp.GetSerial(); s != "" && s != ch.id.Serial() {
		return fmt.Errorf("%w: journal %s authenticated serial %s, the channel presents %s", ErrWrongNode, ch.target, s, ch.id.Serial())
	}
	if ns := resp.GetServerTimeUnixNano(); ns != 0 {
		local, journal := r.cfg.Clock.Now(), time.Unix(0, ns)
		if skew := local.Sub(journal); skew > r.cfg.MaxClockSkew || -skew > r.cfg.MaxClockSkew {
			return &ClockSkewError{Local: local, Journal: journal, Skew: skew, Tolerance: r.cfg.MaxClockSkew}
		}
	}
	r.mu.Lock()
	if r.nodeID == "" {
		r.nodeID = resp.GetNodeId()
	}
	r.mu.Unlock()
	ch.nodeID, ch.journalID = resp.GetNodeId(), resp.GetJournalId()
	return nil
}

// openStream opens Subscribe on the channel and waits for its first event.
func (r *Rotator) openStream(ctx context.Context, ch *Channel) error {
	sctx, cancel := context.WithCancel(r.ctx)
	ch.cancel = cancel
	req := &pactv1.SubscribeRequest{}
	if r.cfg.Subscribe != nil {
		req = r.cfg.Subscribe()
	}
	client, err := pactv1.NewEnrollmentServiceClient(ch.conn).Subscribe(sctx, req)
	if err != nil {
		cancel()
		close(ch.done)
		return fmt.Errorf("channel: open stream to %s: %w", ch.target, ch.creds.Explain(err))
	}
	go r.runStream(ch, client)
	t := time.NewTimer(r.cfg.CallTimeout)
	defer t.Stop()
	select {
	case <-ch.first:
		return nil
	case <-ch.done:
		return fmt.Errorf("channel: stream to %s with %s: %w", ch.target, ch.id, ch.StreamErr())
	case <-t.C:
		return fmt.Errorf("channel: no event on the stream from %s within %v", ch.target, r.cfg.CallTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Rotator) runStream(ch *Channel, client grpc.ServerStreamingClient[pactv1.SubscribeResponse]) {
	defer close(ch.done)
	for {
		ev, err := client.Recv()
		if err == nil && r.cfg.OnEvent != nil {
			err = r.cfg.OnEvent(ch, ev)
		}
		now := time.Now()
		ch.mu.Lock()
		if err != nil {
			if ch.stopped {
				err = errStreamStopped
			} else {
				err = ch.creds.Explain(err)
			}
			ch.streamErr, ch.closedAt = err, now
			ch.mu.Unlock()
			ch.cancel()
			return
		}
		ch.events++
		ch.lastEvent = now
		first := ch.firstEvent.IsZero()
		if first {
			ch.firstEvent = now
		}
		ch.mu.Unlock()
		if first {
			close(ch.first)
		}
	}
}
