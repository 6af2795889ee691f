package v1rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// An agent's stream (Subscribe) and what rides on it: the registry
// following a SPIRE SVID or a standby certificate, the standby's issue,
// and boot attestation between renewals.

// ErrHalted: this journal stopped serving (raftnode: removed from the
// quorum, a log entry it may not skip, or, leading, a Raft store write
// stuck until it finishes). Every call but the status ones is answered so,
// as Unavailable, so clients move to another journal.
var ErrHalted = errors.New("journal: halted")

// Why a Subscribe stream ended (pact_journal_stream_drops_total{reason}).
const (
	DropClientGone          = "client_gone"          // the agent closed the stream or its connection died
	DropReleased            = "released"             // the agent stopped on purpose: it released its node (Release) before it closed the stream
	DropSendFailed          = "send_failed"          // sending an update to the agent failed
	DropShutdown            = "shutdown"             // this journal is stopping
	DropSuperseded          = "superseded"           // the certificate was replaced (a renewal; with a renewal grace, only once it ran out)
	DropNodeRevoked         = "node_revoked"         // the node was decommissioned or its serial revoked
	DropNodeFenced          = "node_fenced"          // an operator fenced the node
	DropCertExpired         = "cert_expired"         // the stream's certificate expired before the agent renewed it
	DropIntermediateRevoked = "intermediate_revoked" // the intermediate that signed the certificate was revoked
	DropJournalHalted       = "journal_halted"       // this journal stopped serving (removed, cut off by the quorum, a log entry it may not skip, a stuck write)
	DropOther               = "other"                // anything else (a node no longer in the registry, an SVID no longer accepted)
)

// DropReasons are every value of pact_journal_stream_drops_total's reason.
var DropReasons = []string{DropClientGone, DropReleased, DropSendFailed, DropShutdown, DropSuperseded, DropNodeRevoked, DropNodeFenced, DropCertExpired, DropIntermediateRevoked, DropJournalHalted, DropOther}

// StreamDropReason is why a stream ended: what the stream decided, else
// what its error says.
func StreamDropReason(decided string, err error) string {
	switch {
	case decided != "":
		return decided
	case err == nil:
		return DropClientGone
	case errors.Is(err, raftfsm.ErrNodeRevoked):
		return DropNodeRevoked
	case errors.Is(err, raftfsm.ErrNodeFenced):
		return DropNodeFenced
	case errors.Is(err, raftfsm.ErrStaleCertificate):
		return DropSuperseded
	}
	return DropOther
}

// Waker is one stream's wake-ups: a committed change of its node, a new
// trust bundle. They are level-triggered: a stream re-reads the registry
// when woken, so coalesced notifications lose nothing.
type Waker interface {
	NodeChanged() <-chan struct{}
	BundleChanged() <-chan struct{}
	// RenewedOverItsConnection is the serial of the certificate a
	// RenewCert made over this stream's own connection is replacing the
	// stream's with ("" if none was made).
	RenewedOverItsConnection() string
}

// ConnID names the connection a call came over: its two ends. Zero when
// the transport has no IP addresses (it then matches no other).
type ConnID struct{ Remote, Local netip.AddrPort }

// connOf is the connection of the call of ctx.
func connOf(ctx context.Context) ConnID {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return ConnID{}
	}
	return ConnID{Remote: addrPort(pr.Addr), Local: addrPort(pr.LocalAddr)}
}

func addrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	return netip.AddrPort{}
}

