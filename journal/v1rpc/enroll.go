package v1rpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// ErrOverloaded: too many enrollments in flight (the enrollment gate,
// the failure budget's queue).
var ErrOverloaded = errors.New("journal: too many enrollments in flight")

// Outcome is how an Enroll ended, the result label of
// pact_journal_enroll_total.
type Outcome string

// The outcomes of an Enroll.
const (
	OutcomeOK           Outcome = "ok"            // a certificate issued
	OutcomeRetry        Outcome = "retry"         // same key, same certificate back, no write
	OutcomeTakeover     Outcome = "takeover"      // a new key for an Active node after the takeover window
	OutcomeTPMChallenge Outcome = "tpm_challenge" // round one of TPM attestation answered with a challenge
	OutcomeRefused      Outcome = "refused"       // the caller's fault: counted and rate limited
	OutcomeRateLimited  Outcome = "rate_limited"  // refused before any work (admission, the enrollment gate)
	OutcomeError        Outcome = "error"         // the journal's fault (no leader, a write that failed)
)

// Admitter admits an Enroll before it costs anything: the caller's
// source against the failure budget, then a slot of the enrollment gate
// (a refusal is counted rate_limited). finish records how the call ended
// (a success or a refusal against the source, the outcome's count) and
// then frees the slot and the budget, so the next caller waiting sees what
// this one spent.
//
// AdmitRenewal bounds a renewal storm the same way (the gate only: a
// renewal's caller has authenticated) and finish counts its outcome;
// CountRenewal counts a renewal that took no slot.
type Admitter interface {
	AdmitEnroll(ctx context.Context) (finish func(req *pactv1.EnrollRequest, outcome Outcome, err error), err error)
	AdmitRenewal(ctx context.Context) (finish func(Outcome), err error)
	CountRenewal(Outcome)
	// AdmitStandby bounds the standbys every SPIRE node of a site asks
	// for after a journal restart (the gate).
	AdmitStandby(ctx context.Context) (release func(), err error)
}

// Chains gives the chain above a committed certificate (its intermediate
// and the journal CA that signed that) and the trust bundle, from the
// live trust bundle.
type Chains interface {
	ChainFor(c *pactv1.CertificateInfo) (chain, bundle [][]byte, err error)
}

// EnrollChecks are the checks of an enrollment that rest on more than the
// registry: the node's credentials, its takeover window, the claims of
// federated domains, and the answer's chain.
type EnrollChecks interface {
	// CheckKey refuses a fenced node, or a key that is another node's
	// (confirmed with the leader).
	CheckKey(ctx context.Context, nodeID, spki string) error
	// CheckCredentials checks what the node's policy requires beside its
	// hardware, before anything is signed. A TPM node's first round gets
	// a challenge (nothing is signed or written until the TPM answers).
	CheckCredentials(ctx context.Context, node *pactv1.Node, req *pactv1.EnrollRequest, csr *ca.CSR) (*pactv1.PresentedCredentials, *pactv1.TpmChallenge, error)
	// TakeoverCutoff decides whether an Active node's hardware may enroll
	// with a new key, and from when the FSM must see no stream of it.
	TakeoverCutoff(node *pactv1.Node) (int64, error)
	// Claims decides on the claims federated domains hold on the node's
	// hardware: the note the activation records, or a refusal.
	Claims(ctx context.Context, node *pactv1.Node) (string, error)
	// RenewalTPM is a TPM node's renewal attestation: a challenge for
	// round one, a refusal, or nil when the node's TPM has proved the
	// renewal's key (or it has none).
	RenewalTPM(ctx context.Context, nodeID string, req *pactv1.RenewCertRequest) (*pactv1.TpmChallenge, error)
	// Unattested judges a certificate about to be issued without a quote
	// (a standby for an SVID) to a node registered with a TPM, under its
	// boot policy: an agent cannot leave its TPM out to escape it.
	Unattested(ctx context.Context, node *pactv1.Node) error
	// EKRefusal says whether err rests on the registered TPM EK hash (so
	// is decided again after the leader confirmed it); TPMMismatch is the
	// TPM refusal of a hardware mismatch, or nil; TPMRefusal whether err
	// is a TPM attestation refusal (the caller's).
	EKRefusal(err error) bool
	TPMMismatch(m hwid.Mismatch, nodeID string) error
	TPMRefusal(err error) bool
}

