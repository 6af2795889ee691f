package v1rpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// The Enroll handler against fakes of every interface it depends on: what
// each decision leads to (the outcome, what is signed, what is proposed,
// how often the leader is asked). The journal's own tests run the same
// handler over real Raft, TLS and TPMs; these pin the handler's steps.

const testMAC = "02:00:00:00:00:01"

type fakeRegistry struct {
	Registry // only the reads Enroll makes are implemented
	nodes    map[string]*pactv1.Node
}

func (r *fakeRegistry) Resolve(rep hwid.Identity) raftfsm.Resolution {
	for _, n := range r.nodes {
		for _, m := range n.GetHardware().GetMacs() {
			if len(rep.MACs) > 0 && m == rep.MACs[0] {
				return raftfsm.Resolution{Node: n}
			}
		}
	}
	return raftfsm.Resolution{Err: fmt.Errorf("%w: no node with this hardware", raftfsm.ErrNodeNotEnrolled)}
}

func (r *fakeRegistry) Node(id string) (*pactv1.Node, bool) { n, ok := r.nodes[id]; return n, ok }

// fakeConfirmer confirms as journal/confirmation.go does, counting the
// barriers; noLeader makes every barrier fail.
type fakeConfirmer struct {
	barriers int
	noLeader bool
}

func (c *fakeConfirmer) ReadBarrier(context.Context) error {
	c.barriers++
	if c.noLeader {
		return raftnode.ErrNoLeader
	}
	return nil
}

func (c *fakeConfirmer) Confirm(ctx context.Context, decide func() error, needs func(error) bool) error {
	err := decide()
	if !needs(err) {
		return err
	}
	if err := c.ReadBarrier(ctx); err != nil {
		return err
	}
	return decide()
}

func (c *fakeConfirmer) Final(err error) bool { return raftfsm.ErrorCode(err) != "" }

func (c *fakeConfirmer) ConfirmFinal(ctx context.Context, decide func() error) error {
	return c.Confirm(ctx, decide, c.Final)
}

func (c *fakeConfirmer) ConfirmRule(ctx context.Context, decide func() error) error {
	return c.Confirm(ctx, decide, c.Final)
}

type fakeAdmitter struct {
	outcomes []Outcome
}

func (a *fakeAdmitter) AdmitEnroll(context.Context) (func(*pactv1.EnrollRequest, Outcome, error), error) {
	return func(_ *pactv1.EnrollRequest, o Outcome, _ error) { a.outcomes = append(a.outcomes, o) }, nil
}

func (a *fakeAdmitter) AdmitRenewal(context.Context) (func(Outcome), error) {
	return func(o Outcome) { a.outcomes = append(a.outcomes, o) }, nil
}

func (a *fakeAdmitter) CountRenewal(o Outcome) { a.outcomes = append(a.outcomes, o) }

func (a *fakeAdmitter) AdmitStandby(context.Context) (func(), error) { return func() {}, nil }

// fakeChains answers with the leaf alone and no bundle.
type fakeChains struct{}

func (fakeChains) ChainFor(c *pactv1.CertificateInfo) ([][]byte, [][]byte, error) {
	return [][]byte{c.GetDer()}, nil, nil
}

type fakeChecks struct {
	keyErr, credErr, takeoverErr, claimsErr error
	// ekErr is the first CheckCredentials' refusal, one that rests on the
	// registered EK hash (EKRefusal): decided again after a barrier.
	ekErr          error
	credentials    int
	challenge      *pactv1.TpmChallenge
	takeoverCutoff int64
}

