package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// IssueStandby signs a journal certificate for an SVID-authenticated agent's
// fresh key and records it as the node's standby (raftfsm standbyIssued)
// before returning it. The node is known from the SVID, so neither the
// hardware identity nor the takeover window comes into it: the agent holds
// a certificate it can open a channel with the moment SPIRE stops serving
// it, while its SVID channel is still up (docs/spire.md).
func (s *enrollmentServer) IssueStandby(ctx context.Context, req *pactv1.IssueStandbyRequest) (*pactv1.IssueStandbyResponse, error) {
	j := s.j
	// Bounded like enrollments and renewals: every SPIRE node of a site
	// asks for one after a journal restart.
	release, err := j.gate.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	p := principalFrom(ctx)
	if !p.SVID {
		return nil, fmt.Errorf("%w: IssueStandby is for agents authenticated with a SPIRE SVID; a journal-signed certificate renews with RenewCert", ErrPermission)
	}
	// A node registered with a TPM is under its boot policy whatever
	// identity it presents: a standby carries no quote (tpm.go).
	if n, ok := j.fsm.Node(p.ID.Name); ok {
		if err := j.unattestedIssue(ctx, n); err != nil {
			return nil, err
		}
	}
	issued, err := j.signForNode(ctx, p.ID.Name, req.GetCsrDer())
	if err != nil {
		return nil, err
	}
	result, err := j.propose(ctx, &pactv1.Command{
		Actor: "agent/" + p.ID.Name,
		Op: &pactv1.Command_StandbyIssued{StandbyIssued: &pactv1.StandbyIssuedOp{
			NodeId:   p.ID.Name,
			SpiffeId: p.SPIFFEID,
			Cert:     certInfo(issued),
		}},
	})
	if err != nil {
		// The signed certificate never leaves: it was not recorded.
		return nil, err
	}
	n := result.Node
	sb := n.GetStandbyCert()
	chain, bundle, err := j.chainFor(sb)
	if err != nil {
		return nil, err
	}
	if !result.Idempotent {
		j.log.Info("standby certificate issued", logkey.NodeID, n.GetNodeId(), logkey.Serial, sb.GetSerial(),
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
func (j *Journal) activateStandby(ctx context.Context, p *principal) error {
	n, ok := j.fsm.Node(p.ID.Name)
	if !ok || n.GetCert().GetSerial() == p.Serial || n.GetStandbyCert().GetSerial() != p.Serial {
		return nil
	}
	res, err := j.propose(ctx, &pactv1.Command{
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
		j.log.Info("standby certificate now current", logkey.NodeID, p.ID.Name, logkey.Serial, p.Serial,
			logkey.PreviousSerial, n.GetCert().GetSerial(), logkey.Source, peerAddr(ctx))
	}
	return nil
}