// Signer signs an agent's CSR with this journal's live intermediate, or
// says why it may not sign now.
type Signer interface {
	SignAgent(ctx context.Context, csr *ca.CSR, nodeID string) (*ca.Issued, error)
}

// Enrollment is the EnrollmentService: an agent's calls.
type Enrollment struct {
	pactv1.UnimplementedEnrollmentServiceServer
	cfg EnrollConfig
}

// EnrollConfig is what Enroll depends on beside Config's.
type EnrollConfig struct {
	Config
	Admitter Admitter
	Checks   EnrollChecks
	Signer   Signer
	Batcher  BatchProposer
	Chains   Chains
	// Domain is the pact domain the answers name.
	Domain string

	// The stream's (stream.go).
	Hub           StreamHub
	Attest        BootAttester
	Binder        Binder
	Bundle        TrustBundle
	Meter         StreamMeter
	Halt          HaltState
	Intermediates IntermediateRecords
	// StreamRecheckInterval is the longest a stream goes without checking
	// its certificate again; RenewalStreamGrace how long a stream whose
	// certificate a renewal replaced serves until the new one streams.
	StreamRecheckInterval, RenewalStreamGrace time.Duration
}

// Validate says which dependency is missing.
func (c EnrollConfig) Validate() error {
	var errs []error
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		set  bool
	}{{"Admitter", c.Admitter != nil}, {"Checks", c.Checks != nil}, {"Signer", c.Signer != nil}, {"Batcher", c.Batcher != nil}, {"Chains", c.Chains != nil}, {"Domain", c.Domain != ""},
		{"Hub", c.Hub != nil}, {"Attest", c.Attest != nil}, {"Binder", c.Binder != nil}, {"Bundle", c.Bundle != nil},
		{"Meter", c.Meter != nil}, {"Halt", c.Halt != nil}, {"Intermediates", c.Intermediates != nil},
		{"StreamRecheckInterval", c.StreamRecheckInterval > 0}} {
		if !d.set {
			errs = append(errs, fmt.Errorf("v1rpc: %s is required", d.name))
		}
	}
	return errors.Join(errs...)
}

// NewEnrollment returns the enrollment handlers over cfg's dependencies.
func NewEnrollment(cfg EnrollConfig) (*Enrollment, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Enrollment{cfg: cfg}, nil
}

// Enroll is the one unauthenticated RPC. It answers only from local state
// until the request has passed every check; a failed attempt is logged
// locally, counted against its source, and never becomes a Raft write.
func (s *Enrollment) Enroll(ctx context.Context, req *pactv1.EnrollRequest) (resp *pactv1.EnrollResponse, err error) {
	// Admission before cost: refused here, a call has cost a map lookup.
	finish, err := s.cfg.Admitter.AdmitEnroll(ctx)
	if err != nil {
		return nil, err
	}
	// Deferred, so the slot and the budget are freed however the call
	// ends.
	outcome := OutcomeError
	defer func() { finish(req, outcome, err) }()
	resp, outcome, err = s.enroll(ctx, req)
	return resp, err
}

// enroll does the work of Enroll and says how it ended.
func (s *Enrollment) enroll(ctx context.Context, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, Outcome, error) {
	resp, outcome, err := s.enrollOnce(ctx, req)
	var stale *refusedAtApply
	if errors.As(err, &stale) {
		// The state machine refused the activation this journal decided
		// from its copy of the registry (the hardware now another node's,
		// the node decommissioned since): that copy lagged. The caller's
		// answer is decided again once the leader confirmed the copy, as
		// every final refusal is.
		if rerr := s.cfg.Confirmer.ReadBarrier(ctx); rerr != nil {
			// Unconfirmed, the refusal may be the lagging copy's: never
			// final (as with an EK refusal below).
			return nil, OutcomeError, fmt.Errorf("%w: cannot confirm the enrollment's refusal with the leader (%w); retry", raftnode.ErrNoLeader, rerr)
		}
		resp, outcome, err = s.enrollOnce(ctx, req)
		if errors.As(err, &stale) {
			err = stale.err
		}
		return resp, outcome, err
	}
	if s.cfg.Checks.EKRefusal(err) {
		// The refusal rests on the registered EK hash as this journal's
		// copy has it. Only the leader's word is final: confirm the state,
		// then decide again (nothing was stored or written before these
		// refusals, so deciding twice is safe).
		if rerr := s.cfg.Confirmer.ReadBarrier(ctx); rerr != nil {
			return nil, OutcomeError, fmt.Errorf("%w: cannot confirm the node's TPM registration with the leader (%w); retry", raftnode.ErrNoLeader, rerr)
		}
		return s.enrollOnce(ctx, req)
	}
	return resp, outcome, err
}

