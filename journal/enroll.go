package journal

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// takeoverCutoff decides whether an Active node's hardware may enroll with a
// new key: only when no journal has seen its stream for TakeoverWindow (it
// rebooted and lost its key). While the node streams to this journal it is
// refused for good (a second agent, or a spoofed identity); otherwise the
// refusal can clear by waiting and carries a retry-after for when the
// takeover becomes possible.
func (j *Journal) takeoverCutoff(n *pactv1.Node) (int64, error) {
	if raftfsm.Released(n) {
		// Its agent stopped on purpose (Release): no window to wait for,
		// and the FSM re-checks the release. The stream of the released
		// certificate, if this journal has not noticed its end yet, ends
		// at its next binding check.
		return 0, nil
	}
	now := j.cfg.Clock.Now()
	if j.fsm.CertWithdrawn(n.GetCert(), now.UnixNano()) != "" {
		// Its certificate is refused everywhere by the registry's own
		// records (its issuer or the issuer's journal CA revoked, or the
		// serial itself): its agent enrolls again because it was cut off,
		// and no window protects anything. The FSM decides again at the
		// command's time; a stream of that certificate still open here
		// ends at its next binding check.
		return 0, nil
	}
	lastSeen := time.Unix(0, j.fsm.LastSeen(n.GetNodeId()))
	if j.hub.streamCount(n.GetNodeId()) > 0 {
		return 0, fmt.Errorf("%w: node %s is active with another key and streaming to this journal", raftfsm.ErrAlreadyActive, n.GetNodeId())
	}
	// Not streaming here. Seen lately (perhaps streaming to another
	// journal) or quiet for less than the window, the refusal can clear
	// by waiting: it says when to come back, and the agent honours it
	// instead of retrying blindly. If the node still streams elsewhere,
	// the digests keep it seen and the next try is refused the same way.
	settle := max(j.cfg.TakeoverWindow, 2*j.cfg.DigestInterval)
	if ago := now.Sub(lastSeen); ago < 2*j.cfg.DigestInterval {
		wait := settle - ago
		return 0, &retryAfterError{
			err:   fmt.Errorf("%w: node %s is active with another key; a journal saw its stream %s ago. If this is its own agent after a reboot, it may enroll again in %s", raftfsm.ErrAlreadyActive, n.GetNodeId(), ago.Round(time.Second), wait.Round(time.Second)),
			after: wait,
		}
	}
	if quiet := now.Sub(lastSeen); quiet < settle {
		wait := settle - quiet
		return 0, &retryAfterError{
			err:   fmt.Errorf("%w: node %s was active until %s ago; if it rebooted it may enroll again in %s", raftfsm.ErrAlreadyActive, n.GetNodeId(), quiet.Round(time.Second), wait.Round(time.Second)),
			after: wait,
		}
	}
	// The FSM accepts the takeover only if the node was last seen strictly
	// before the cutoff; quiet for exactly the window is quiet enough.
	return now.Add(-j.cfg.TakeoverWindow).UnixNano() + 1, nil
}

func (j *Journal) chainFor(c *pactv1.CertificateInfo) (chain, bundle [][]byte, err error) {
	tb := j.bundle.get()
	above, ok := tb.live[c.GetIssuerSerial()]
	if !ok {
		return nil, nil, fmt.Errorf("journal: intermediate %s of certificate %s is not in the trust bundle", c.GetIssuerSerial(), c.GetSerial())
	}
	// The leaf, its intermediate, and the journal CA that signed that.
	return append([][]byte{c.GetDer()}, above...), tb.der, nil
}

// enrollRefused logs a refused attempt locally, counts it against its
// source and its hardware identity, and warns when one identity keeps
// failing (someone guessing, or a node whose registration is wrong).
func (j *Journal) enrollRefused(ctx context.Context, req *pactv1.EnrollRequest, source string, err error) {
	reason := string(apierr.FromError(toStatus(err)).Reason)
	j.metrics.enrollFailures.WithLabelValues(reason).Inc()
	hw := req.GetHardware()
	key := strings.Join(hw.GetMacs(), ",") + "|" + hw.GetBmcSerial()
	warn, count := j.limiter.RecordFailure(source, key, j.cfg.Clock.Now())
	j.admission.failed(source)
	j.log.Warn("enrollment refused", logkey.Reason, reason, logkey.Err, err,
		logkey.MACs, hw.GetMacs(), logkey.BMCSerial, hw.GetBmcSerial(), logkey.Source, peerAddr(ctx))
	if warn {
		j.metrics.identityWarnings.Inc()
		j.log.Warn("repeated enrollment failures for one hardware identity", logkey.MACs, hw.GetMacs(), logkey.BMCSerial, hw.GetBmcSerial(), logkey.Failures, count)
	}
}

func peerNetAddr(ctx context.Context) net.Addr {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr
	}
	return nil
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