// StreamHub holds the streams of this journal and wakes those a committed
// change concerns.
type StreamHub interface {
	// Register adds a stream of the node opened with the certificate
	// serial over the connection conn; Unregister takes it out.
	Register(nodeID, serial string, conn ConnID) Waker
	Unregister(Waker)
	// RenewingOver notes that a RenewCert over conn, made with the node's
	// certificate serial, is replacing it with renewed: the streams of
	// that certificate on that connection are told no Superseded, their
	// agent made the renewal (Waker.RenewedOverItsConnection).
	RenewingOver(conn ConnID, nodeID, serial, renewed string)
	// HoldFirstState is a test's hold on a new stream before its first
	// state (a no-op in a shipped binary).
	HoldFirstState(ctx context.Context, serial string)
	// Streaming records that the stream has sent its first state: only
	// then is it the node's stream for a handover.
	Streaming(Waker)
	// HasStream says whether a stream of the node with serial streams
	// here; OthersStreaming whether another stream of w's node does.
	HasStream(nodeID, serial string) bool
	OthersStreaming(Waker) bool
	// Stopping is closed when the journal shuts down.
	Stopping() <-chan struct{}
}

// AttestStream is one stream's attestation between renewals (nil-safe:
// a stream that is not asked does nothing).
type AttestStream interface {
	Close()
	// Wait shortens the stream's wait to its next attestation event.
	Wait(now time.Time, wait time.Duration) time.Duration
	// Asked fires when a capture wants a fresh quote; MarkAsked notes it
	// for the next Step.
	Asked() <-chan struct{}
	MarkAsked()
	// Step notes an answer, counts a request left unanswered and makes
	// the request due.
	Step(ctx context.Context, stream pactv1.EnrollmentService_SubscribeServer) error
}

// BootAttester is boot attestation between renewals: per stream, and the
// agents' answers (AttestBoot).
type BootAttester interface {
	OpenStream(p *auth.Principal, req *pactv1.SubscribeRequest) AttestStream
	Answer(ctx context.Context, p *auth.Principal, req *pactv1.AttestBootRequest) (*pactv1.AttestBootResponse, error)
}

// Binder re-checks a stream's certificate against the registry
// (journal/auth): the node's current one, not revoked or fenced.
type Binder interface {
	CheckBinding(p *auth.Principal) error
}

// TrustBundle is the live trust bundle and its version.
type TrustBundle interface {
	Current() (der [][]byte, version uint64)
}

// StreamMeter counts how streams end.
type StreamMeter interface {
	StreamHandedOver()
	StreamDropped(reason string)
}

// HaltState says why this journal stopped serving ("" while it serves).
type HaltState interface {
	Halted() string
}

// IntermediateRecords are the registry's intermediates (raftfsm.FSM).
type IntermediateRecords interface {
	Intermediate(serial string) (*pactv1.Intermediate, bool)
}

