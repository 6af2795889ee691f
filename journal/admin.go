package journal

import (
	"context"
	"fmt"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

type adminServer struct {
	pactv1.UnimplementedAdminServiceServer
	j *Journal
}

func (s *adminServer) RegisterNode(ctx context.Context, req *pactv1.RegisterNodeRequest) (*pactv1.RegisterNodeResponse, error) {
	p := principalFrom(ctx)
	if err := pki.ValidateName("node id", req.GetNodeId()); err != nil {
		return nil, err
	}
	if v := req.GetVcluster(); v != "" {
		if err := pki.ValidateName("vcluster", v); err != nil {
			return nil, err
		}
	}
	id, err := hwid.Normalize(req.GetHardware().GetMacs(), req.GetHardware().GetBmcSerial(), req.GetHardware().GetTpmEkHash())
	if err != nil {
		return nil, err
	}
	res, err := s.j.propose(ctx, &pactv1.Command{
		Actor: "admin/" + p.id.Name,
		Op: &pactv1.Command_RegisterNode{RegisterNode: &pactv1.RegisterNodeOp{
			NodeId:   req.GetNodeId(),
			Hardware: hardwareProto(id),
			Vcluster: req.GetVcluster(),
		}},
	})
	if err != nil {
		return nil, err
	}
	s.j.log.Info("node registered", logkey.NodeID, req.GetNodeId(), logkey.Actor, p.id.Name, logkey.MACs, id.MACs)
	return &pactv1.RegisterNodeResponse{Node: redact(res.Node)}, nil
}

func (s *adminServer) ListNodes(_ context.Context, req *pactv1.ListNodesRequest) (*pactv1.ListNodesResponse, error) {
	nodes := s.j.fsm.Nodes(req.GetState())
	out := make([]*pactv1.Node, len(nodes))
	for i, n := range nodes {
		out[i] = redact(n)
	}
	return &pactv1.ListNodesResponse{Nodes: out}, nil
}

func (s *adminServer) InspectNode(_ context.Context, req *pactv1.InspectNodeRequest) (*pactv1.InspectNodeResponse, error) {
	n, ok := s.j.fsm.Node(req.GetNodeId())
	if !ok {
		return nil, fmt.Errorf("%w: no node %q in the registry", raftfsm.ErrNodeNotEnrolled, req.GetNodeId())
	}
	return &pactv1.InspectNodeResponse{Node: redact(n)}, nil
}

// redact returns a copy of n without the certificate DER: operators see
// the serial, key fingerprint and expiry, and the listing stays small.
func redact(n *pactv1.Node) *pactv1.Node {
	if n == nil {
		return nil
	}
	out := &pactv1.Node{
		NodeId:               n.GetNodeId(),
		Hardware:             n.GetHardware(),
		State:                n.GetState(),
		Vcluster:             n.GetVcluster(),
		RegisteredAtUnixNano: n.GetRegisteredAtUnixNano(),
		RegisteredBy:         n.GetRegisteredBy(),
		UpdatedAtUnixNano:    n.GetUpdatedAtUnixNano(),
		ActivatedAtUnixNano:  n.GetActivatedAtUnixNano(),
	}
	if c := n.GetCert(); c != nil {
		out.Cert = &pactv1.CertificateInfo{
			Serial:        c.GetSerial(),
			SpkiSha256:    c.GetSpkiSha256(),
			NotBeforeUnix: c.GetNotBeforeUnix(),
			NotAfterUnix:  c.GetNotAfterUnix(),
			IssuerSerial:  c.GetIssuerSerial(),
		}
	}
	return out
}
