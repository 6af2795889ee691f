package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// SPIRE sites (docs/spire.md): journal/auth accepts an X.509-SVID of the
// SPIRE trust domain the journal trusts; the registry follows the SVIDs
// agents stream with here.

// recordSVID makes the registry follow an SVID that opens a stream: a
// Registered or Inactive node becomes Active with the SVID as its
// certificate, and an Active node whose recorded serial differs (SPIRE
// rotated it) gets the new one. One Raft write per stream open at most, and
// none when the registry already holds this SVID.
func (j *Journal) recordSVID(ctx context.Context, p *auth.Principal) error {
	n, ok := j.fsm.Node(p.ID.Name)
	if !ok {
		return fmt.Errorf("%w: node %s is not in the registry", ErrPermission, p.ID.Name)
	}
	notAfter := p.Leaf.NotAfter.Unix()
	switch st := n.GetState(); {
	case st == pactv1.NodeState_NODE_STATE_REGISTERED, st == pactv1.NodeState_NODE_STATE_INACTIVE:
	case st == pactv1.NodeState_NODE_STATE_ACTIVE && n.GetCert().GetSerial() != p.Serial &&
		!(n.GetCert().GetIssuerSerial() == raftfsm.SPIREIssuer && notAfter < n.GetCert().GetNotAfterUnix()):
	default:
		return nil
	}
	res, err := j.propose(ctx, &pactv1.Command{
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
		j.log.Info("node identified by SPIRE SVID", logkey.NodeID, p.ID.Name, logkey.SPIFFEID, p.SPIFFEID, logkey.Serial, p.Serial,
			logkey.NotAfter, p.Leaf.NotAfter.UTC().Format(time.RFC3339), logkey.Was, raftfsm.StateName(n.GetState()))
	}
	return nil
}

// Reload re-reads what the journal can take without a restart: today the
// SPIRE trust bundle file (--spire-bundle). Every other setting needs a
// restart. A bundle that does not parse leaves the previous one in force
// and is returned as an error.
func (j *Journal) Reload() error { return j.auth.Reload() }