// Subscribe holds the agent's stream. It sends the assignment and the trust
// bundle first, then whatever changes, and re-checks the caller's binding on
// every wake-up and at least every StreamRecheckInterval.
func (s *Enrollment) Subscribe(req *pactv1.SubscribeRequest, stream pactv1.EnrollmentService_SubscribeServer) (err error) {
	ctx := stream.Context()
	p := auth.FromContext(ctx)
	if p.SVID {
		// The registry follows the SVID (Registered or Inactive → Active,
		// or SPIRE's rotation) before the stream counts as the node's.
		if err := s.recordSVID(ctx, p); err != nil {
			return err
		}
	} else if err := s.activateStandby(ctx, p); err != nil {
		return err
	}
	w := s.cfg.Hub.Register(p.ID.Name, p.Serial, connOf(ctx))
	defer s.cfg.Hub.Unregister(w)
	// dropped names why the stream ends where the error alone does not
	// (pact_journal_stream_drops_total, monitoring.go). A stream whose
	// certificate a renewal replaced and that ends once the node streams
	// with its new one (here, or its agent closing the old channel) was
	// handed over: no drop.
	var dropped string
	var handedOver, notStreamed bool
	defer func() {
		if notStreamed {
			s.cfg.Logger.Info("agent stream closed", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Reason, "client_gone_before_first_state")
			return
		}
		if handedOver {
			s.cfg.Meter.StreamHandedOver()
			s.cfg.Logger.Info("agent stream closed", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Reason, "handed_over")
			return
		}
		reason := StreamDropReason(dropped, err)
		s.cfg.Meter.StreamDropped(reason)
		s.cfg.Logger.Info("agent stream closed", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Reason, reason)
	}()
	s.cfg.Logger.Info("agent stream opened", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Source, peerAddr(ctx), logkey.IdentitySource, p.IdentitySource())

	var sentVCluster string
	var sentBundle uint64
	var sentRenewNow bool
	// revokeAt is when the intermediate behind the stream's certificate is
	// revoked (zero: not retiring); the stream ends then.
	var revokeAt time.Time
	// supersededAt is when this journal saw a renewal replace the stream's
	// certificate (zero: it is current). The old channel serves, for at
	// most RenewalStreamGrace, until the node's new stream opens: the new
	// channel may wait in the handshake queue of a renewal storm.
	var supersededAt time.Time
	// sendFailed notes a failed send: the client gone, or a broken send.
	sendFailed := func(err error) error {
		dropped = DropSendFailed
		if ctx.Err() != nil {
			dropped = DropClientGone
		}
		return err
	}
	sendState := func(first bool) error {
		if r := s.cfg.Halt.Halted(); r != "" {
			// Cut off (or halted) since the stream opened: its agent
			// goes to a journal that serves (onCutOff wakes it).
			dropped = DropJournalHalted
			return fmt.Errorf("%w: journal %s does not serve: %s", ErrHalted, s.cfg.JournalID, r)
		}
		if now := s.cfg.Clock.Now(); now.After(p.Leaf.NotAfter) {
			dropped = DropCertExpired
			return fmt.Errorf("%w: the stream's certificate %s expired at %s; renew or re-enroll", auth.ErrUnauthenticated, p.Serial, p.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if err := s.cfg.Binder.CheckBinding(p); err != nil {
			if errors.Is(err, raftfsm.ErrNodeRevoked) || errors.Is(err, raftfsm.ErrNodeFenced) {
				// Tell the agent why before the stream ends; a stale
				// certificate (after a renewal) just ends the stream.
				pe := apierr.FromError(s.cfg.ToStatus(err))
				_ = stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Revoked{Revoked: &pactv1.Revoked{Reason: pe.Message, Code: string(pe.Reason)}}})
				return err
			}
			return s.supersededStream(stream, w, p, err, &supersededAt, &handedOver, &dropped)
		}
		n, _ := s.cfg.Registry.Node(p.ID.Name)
		if !p.SVID {
			if in, ok := s.cfg.Intermediates.Intermediate(n.GetCert().GetIssuerSerial()); ok && in.GetRevokeAtUnixNano() != 0 {
				revokeAt = time.Unix(0, in.GetRevokeAtUnixNano())
				if raftfsm.IntermediateRevoked(in, s.cfg.Clock.Now().UnixNano()) {
					dropped = DropIntermediateRevoked
					return fmt.Errorf("%w: certificate %s was signed by intermediate %s, revoked at %s (%s); re-enroll", auth.ErrUnauthenticated, p.Serial, in.GetSerial(), revokeAt.UTC().Format(time.RFC3339), in.GetRetireReason())
				}
				if !sentRenewNow {
					// The agent renews through its usual rotation; the new
					// certificate comes from a live intermediate.
					if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_RenewNow{RenewNow: &pactv1.RenewNow{
						Reason:           "intermediate " + in.GetSerial() + " is being retired: " + in.GetRetireReason(),
						IssuerSerial:     in.GetSerial(),
						RevokeAtUnixNano: in.GetRevokeAtUnixNano(),
					}}}); err != nil {
						return sendFailed(err)
					}
					sentRenewNow = true
					s.cfg.Logger.Info("agent told to renew: its intermediate is retiring", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.IssuerSerial, in.GetSerial())
				}
			}
		}
		if first || n.GetVcluster() != sentVCluster {
			if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Assignment{
				Assignment: &pactv1.Assignment{NodeId: n.GetNodeId(), Vcluster: n.GetVcluster()},
			}}); err != nil {
				return sendFailed(err)
			}
			sentVCluster = n.GetVcluster()
		}
		tbDER, tbVersion := s.cfg.Bundle.Current()
		if first || tbVersion != sentBundle {
			if err := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_TrustBundle{
				TrustBundle: &pactv1.TrustBundle{Der: tbDER},
			}}); err != nil {
				return sendFailed(err)
			}
			sentBundle = tbVersion
		}
		return nil
	}
	s.cfg.Hub.HoldFirstState(ctx, p.Serial)
	// A client that left before this stream sent its first state (gone
	// before the journal got to it, or its send failing for that) never
	// streamed: the node lost nothing here (its old stream, if a renewal
	// replaced it, still serves), so no drop and no handover.
	if ctx.Err() != nil {
		notStreamed = true
		return ctx.Err()
	}
	if err := sendState(true); err != nil {
		notStreamed = dropped == DropClientGone
		return err
	}
	s.cfg.Hub.Streaming(w)
	// Attestation between renewals (attest.go): a node the boot policy
	// says must attest is due its requests on every stream, answered or
	// counted unanswered.
	sa := s.cfg.Attest.OpenStream(p, req)
	defer sa.Close()
	for {
		// Wake at the next recheck, or just after the certificate expires.
		wait := s.cfg.StreamRecheckInterval
		if untilExpiry := p.Leaf.NotAfter.Sub(s.cfg.Clock.Now()) + time.Millisecond; untilExpiry < wait {
			wait = max(untilExpiry, 0)
		}
		if !revokeAt.IsZero() {
			if untilRevoked := revokeAt.Sub(s.cfg.Clock.Now()); untilRevoked < wait {
				wait = max(untilRevoked, 0)
			}
		}
		if !supersededAt.IsZero() {
			if untilGraceEnds := supersededAt.Add(s.cfg.RenewalStreamGrace).Sub(s.cfg.Clock.Now()); untilGraceEnds < wait {
				wait = max(untilGraceEnds, 0)
			}
		}
		wait = sa.Wait(s.cfg.Clock.Now(), wait)
		t := s.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			select {
			case <-s.cfg.Hub.Stopping():
				dropped = DropShutdown
			default:
				// The agent closed the old channel once its new one
				// streamed (wherever that is). The renewal may have
				// committed here before this goroutine saw it: under
				// load the client's leaving and the wake-up arrive
				// together, so ask the registry, not only supersededAt.
				// An agent that stops on purpose releases its node over
				// this channel before it closes the stream, and the
				// Release answers once applied here: its stream ended as
				// planned, with nothing to confirm with the leader.
				switch {
				case !supersededAt.IsZero() || s.replacedStream(w, p):
					handedOver = true
				case s.releasedStream(p):
					dropped = DropReleased
				default:
					handedOver = s.replacedOnceCaughtUp(ctx, w, p)
				}
			}
			return nil
		case <-s.cfg.Hub.Stopping():
			t.Stop()
			dropped = DropShutdown
			return fmt.Errorf("%w: journal shutting down", raftnode.ErrNoLeader)
		case <-w.NodeChanged():
		case <-w.BundleChanged():
		case <-sa.Asked():
			sa.MarkAsked()
		case <-t.C():
		}
		t.Stop()
		if err := sendState(false); err != nil {
			return err
		}
		if err := sa.Step(ctx, stream); err != nil {
			return sendFailed(err)
		}
	}
}

