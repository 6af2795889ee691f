package v1rpc

import (
	"context"
	"fmt"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// OutcomeRetried: a RenewCert whose first answer was lost, answered again
// (pact_journal_renew_total{result="retried"}).
const OutcomeRetried Outcome = "retried"

// RenewCert renews the caller's certificate for a key it proves by the
// CSR: signed only once the node's key and TPM checks pass, answered only
// once the Renew command committed.
func (s *Enrollment) RenewCert(ctx context.Context, req *pactv1.RenewCertRequest) (resp *pactv1.RenewCertResponse, err error) {
	p := auth.FromContext(ctx)
	if p.Replaced {
		// Nothing signed or written: not held to the storm's bound.
		return s.renewalRetried(p, req)
	}
	// A renewal storm (or every agent of a restarted journal reconnecting)
	// is bounded like an enrollment storm.
	release, err := s.cfg.Admitter.AdmitRenewal(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		outcome := OutcomeOK
		switch {
		case err != nil:
			outcome = OutcomeRefused
		case resp.GetTpmChallenge() != nil:
			outcome = OutcomeTPMChallenge
		}
		release(outcome)
	}()
	if p.SVID {
		return nil, fmt.Errorf("%w: SVID-authenticated agents renew through SPIRE, not the journal", auth.ErrPermission)
	}
	if req.GetCurrentSerial() != p.Serial {
		return nil, fmt.Errorf("%w: current_serial %q is not the serial of the certificate this call was made with", ErrInvalidArgument, req.GetCurrentSerial())
	}
	if ch, err := s.cfg.Checks.RenewalTPM(ctx, p.ID.Name, req); err != nil || ch != nil {
		return &pactv1.RenewCertResponse{TpmChallenge: ch}, err
	}
	issued, err := s.SignForNode(ctx, p.ID.Name, req.GetCsrDer())
	if err != nil {
		return nil, err
	}
	// Before the command: its apply wakes the stream on this connection.
	s.cfg.Hub.RenewingOver(connOf(ctx), p.ID.Name, p.Serial, issued.Serial)
	// Batched like an activation: a renewal storm's Renew commands share
	// Raft entries (one log write, fsync and replication each) instead of
	// one entry per renewal; the answer still waits for this one's commit.
	result, err := s.cfg.Batcher.ProposeBatched(ctx, &pactv1.Command{
		Actor: "agent/" + p.ID.Name,
		Op: &pactv1.Command_Renew{Renew: &pactv1.RenewOp{
			NodeId:         p.ID.Name,
			PreviousSerial: p.Serial,
			Cert:           CertInfo(issued),
		}},
	})
	if err != nil {
		return nil, err
	}
	n := result.Node
	chain, bundle, err := s.cfg.Chains.ChainFor(n.GetCert())
	if err != nil {
		return nil, err
	}
	s.cfg.Logger.Info("certificate renewed", logkey.NodeID, n.GetNodeId(), logkey.Serial, n.GetCert().GetSerial(), logkey.PreviousSerial, p.Serial)
	return s.renewAnswer(n, chain, bundle), nil
}

func (s *Enrollment) renewAnswer(n *pactv1.Node, chain [][]byte, bundle [][]byte) *pactv1.RenewCertResponse {
	return &pactv1.RenewCertResponse{
		NodeId:         n.GetNodeId(),
		CertChainDer:   chain,
		TrustBundleDer: bundle,
		Vcluster:       n.GetVcluster(),
		Serial:         n.GetCert().GetSerial(),
		NotAfterUnix:   n.GetCert().GetNotAfterUnix(),

		ServerTimeUnixNano: s.cfg.Clock.Now().UnixNano(),
	}
}

// renewalRetried answers a RenewCert made with a certificate a renewal
// replaced (the interceptor confirmed that with the leader): the agent's
// renewal committed, its answer was lost (a deadline in a storm), and it
// asks again with the same new key. The caller has proved both keys, the
// old one in the handshake and the new one by the CSR's signature, so it
// gets the certificate that committed once more; nothing is signed or
// written. Without it the agent would have to enroll again, a new
// connection and a new channel in the storm that lost the answer. Any
// other key is refused stale, as every other call from a replaced
// certificate is.
func (s *Enrollment) renewalRetried(p *auth.Principal, req *pactv1.RenewCertRequest) (*pactv1.RenewCertResponse, error) {
	if req.GetCurrentSerial() != p.Serial {
		return nil, fmt.Errorf("%w: current_serial %q is not the serial of the certificate this call was made with", ErrInvalidArgument, req.GetCurrentSerial())
	}
	csr, err := ca.ParseCSR(req.GetCsrDer())
	if err != nil {
		s.cfg.Admitter.CountRenewal(OutcomeRefused)
		return nil, err
	}
	n, ok := s.cfg.Registry.Node(p.ID.Name)
	if cur := n.GetCert(); !ok || cur.GetSerial() == p.Serial || cur.GetSpkiSha256() != pki.SPKIFingerprintRaw(csr.SPKI) {
		s.cfg.Admitter.CountRenewal(OutcomeRefused)
		return nil, auth.StaleError(p)
	}
	chain, bundle, err := s.cfg.Chains.ChainFor(n.GetCert())
	if err != nil {
		return nil, err
	}
	s.cfg.Admitter.CountRenewal(OutcomeRetried)
	s.cfg.Logger.Info("renewal answered again: its first answer was lost", logkey.NodeID, n.GetNodeId(), logkey.Serial, n.GetCert().GetSerial(), logkey.PreviousSerial, p.Serial)
	return s.renewAnswer(n, chain, bundle), nil
}

// SignForNode signs a CSR of an authenticated node (RenewCert,
// IssueStandby): the key must pass the CSR policy and the node's admission
// (not fenced, not another node's key) first. The certificate leaves only
// once the caller's command recording it commits.
func (s *Enrollment) SignForNode(ctx context.Context, nodeID string, csrDER []byte) (*ca.Issued, error) {
	csr, err := ca.ParseCSR(csrDER)
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Checks.CheckKey(ctx, nodeID, pki.SPKIFingerprintRaw(csr.SPKI)); err != nil {
		return nil, err
	}
	return s.cfg.Signer.SignAgent(ctx, csr, nodeID)
}

// Release records that the calling agent stops on purpose, so its node's
// next enrollment (same hardware, new key) need not wait for the takeover
// window. The interceptor has bound the caller to the node's current
// certificate; an SVID is not the journal's to release.
func (s *Enrollment) Release(ctx context.Context, _ *pactv1.ReleaseRequest) (*pactv1.ReleaseResponse, error) {
	p := auth.FromContext(ctx)
	if p.SVID {
		return &pactv1.ReleaseResponse{}, nil
	}
	res, err := s.cfg.Batcher.ProposeBatched(ctx, &pactv1.Command{
		Actor: "agent/" + p.ID.Name,
		Op:    &pactv1.Command_Release{Release: &pactv1.ReleaseOp{NodeId: p.ID.Name, Serial: p.Serial}},
	})
	if err != nil {
		return nil, err
	}
	released := res.Node.GetReleasedSerial() == p.Serial
	s.cfg.Logger.Info("node released by its agent", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial, logkey.Released, released)
	return &pactv1.ReleaseResponse{Released: released}, nil
}

// Ping answers an agent's health check with who it is to the journal and
// the journal's clock.
func (s *Enrollment) Ping(ctx context.Context, _ *pactv1.PingRequest) (*pactv1.PingResponse, error) {
	p := auth.FromContext(ctx)
	return &pactv1.PingResponse{
		NodeId:             p.ID.Name,
		Serial:             p.Serial,
		IdentitySource:     p.IdentitySource(),
		JournalId:          s.cfg.JournalID,
		ServerTimeUnixNano: s.cfg.Clock.Now().UnixNano(),
	}, nil
}