func (c *fakeChecks) CheckKey(context.Context, string, string) error { return c.keyErr }
func (c *fakeChecks) CheckCredentials(context.Context, *pactv1.Node, *pactv1.EnrollRequest, *ca.CSR) (*pactv1.PresentedCredentials, *pactv1.TpmChallenge, error) {
	c.credentials++
	if c.ekErr != nil && c.credentials == 1 {
		return nil, nil, c.ekErr
	}
	return nil, c.challenge, c.credErr
}
func (c *fakeChecks) TakeoverCutoff(*pactv1.Node) (int64, error) {
	return c.takeoverCutoff, c.takeoverErr
}
func (c *fakeChecks) Claims(context.Context, *pactv1.Node) (string, error) { return "", c.claimsErr }
func (c *fakeChecks) Unattested(context.Context, *pactv1.Node) error       { return nil }
func (c *fakeChecks) RenewalTPM(context.Context, string, *pactv1.RenewCertRequest) (*pactv1.TpmChallenge, error) {
	return nil, nil
}
func (c *fakeChecks) EKRefusal(err error) bool                { return c.ekErr != nil && errors.Is(err, c.ekErr) }
func (c *fakeChecks) TPMMismatch(hwid.Mismatch, string) error { return nil }
func (c *fakeChecks) TPMRefusal(error) bool                   { return false }

type fakeSigner struct {
	err    error
	signed int
}

func (s *fakeSigner) SignAgent(_ context.Context, csr *ca.CSR, _ string) (*ca.Issued, error) {
	if s.err != nil {
		return nil, s.err
	}
	s.signed++
	now := time.Unix(1_800_000_000, 0)
	return &ca.Issued{Serial: fmt.Sprintf("serial-%d", s.signed), SPKISHA256: pki.SPKIFingerprintRaw(csr.SPKI),
		Cert: &x509.Certificate{NotBefore: now}, NotAfter: now.Add(time.Hour)}, nil
}

type fakeBatcher struct {
	err      error
	proposed []*pactv1.Command
}

func (b *fakeBatcher) ProposeBatched(_ context.Context, cmd *pactv1.Command) (*raftfsm.Result, error) {
	b.proposed = append(b.proposed, cmd)
	if b.err != nil {
		return &raftfsm.Result{}, b.err
	}
	if op := cmd.GetRenew(); op != nil {
		return &raftfsm.Result{Node: &pactv1.Node{NodeId: op.GetNodeId(), State: pactv1.NodeState_NODE_STATE_ACTIVE, Cert: op.GetCert()}}, nil
	}
	op := cmd.GetActivate()
	return &raftfsm.Result{Node: &pactv1.Node{NodeId: op.GetNodeId(), State: pactv1.NodeState_NODE_STATE_ACTIVE, Cert: op.GetCert()}}, nil
}

func testCSR(t *testing.T) ([]byte, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return der, pki.SPKIFingerprintRaw(spki)
}