// supersededStream decides what a stream does whose journal-signed
// certificate is no longer the node's (err, from the binding check): it
// stays open, for at most RenewalStreamGrace from when this journal saw
// the change, until its agent closes it (the dual-channel swap does once
// its new stream has its first state) or, once the node streams here with
// its current certificate, until the re-check that sees so; it then ends
// as handed over, or at the grace's end as superseded. On entering the
// grace the stream tells the agent which certificate replaced its own: an
// agent that did not renew (someone else renewed with its key) ends the
// stream itself at once. Not when the renewal came over the stream's own
// connection: the agent that made it knows, and in a renewal storm the
// message is one more write for the journal and one more read for every
// agent (an agent whose renewal's answer was lost asks again with the same
// key either way). An SVID's stream, or any stream with the grace off,
// ends now.
func (s *Enrollment) supersededStream(stream pactv1.EnrollmentService_SubscribeServer, w Waker, p *auth.Principal, err error, supersededAt *time.Time, handedOver *bool, dropped *string) error {
	if !errors.Is(err, raftfsm.ErrStaleCertificate) {
		return err
	}
	now := s.cfg.Clock.Now()
	n, _ := s.cfg.Registry.Node(p.ID.Name)
	cur := n.GetCert().GetSerial()
	if p.SVID || s.cfg.RenewalStreamGrace <= 0 {
		// Ends now: handed over if the node streams here with its
		// current certificate already.
		*handedOver = cur != "" && s.cfg.Hub.HasStream(p.ID.Name, cur)
		return err
	}
	if supersededAt.IsZero() {
		*supersededAt = now
		if cur == "" || w.RenewedOverItsConnection() != cur {
			if serr := stream.Send(&pactv1.SubscribeResponse{Event: &pactv1.SubscribeResponse_Superseded{Superseded: &pactv1.Superseded{Serial: cur}}}); serr != nil {
				if stream.Context().Err() != nil {
					*handedOver = true // the agent already closed its old channel
				} else {
					*dropped = DropSendFailed
				}
				return serr
			}
		}
	}
	if cur != "" && s.cfg.Hub.HasStream(p.ID.Name, cur) {
		*handedOver = true
		return err
	}
	if now.Sub(*supersededAt) >= s.cfg.RenewalStreamGrace {
		*dropped = DropSuperseded
		return err
	}
	return nil
}