func (s *Enrollment) enrollOnce(ctx context.Context, req *pactv1.EnrollRequest) (*pactv1.EnrollResponse, Outcome, error) {
	checks, confirmer := s.cfg.Checks, s.cfg.Confirmer
	rep, err := hwid.Normalize(req.GetHardware().GetMacs(), req.GetHardware().GetBmcSerial(), req.GetHardware().GetTpmEkHash())
	if err != nil {
		return nil, OutcomeRefused, err
	}
	// Everything below reads this journal's copy of the registry, which may
	// lag the leader: a final refusal decided from it stands only once the
	// leader has confirmed the copy (Confirmer; one read barrier per call).
	// The CSR is checked once: whether it is valid does not depend on the
	// registry, so its refusal needs no confirmation; it is reported after
	// the hardware resolved, as before.
	csr, csrErr := ca.ParseCSR(req.GetCsrDer())
	var (
		res      raftfsm.Resolution
		takeover int64
		retry    bool
	)
	decide := func() error {
		retry = false
		if res = s.cfg.Registry.Resolve(rep); res.Err != nil {
			return res.Err
		}
		if csrErr != nil {
			return csrErr
		}
		if res.Node.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE {
			return nil
		}
		if res.Node.GetCert().GetSpkiSha256() == pki.SPKIFingerprintRaw(csr.SPKI) {
			// A retry of an enrollment that already committed: same key,
			// same certificate, no new write.
			retry = true
		}
		// A new key for an Active node is a takeover, decided below once
		// the node's credentials are proved: a caller without them learns
		// nothing about the takeover window.
		return nil
	}
	// A retry's answer (the committed certificate again) is confirmed too:
	// from a lagging copy it could hand back a certificate since replaced
	// or revoked.
	needs := func(err error) bool {
		return err == nil && retry || confirmer.Final(err) && (csrErr == nil || err != csrErr)
	}
	if err := confirmer.Confirm(ctx, decide, needs); err != nil {
		if res.Mismatch != "" {
			// Only the journal's log learns why; the caller gets the code.
			s.cfg.Logger.Info("enrollment hardware mismatch", logkey.Reason, string(res.Mismatch), logkey.NodeID, res.Node.GetNodeId())
		}
		if errors.Is(err, raftnode.ErrNoLeader) {
			return nil, OutcomeError, err
		}
		if res.Node != nil {
			if terr := checks.TPMMismatch(res.Mismatch, res.Node.GetNodeId()); terr != nil {
				return nil, OutcomeRefused, terr
			}
		}
		return nil, OutcomeRefused, err
	}
	node := res.Node
	spki := pki.SPKIFingerprintRaw(csr.SPKI)
	// A fenced node, or a key that is another node's, goes no further.
	if err := checks.CheckKey(ctx, node.GetNodeId(), spki); err != nil {
		return nil, s.outcomeOf(err), err
	}
	if retry {
		// Its credentials were checked (and a join token consumed) the
		// first time; the CSR proves the key.
		resp, err := s.answer(node)
		return resp, OutcomeRetry, err
	}
	// The credentials beside the hardware match that the node's policy
	// requires, checked before anything is signed.
	proof, challenge, err := checks.CheckCredentials(ctx, node, req, csr)
	if err != nil {
		return nil, s.outcomeOf(err), err
	}
	if challenge != nil {
		// Round one of TPM attestation: nothing is signed or written
		// until the TPM answers.
		return &pactv1.EnrollResponse{TpmChallenge: challenge}, OutcomeTPMChallenge, nil
	}
	if node.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE {
		err := confirmer.Confirm(ctx, func() error {
			if n, ok := s.cfg.Registry.Node(node.GetNodeId()); ok {
				node = n
			}
			var err error
			takeover, err = checks.TakeoverCutoff(node)
			return err
		}, func(err error) bool {
			// ALREADY_ACTIVE with a retry-after is not final, but an
			// agent honours it for the whole window: decided from a copy
			// that has not applied the revocation of the node's
			// certificate's issuer (a node cut off with its journal) it
			// would keep a freed node dark, so it is confirmed too.
			return confirmer.Final(err) || errors.Is(err, raftfsm.ErrAlreadyActive)
		})
		if errors.Is(err, raftnode.ErrNoLeader) {
			return nil, OutcomeError, err
		}
		if err != nil {
			return nil, OutcomeRefused, err
		}
	}
	// An Active node not released gets a new key only by a takeover: after
	// the window (takeover != 0), or at once when its certificate was
	// withdrawn (TakeoverCutoff).
	replaces := node.GetState() == pactv1.NodeState_NODE_STATE_ACTIVE && !raftfsm.Released(node)
	// Hardware a federated domain holds Active: warned, or refused by
	// that domain's policy, from the claims held (never waiting on it).
	claims, err := checks.Claims(ctx, node)
	if err != nil {
		return nil, OutcomeRefused, err
	}
	issued, err := s.cfg.Signer.SignAgent(ctx, csr, node.GetNodeId())
	if err != nil {
		return nil, OutcomeError, err
	}
	result, err := s.cfg.Batcher.ProposeBatched(ctx, &pactv1.Command{
		Actor: "agent/" + node.GetNodeId(),
		Op: &pactv1.Command_Activate{Activate: &pactv1.ActivateOp{
			NodeId:   node.GetNodeId(),
			Reported: HardwareProto(rep),
			Cert:     CertInfo(issued),

			TakeoverCutoffUnixNano: takeover,
			Credentials:            proof,
			ClaimsChecked:          claims,
		}},
	})
	if err != nil {
		// The signed certificate never leaves: its activation did not commit.
		if raftfsm.ErrorCode(err) != "" {
			return nil, OutcomeRefused, &refusedAtApply{err}
		}
		return nil, OutcomeError, err
	}
	outcome := OutcomeOK
	if replaces {
		outcome = OutcomeTakeover
	}
	s.cfg.Logger.Info("node enrolled", logkey.NodeID, node.GetNodeId(), logkey.Serial, result.Node.GetCert().GetSerial(),
		logkey.NotAfter, time.Unix(result.Node.GetCert().GetNotAfterUnix(), 0).UTC().Format(time.RFC3339),
		logkey.Source, peerAddr(ctx), logkey.Takeover, replaces)
	resp, err := s.answer(result.Node)
	if result.Idempotent {
		outcome = OutcomeRetry
	}
	return resp, outcome, err
}