func TestEnrollSteps(t *testing.T) {
	csr, spki := testCSR(t)
	registered := func() *pactv1.Node {
		return &pactv1.Node{NodeId: "n1", State: pactv1.NodeState_NODE_STATE_REGISTERED, Hardware: &pactv1.HardwareIdentity{Macs: []string{testMAC}}}
	}
	active := func(spki string) *pactv1.Node {
		n := registered()
		n.State = pactv1.NodeState_NODE_STATE_ACTIVE
		n.Cert = &pactv1.CertificateInfo{Serial: "old", SpkiSha256: spki}
		return n
	}
	errSign := errors.New("no live intermediate")
	errEK := errors.New("TPM EK mismatch")
	for _, tc := range []struct {
		name     string
		node     *pactv1.Node // nil: nothing registered
		csr      []byte
		checks   fakeChecks
		noLeader bool
		signErr  error
		propErr  error

		want        Outcome
		wantErr     error // errors.Is; nil: success
		wantSigned  int
		wantPropose int
		wantBarrier int
	}{
		{name: "registered node enrolls", node: registered(), want: OutcomeOK, wantSigned: 1, wantPropose: 1},
		{name: "unknown hardware is refused once the leader confirms it", want: OutcomeRefused, wantErr: raftfsm.ErrNodeNotEnrolled, wantBarrier: 1},
		{name: "unknown hardware without a leader is ours, not final", noLeader: true, want: OutcomeError, wantErr: raftnode.ErrNoLeader, wantBarrier: 1},
		{name: "a malformed CSR is refused without asking the leader", node: registered(), csr: []byte("not a csr"), want: OutcomeRefused, wantErr: ca.ErrCSRMalformed},
		{name: "the same key again is a retry: confirmed, nothing signed", node: active(spki), want: OutcomeRetry, wantBarrier: 1},
		{name: "a key that is another node's goes no further", node: registered(), checks: fakeChecks{keyErr: raftfsm.ErrKeyInUse}, want: OutcomeRefused, wantErr: raftfsm.ErrKeyInUse},
		{name: "a missing join token is refused before signing", node: registered(), checks: fakeChecks{credErr: raftfsm.ErrJoinTokenRequired}, want: OutcomeRefused, wantErr: raftfsm.ErrJoinTokenRequired},
		{name: "an EK refusal from a lagging copy is decided again after the leader confirms", node: registered(), checks: fakeChecks{ekErr: errEK}, want: OutcomeOK, wantSigned: 1, wantPropose: 1, wantBarrier: 1},
		{name: "TPM round one answers a challenge, signs nothing", node: registered(), checks: fakeChecks{challenge: &pactv1.TpmChallenge{}}, want: OutcomeTPMChallenge},
		{name: "a new key for an active node after the window is a takeover", node: active("other"), checks: fakeChecks{takeoverCutoff: 42}, want: OutcomeTakeover, wantSigned: 1, wantPropose: 1},
		{name: "a new key for a streaming node is refused, confirmed", node: active("other"), checks: fakeChecks{takeoverErr: raftfsm.ErrAlreadyActive}, want: OutcomeRefused, wantErr: raftfsm.ErrAlreadyActive, wantBarrier: 1},
		{name: "a federated domain's refusal stops it before signing", node: registered(), checks: fakeChecks{claimsErr: raftfsm.ErrInvalidCommand}, want: OutcomeRefused, wantErr: raftfsm.ErrInvalidCommand},
		{name: "a journal that cannot sign answers an error of its own", node: registered(), signErr: errSign, want: OutcomeError, wantErr: errSign},
		{name: "an activation the FSM refuses is decided again once the leader confirms, then refused", node: registered(), propErr: raftfsm.ErrNodeFenced, want: OutcomeRefused, wantErr: raftfsm.ErrNodeFenced, wantSigned: 2, wantPropose: 2, wantBarrier: 1},
		{name: "an activation whose outcome is unknown is ours", node: registered(), propErr: raftnode.ErrOutcomeUnknown, want: OutcomeError, wantErr: raftnode.ErrOutcomeUnknown, wantSigned: 1, wantPropose: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := &fakeRegistry{nodes: map[string]*pactv1.Node{}}
			if tc.node != nil {
				reg.nodes[tc.node.GetNodeId()] = tc.node
			}
			conf := &fakeConfirmer{noLeader: tc.noLeader}
			adm := &fakeAdmitter{}
			checks := tc.checks
			signer := &fakeSigner{err: tc.signErr}
			batcher := &fakeBatcher{err: tc.propErr}
			e, err := NewEnrollment(testEnrollConfig(reg, conf, adm, &checks, signer, batcher))
			if err != nil {
				t.Fatal(err)
			}
			req := &pactv1.EnrollRequest{Hardware: &pactv1.HardwareIdentity{Macs: []string{testMAC}}, CsrDer: csr}
			if tc.csr != nil {
				req.CsrDer = tc.csr
			}
			resp, err := e.Enroll(context.Background(), req)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Enroll: %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Enroll: %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && resp == nil:
				t.Fatal("no answer")
			}
			if len(adm.outcomes) != 1 || adm.outcomes[0] != tc.want {
				t.Errorf("outcomes recorded %v, want [%s]", adm.outcomes, tc.want)
			}
			if signer.signed != tc.wantSigned || len(batcher.proposed) != tc.wantPropose {
				t.Errorf("signed %d, proposed %d; want %d, %d", signer.signed, len(batcher.proposed), tc.wantSigned, tc.wantPropose)
			}
			if conf.barriers != tc.wantBarrier {
				t.Errorf("%d read barriers, want %d", conf.barriers, tc.wantBarrier)
			}
			if tc.wantPropose > 0 {
				op := batcher.proposed[0].GetActivate()
				if op.GetNodeId() != "n1" || op.GetCert().GetSpkiSha256() != spki || op.GetTakeoverCutoffUnixNano() != tc.checks.takeoverCutoff {
					t.Errorf("proposed %v", op)
				}
				if a := batcher.proposed[0].GetActor(); a != "agent/n1" {
					t.Errorf("actor %q", a)
				}
			}
			if tc.want == OutcomeTPMChallenge && resp.GetTpmChallenge() == nil {
				t.Error("round one answered without its challenge")
			}
			if tc.wantErr == nil && tc.want != OutcomeTPMChallenge && (resp.GetNodeId() != "n1" || resp.GetDomainId() != "example.org" || resp.GetSerial() == "") {
				t.Errorf("answer %v", resp)
			}
		})
	}
}