// replacedStream reports whether the stream w, whose client has left, was
// replaced by its node's next stream: a handover, not a drop, whatever
// identity either presents (a journal certificate a renewal replaced, an
// SVID SPIRE rotated, a swap between an SVID and its journal standby).
// Only a node left without a stream is a drop. The node is not when
// another stream of it here has sent its first state, or when the
// registry's current certificate of the node is no longer the stream's:
// a renewal replaced it (the handover the grace exists for, seen after
// the fact), or a stream of the newer identity made it current (an SVID is
// recorded, and a standby made current, only by a stream of it, here or
// at another journal).
func (s *Enrollment) replacedStream(w Waker, p *auth.Principal) bool {
	if s.cfg.Hub.OthersStreaming(w) {
		return true
	}
	n, ok := s.cfg.Registry.Node(p.ID.Name)
	if !ok || n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
		return false
	}
	cur := n.GetCert().GetSerial()
	return cur != "" && cur != p.Serial
}

// releasedStream reports whether the stream's certificate is the one its
// node's agent released (pact-agent's clean stop: Release, then the
// channel closed), and still the node's current one.
func (s *Enrollment) releasedStream(p *auth.Principal) bool {
	n, ok := s.cfg.Registry.Node(p.ID.Name)
	return ok && !p.SVID && raftfsm.Released(n) && n.GetCert().GetSerial() == p.Serial
}

// dropConfirmWait bounds how long a stream whose client left waits for
// this journal's copy of the registry to catch up before it is counted a
// drop (replacedOnceCaughtUp).
const dropConfirmWait = 10 * time.Second