// refusedAtApply is the state machine's refusal of an activation this
// journal decided from its own copy of the registry.
type refusedAtApply struct{ err error }

func (r *refusedAtApply) Error() string { return r.err.Error() }
func (r *refusedAtApply) Unwrap() error { return r.err }

// answer builds the response from the committed record, never from a
// certificate that was only signed.
func (s *Enrollment) answer(n *pactv1.Node) (*pactv1.EnrollResponse, error) {
	chain, bundle, err := s.cfg.Chains.ChainFor(n.GetCert())
	if err != nil {
		return nil, err
	}
	return &pactv1.EnrollResponse{
		NodeId:         n.GetNodeId(),
		DomainId:       s.cfg.Domain,
		CertChainDer:   chain,
		TrustBundleDer: bundle,
		Vcluster:       n.GetVcluster(),
		Serial:         n.GetCert().GetSerial(),
		NotAfterUnix:   n.GetCert().GetNotAfterUnix(),

		ServerTimeUnixNano: s.cfg.Clock.Now().UnixNano(),
	}, nil
}

// outcomeOf classes an error of an enrollment check: a rule error is the
// caller's (refused: counted by the failure limiter), anything else (the
// leader could not be reached) is ours.
func (s *Enrollment) outcomeOf(err error) Outcome {
	switch {
	case raftfsm.ErrorCode(err) != "", s.cfg.Checks.TPMRefusal(err):
		return OutcomeRefused
	case errors.Is(err, ErrOverloaded):
		return OutcomeRateLimited
	}
	return OutcomeError
}

// CertInfo is the registry's record of an issued certificate.
func CertInfo(is *ca.Issued) *pactv1.CertificateInfo {
	return &pactv1.CertificateInfo{
		Serial:        is.Serial,
		SpkiSha256:    is.SPKISHA256,
		NotBeforeUnix: is.Cert.NotBefore.Unix(),
		NotAfterUnix:  is.NotAfter.Unix(),
		IssuerSerial:  is.IssuerSerial,
		Der:           is.DER,
	}
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
