// Enrollment: a fresh key and CSR signed by a journal on the strength of
// the node's hardware identity, and the choice of identity to present.

package agent

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/transport"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// enroll asks the next journal to sign the enrollment key on the strength
// of the node's hardware identity. The key is made for the first attempt
// and kept until a journal signs it.
func (a *Agent) enroll(ctx context.Context) (err error) {
	a.metrics.attempts.Add(1)
	defer func() { a.attempted("enroll", err) }()
	if a.enrollKey == nil {
		if a.enrollKey, a.enrollCSR, err = newKey(); err != nil {
			return err
		}
	}
	key, csr := a.enrollKey, a.enrollCSR
	// A TPM that exists but fails does not stop a node that needs none
	// (most nodes of a site may have a TPM and be registered without
	// one): the agent enrolls without it, and only if the journal then
	// asks for a TPM is the failure reported, as a retryable one.
	att, tpmErr := a.openTPM()
	if tpmErr != nil {
		a.log.Warn("cannot use the TPM; enrolling without TPM attestation", logkey.TPMDevice, a.cfg.TPMDevice, logkey.Err, tpmErr)
	}
	if att != nil {
		defer att.Close()
	}
	req := &pactv1.EnrollRequest{
		Hardware: &pactv1.HardwareIdentity{Macs: a.hw.MACs, BmcSerial: a.hw.BMCSerial, TpmEkHash: a.hw.EKHash},
		CsrDer:   csr,
	}
	if a.cfg.JoinTokenFile != "" {
		tok, err := readJoinToken(a.cfg.JoinTokenFile)
		if err != nil {
			a.fail("enroll", err, a.latestJournal())
			return err
		}
		req.Credentials = &pactv1.EnrollCredentials{JoinToken: tok}
	}
	if att != nil {
		// The EK hash the node reports is its TPM's, whatever
		// --tpm-ek-hash says: the journal checks the two agree.
		req.Hardware.TpmEkHash = att.EKHash()
		if req.Credentials == nil {
			req.Credentials = &pactv1.EnrollCredentials{}
		}
		req.Credentials.Tpm = &pactv1.TpmAttestation{EkPublic: att.EKPublic(), AkPublic: att.AKPublic()}
	}
	addr := a.pick()
	conn, err := a.enrollConn(ctx, addr)
	var resp *pactv1.EnrollResponse
	if err == nil {
		defer conn.Close()
		resp, err = a.callEnroll(ctx, conn, req)
	}
	challenged := err == nil && resp.GetTpmChallenge() != nil
	if challenged {
		resp, err = a.answerTPM(ctx, conn, req, key, att, resp.GetTpmChallenge())
	}
	if err != nil && a.bridge(err) {
		return errBridged // the journal's certificate is good on the journal's time
	}
	if err == nil {
		_, err = a.observeJournalTime(unixNano(resp.GetServerTimeUnixNano()))
	}
	if err == nil {
		var id *identity.Identity
		var who pki.Identity
		if id, who, err = journalIdentity(key, a.trustPool(), resp.GetCertChainDer(), resp.GetTrustBundleDer(), a.cfg.Clock.Now(), a.heldCerts()); err == nil {
			a.adopt(id, who, resp.GetVcluster())
			a.tpmAttested.Store(challenged)
			a.enrollKey, a.enrollCSR = nil, nil // the next enrollment makes a new one
			a.renewUnknown.Store("")
			a.notBusy()
			a.setActiveIn(nil)
			attrs := []any{logkey.Identity, id, logkey.NodeID, who.Name, logkey.VCluster, vclusterLabel(resp.GetVcluster()), logkey.Addr, addr}
			if att != nil {
				attrs = append(attrs, tpmAttrs(challenged, att.EKHash())...)
			}
			a.log.Info("enrolled", attrs...)
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if busy, ok := busyOf(err); ok {
		// Not a failure: come back to this journal when it said.
		a.stay(addr)
		err = fmt.Errorf("agent: enroll at %s: %w", addr, err)
		a.journalBusy("enroll", err, busy)
		return err
	}
	if tpmErr != nil && apierr.FromError(err).Reason == apierr.TPMRequired {
		// The node needs its TPM and the TPM failed here: not the
		// journal's final word, retry.
		err = fmt.Errorf("%w (the journal answered %s)", tpmErr, apierr.TPMRequired)
	}
	// ALREADY_ACTIVE is final for an agent that never held this node's
	// identity (a second agent on the same hardware). One that did is
	// re-enrolling after losing it (expired, superseded, SPIRE gone): the
	// active identity is its own, and the journal will take it over once
	// the node has been quiet long enough.
	if refusal(err) && !(apierr.FromError(err).Reason == apierr.AlreadyActive && a.heldIdentity()) {
		err = a.explainRefusal(err)
	}
	a.setActiveIn(err)
	a.fail("enroll", fmt.Errorf("agent: enroll at %s: %w", addr, err), a.latestJournal())
	return err
}

// setActiveIn records which federated domain's claim refused the
// enrollment (err ACTIVE_IN_ANOTHER_DOMAIN), or that none did.
func (a *Agent) setActiveIn(err error) {
	other := ""
	if pe := apierr.FromError(err); pe != nil && pe.Reason == apierr.ActiveInAnotherDomain {
		other = pe.OtherDomain
		if other == "" {
			other = "another domain (the journal named none)"
		}
	}
	a.mu.Lock()
	a.activeIn = other
	a.mu.Unlock()
}

// enrollConn connects to the journal at addr for an enrollment: both
// rounds of a TPM enrollment go over it, to the journal that alone holds
// the challenge, at the cost of one TLS handshake (a second connection for
// round two was a second handshake per attested enrollment, and a second
// wait in a storm's handshake queue). The connection and its handshake
// fail as gRPC reports them: UNAVAILABLE, with the handshake's own error
// (enrollconn.go). The journal may hold the handshake in its queue
// (HandshakeQueueWait) before a call's own time starts.
func (a *Agent) enrollConn(ctx context.Context, addr string) (*grpc.ClientConn, error) {
	hctx, hcancel := context.WithTimeout(ctx, a.cfg.CallTimeout+a.cfg.HandshakeQueueWait)
	defer hcancel()
	raw, err := a.dial(hctx, addr)
	if err != nil {
		return nil, &connError{stage: stageDial, err: err}
	}
	creds := channel.NewClientCredentials(a.cfg.KeyExchange.Apply(channel.ClientTLSConfig(a.rot.Roots(), nil, a.cfg.Clock.Now)))
	tlsConn, info, err := creds.ClientHandshake(hctx, addr, raw)
	if err != nil {
		_ = raw.Close()
		return nil, creds.Explain(&connError{stage: stageHandshake, err: err})
	}
	opts := append(transport.ClientOptions(), a.cfg.DialOptions...)
	opts = append(opts, grpc.WithTransportCredentials(handshaken{info: info}), grpc.WithContextDialer(oneConn(tlsConn)))
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		_ = tlsConn.Close()
		return nil, err
	}
	return conn, nil
}

// callEnroll makes one Enroll call over conn.
func (a *Agent) callEnroll(ctx context.Context, conn *grpc.ClientConn, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	defer cancel()
	return pactv1.NewEnrollmentServiceClient(conn).Enroll(cctx, req)
}

// adopt makes a journal-signed identity the journal provider's.
func (a *Agent) adopt(id *identity.Identity, who pki.Identity, vcluster string) {
	a.mu.Lock()
	a.lastJournal, a.nodeID, a.vcluster = id, who.Name, vcluster
	a.mu.Unlock()
	a.jp.Set(id)
}

// dropRefusedJournalIdentity forgets the journal-signed identity when the
// journal no longer takes it (superseded by another certificate, or not
// authenticated: its intermediate revoked, say), so the agent enrolls
// again. A decommissioned node is handled by the caller: it fails closed.
func (a *Agent) dropRefusedJournalIdentity(id *identity.Identity, err error) {
	if id == nil || id.Source != identity.SourceJournal {
		return
	}
	pe := apierr.FromError(err)
	// Replaced, or not authenticated (its intermediate revoked, say). A
	// certificate that is merely not valid yet at the journal's clock is
	// kept: that is clock skew, and a new one would fare no better.
	if pe.Reason != apierr.StaleCertificate && (pe.Code != codes.Unauthenticated || pe.Reason == apierr.CertNotYetValid || pe.Reason == "") {
		return
	}
	cur, _ := a.jp.Current(context.Background())
	if cur == nil || cur.Serial() != id.Serial() {
		return
	}
	a.log.Warn("the journal no longer accepts this node's certificate; enrolling again", logkey.Serial, id.Serial(), logkey.Err, err)
	a.jp.Clear(fmt.Sprintf("certificate serial %s no longer accepted by the journal (%s); enrolling again", id.Serial(), pe.Reason))
}

// candidates are the identities the providers have now, best first (the
// cascade's ranking). When there is none, err says why (it wraps
// identity.ErrExpired if one expired).
func (a *Agent) candidates(ctx context.Context) ([]*identity.Identity, error) {
	var out []*identity.Identity
	var errs []error
	for _, o := range a.offers(ctx) {
		if o.Err != nil {
			errs = append(errs, o.Err)
			continue
		}
		out = append(out, o.Identity)
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// wanted is the identity the live channel should move to, or nil: a better
// source that has one, a newer identity from the same source (a renewal, an
// SVID rotation), or, when the active source has none any more (SPIRE went
// away), the best that has.
func (a *Agent) wanted(ctx context.Context, cur *identity.Identity) *identity.Identity {
	for _, o := range a.offers(ctx) {
		id := o.Identity
		if id == nil {
			continue
		}
		switch {
		case id.Source.Rank() > cur.Source.Rank():
			return id
		case id.Source == cur.Source:
			if id.Serial() != cur.Serial() {
				return id
			}
			return nil
		default:
			if id.Source != identity.SourceStatic {
				return id
			}
			return nil // never fall back to the bootstrap identity while a better channel lives
		}
	}
	return nil
}

// needEnroll: there is no journal-signed identity, and no live channel
// other than one on the bootstrap identity. While any other channel lives
// the journal would refuse the enrollment anyway (the node is active and
// streaming: it is this agent); the agent enrolls once that channel is gone.
func (a *Agent) needEnroll(ctx context.Context, act *channel.Channel, alive bool) bool {
	if _, err := a.jp.Current(ctx); err == nil {
		return false
	}
	return !alive || act.Identity().Source == identity.SourceStatic
}

// pick returns the next journal address, round robin.
func (a *Agent) pick() string {
	addr := a.cfg.JournalAddrs[a.next%len(a.cfg.JournalAddrs)]
	a.next++
	return addr
}

// stay makes the next pick addr again: the journal answered busy and named
// when to come back, and coming back there keeps the place its
// reservation schedule gave this node.
func (a *Agent) stay(addr string) {
	for i, j := range a.cfg.JournalAddrs {
		if j == addr {
			a.next = i
			return
		}
	}
}

func (a *Agent) explainRefusal(err error) error {
	pe := apierr.FromError(err)
	hint := ""
	switch pe.Reason {
	case apierr.NodeNotEnrolled:
		hint = fmt.Sprintf("; register this node first: pact node enroll NODE %s", registerFlags(a.hw))
	case apierr.AlreadyActive:
		hint = "; another agent holds this node's identity. If this node rebooted, wait for it to turn inactive; otherwise investigate a spoofed identity"
	case apierr.NodeRevoked:
		hint = "; the node was decommissioned: an operator must register it again"
	case apierr.HardwareIdentityConflict:
		hint = "; the reported MACs/BMC serial belong to more than one registered node: fix the registry (pact node inspect)"
	case apierr.NodeFenced:
		hint = "; an operator fenced (quarantined) this node: restart the agent after pact node unfence"
	case apierr.JoinTokenRequired:
		// The journal's message says how to make one and pass it.
	case apierr.JoinTokenInvalid:
		hint = "; put a new token (pact node token create NODE --out FILE) into --join-token-file"
	case apierr.KeyInUse:
		hint = "; the new key is already another node's: this should not happen with a fresh key; investigate"
	case apierr.TPMRequired:
		hint = fmt.Sprintf("; the node is registered with a TPM: run pact-agent where it can open the TPM (--tpm-device, now %q; see docs/tpm.md)", a.cfg.TPMDevice)
	case apierr.TPMEKMismatch:
		hint = "; this TPM's endorsement key is not the one registered: if this is the right machine, re-register it with the hash `pact-agent tpm-ek` prints; otherwise investigate (docs/tpm.md)"
	case apierr.TPMAKRefused, apierr.TPMAttestationFailed:
		hint = "; the TPM could not prove it holds the registered endorsement key (docs/tpm.md)"
	case apierr.BootPolicyRefused:
		hint = "; what this node booted is not what the boot policy of its vCluster allows: boot an image the policy allows, or have an operator change the policy (pact boot-policy show; docs/tpm.md, \"Nodes fenced or refused by the boot policy\")"
	case apierr.TPMQuoteRefused:
		hint = "; the TPM's quote of this boot, or its event log, did not verify: check --tpm-event-log and the journal's log for this node (docs/tpm.md, \"Measured boot\")"
	}
	return fmt.Errorf("%w: %w%s", ErrRefused, pe, hint)
}

func registerFlags(hw hwid.Identity) string {
	s := ""
	for _, m := range hw.MACs {
		s += " --mac " + m
	}
	if hw.BMCSerial != "" {
		s += " --bmc-serial " + hw.BMCSerial
	}
	return s[min(1, len(s)):]
}