// replacedOnceCaughtUp is replacedStream asked again once this journal's
// copy of the registry holds every entry committed before the client left
// (a read barrier). An agent closes its old channel only after its renewal
// committed and its new stream, perhaps on another journal, sent its first
// state; but a follower's copy can lag the commit by seconds in a renewal
// storm, and the old stream, asking that copy, saw no renewal and counted
// a drop.
// Only a stream whose client left with its certificate still current here
// asks: a node that died or a network that broke, not the handovers of a
// storm, so the barriers are few. A copy that cannot be confirmed within
// dropConfirmWait (no leader) counts the drop.
func (s *Enrollment) replacedOnceCaughtUp(streamCtx context.Context, w Waker, p *auth.Principal) bool {
	ctx, cancel := context.WithCancel(context.WithoutCancel(streamCtx))
	defer cancel()
	bound := s.cfg.Clock.NewTimer(dropConfirmWait)
	defer bound.Stop()
	go func() {
		select {
		case <-s.cfg.Hub.Stopping():
		case <-bound.C():
		case <-ctx.Done():
		}
		cancel()
	}()
	for {
		err := s.cfg.Confirmer.ReadBarrier(ctx)
		if s.replacedStream(w, p) {
			return true
		}
		if err == nil || ctx.Err() != nil {
			return false
		}
		// Behind the leader for longer than one barrier waits, or no
		// leader for a moment: ask again while the bound allows.
		pause := s.cfg.Clock.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			pause.Stop()
			return false
		case <-pause.C():
		}
	}
}

// SPIRE sites (docs/spire.md): journal/auth accepts an X.509-SVID of the
// SPIRE trust domain the journal trusts; the registry follows the SVIDs
// agents stream with here.

// recordSVID makes the registry follow an SVID that opens a stream: a
// Registered or Inactive node becomes Active with the SVID as its
// certificate, and an Active node whose recorded serial differs (SPIRE
// rotated it) gets the new one. One Raft write per stream open at most, and
// none when the registry already holds this SVID.
func (s *Enrollment) recordSVID(ctx context.Context, p *auth.Principal) error {
	n, ok := s.cfg.Registry.Node(p.ID.Name)
	if !ok {
		return fmt.Errorf("%w: node %s is not in the registry", auth.ErrPermission, p.ID.Name)
	}
	notAfter := p.Leaf.NotAfter.Unix()
	switch st := n.GetState(); {
	case st == pactv1.NodeState_NODE_STATE_REGISTERED, st == pactv1.NodeState_NODE_STATE_INACTIVE:
	case st == pactv1.NodeState_NODE_STATE_ACTIVE && n.GetCert().GetSerial() != p.Serial &&
		!(n.GetCert().GetIssuerSerial() == raftfsm.SPIREIssuer && notAfter < n.GetCert().GetNotAfterUnix()):
	default:
		return nil
	}
	res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{
		Actor: "agent/" + p.ID.Name,
		Op: &pactv1.Command_SvidSeen{SvidSeen: &pactv1.SVIDSeenOp{
			NodeId:       p.ID.Name,
			SpiffeId:     p.SPIFFEID,
			Serial:       p.Serial,
			NotAfterUnix: notAfter,
		}},
	})
	if err != nil {
		return err
	}
	if !res.Idempotent {
		s.cfg.Logger.Info("node identified by SPIRE SVID", logkey.NodeID, p.ID.Name, logkey.SPIFFEID, p.SPIFFEID, logkey.Serial, p.Serial,
			logkey.NotAfter, p.Leaf.NotAfter.UTC().Format(time.RFC3339), logkey.Was, raftfsm.StateName(n.GetState()))
	}
	return nil
}