// unusedDeps stands for the dependencies Enroll does not use; a call to
// one fails the test by panicking.
type unusedDeps struct{}

func (unusedDeps) Propose(context.Context, *pactv1.Command) (*raftfsm.Result, error) {
	panic("Enroll proposes through the batcher only")
}
func (unusedDeps) StreamCount(string) int                             { panic("unused") }
func (unusedDeps) AlsoActive(*pactv1.Node) []string                   { panic("unused") }
func (unusedDeps) RequireLevel(context.Context, uint32, string) error { panic("unused") }
func (unusedDeps) CaptureBootPolicy(context.Context, *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error) {
	panic("unused")
}
func (unusedDeps) CaptureHere(context.Context, *pactv1.CaptureBootPolicyRequest) (*pactv1.CaptureBootPolicyResponse, error) {
	panic("unused")
}
func (unusedDeps) Register(string, string, ConnID) Waker                             { panic("unused") }
func (unusedDeps) RenewingOver(ConnID, string, string, string)                       {} // no streams here
func (unusedDeps) Unregister(Waker)                                                  { panic("unused") }
func (unusedDeps) HoldFirstState(context.Context, string)                            { panic("unused") }
func (unusedDeps) Streaming(Waker)                                                   { panic("unused") }
func (unusedDeps) HasStream(string, string) bool                                     { panic("unused") }
func (unusedDeps) OthersStreaming(Waker) bool                                        { panic("unused") }
func (unusedDeps) Stopping() <-chan struct{}                                         { panic("unused") }
func (unusedDeps) OpenStream(*auth.Principal, *pactv1.SubscribeRequest) AttestStream { panic("unused") }
func (unusedDeps) Answer(context.Context, *auth.Principal, *pactv1.AttestBootRequest) (*pactv1.AttestBootResponse, error) {
	panic("unused")
}
func (unusedDeps) CheckBinding(*auth.Principal) error               { panic("unused") }
func (unusedDeps) Current() ([][]byte, uint64)                      { panic("unused") }
func (unusedDeps) StreamHandedOver()                                { panic("unused") }
func (unusedDeps) StreamDropped(string)                             { panic("unused") }
func (unusedDeps) Halted() string                                   { panic("unused") }
func (unusedDeps) Intermediate(string) (*pactv1.Intermediate, bool) { panic("unused") }

// testEnrollConfig is an EnrollConfig over the fakes given, the
// dependencies Enroll and RenewCert do not use unused.
func testEnrollConfig(reg Registry, conf Confirmer, adm Admitter, checks EnrollChecks, signer Signer, batcher BatchProposer) EnrollConfig {
	u := unusedDeps{}
	cfg := DefaultConfig()
	cfg.JournalID, cfg.Registry, cfg.Confirmer = "j1", reg, conf
	cfg.Proposer, cfg.Streams, cfg.Claims, cfg.Levels, cfg.Boot = u, u, u, u, u
	cfg.NodeTrustDomain = func() string { return "example.org" }
	cfg.ToStatus = func(err error) error { return err }
	cfg.Clock, cfg.Logger = clock.Real{}, slog.New(slog.DiscardHandler)
	return EnrollConfig{Config: cfg, Admitter: adm, Checks: checks, Signer: signer, Batcher: batcher, Chains: fakeChains{}, Domain: "example.org",
		Hub: u, Attest: u, Binder: u, Bundle: u, Meter: u, Halt: u, Intermediates: u, StreamRecheckInterval: time.Minute}
}