// IssueStandby signs a journal certificate for an SVID-authenticated agent's
// fresh key and records it as the node's standby (raftfsm standbyIssued)
// before returning it. The node is known from the SVID, so neither the
// hardware identity nor the takeover window comes into it: the agent holds
// a certificate it can open a channel with the moment SPIRE stops serving
// it, while its SVID channel is still up (docs/spire.md).
func (s *Enrollment) IssueStandby(ctx context.Context, req *pactv1.IssueStandbyRequest) (*pactv1.IssueStandbyResponse, error) {
	// Bounded like enrollments and renewals: every SPIRE node of a site
	// asks for one after a journal restart.
	release, err := s.cfg.Admitter.AdmitStandby(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	p := auth.FromContext(ctx)
	if !p.SVID {
		return nil, fmt.Errorf("%w: IssueStandby is for agents authenticated with a SPIRE SVID; a journal-signed certificate renews with RenewCert", auth.ErrPermission)
	}
	// A node registered with a TPM is under its boot policy whatever
	// identity it presents: a standby carries no quote (tpm.go).
	if n, ok := s.cfg.Registry.Node(p.ID.Name); ok {
		if err := s.cfg.Checks.Unattested(ctx, n); err != nil {
			return nil, err
		}
	}
	issued, err := s.SignForNode(ctx, p.ID.Name, req.GetCsrDer())
	if err != nil {
		return nil, err
	}
	result, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{
		Actor: "agent/" + p.ID.Name,
		Op: &pactv1.Command_StandbyIssued{StandbyIssued: &pactv1.StandbyIssuedOp{
			NodeId:   p.ID.Name,
			SpiffeId: p.SPIFFEID,
			Cert:     CertInfo(issued),
		}},
	})
	if err != nil {
		// The signed certificate never leaves: it was not recorded.
		return nil, err
	}
	n := result.Node
	sb := n.GetStandbyCert()
	chain, bundle, err := s.cfg.Chains.ChainFor(sb)
	if err != nil {
		return nil, err
	}
	if !result.Idempotent {
		s.cfg.Logger.Info("standby certificate issued", logkey.NodeID, n.GetNodeId(), logkey.Serial, sb.GetSerial(),
			logkey.SPIFFEID, p.SPIFFEID, logkey.SVIDSerial, p.Serial, logkey.NotAfter, time.Unix(sb.GetNotAfterUnix(), 0).UTC().Format(time.RFC3339))
	}
	return &pactv1.IssueStandbyResponse{
		NodeId:         n.GetNodeId(),
		CertChainDer:   chain,
		TrustBundleDer: bundle,
		Vcluster:       n.GetVcluster(),
		Serial:         sb.GetSerial(),
		NotAfterUnix:   sb.GetNotAfterUnix(),
	}, nil
}

// activateStandby makes the registry follow an agent that opens a stream
// with its standby certificate: the standby becomes current. Nothing is
// written when the certificate is current already.
func (s *Enrollment) activateStandby(ctx context.Context, p *auth.Principal) error {
	n, ok := s.cfg.Registry.Node(p.ID.Name)
	if !ok || n.GetCert().GetSerial() == p.Serial || n.GetStandbyCert().GetSerial() != p.Serial {
		return nil
	}
	res, err := s.cfg.Proposer.Propose(ctx, &pactv1.Command{
		Actor: "agent/" + p.ID.Name,
		Op: &pactv1.Command_StandbyActivated{StandbyActivated: &pactv1.StandbyActivatedOp{
			NodeId: p.ID.Name,
			Serial: p.Serial,
		}},
	})
	if err != nil {
		return err
	}
	if !res.Idempotent {
		s.cfg.Logger.Info("standby certificate now current", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial,
			logkey.PreviousSerial, n.GetCert().GetSerial(), logkey.Source, peerAddr(ctx))
	}
	return nil
}

// AttestBoot is the agent's answer to a request of its stream: round one
// (EK and a fresh AK) gets a TPM challenge, round two (the proof bound to
// the stream certificate's key, and a quote over the challenge's nonce)
// is verified exactly as a renewal's and decided against the policy.
func (s *Enrollment) AttestBoot(ctx context.Context, req *pactv1.AttestBootRequest) (*pactv1.AttestBootResponse, error) {
	p := auth.FromContext(ctx)
	if p.SVID {
		return nil, fmt.Errorf("%w: SVID-authenticated agents are not asked for boot attestation", auth.ErrPermission)
	}
	return s.cfg.Attest.Answer(ctx, p, req)
}
