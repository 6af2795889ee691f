package v1rpc

import (
	"context"
	"errors"
	"testing"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/journal/auth"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// RenewCert against fakes: who may renew, what a renewal whose answer was
// lost gets back, and what is signed and proposed.
func TestRenewCertSteps(t *testing.T) {
	csr, spki := testCSR(t)
	_, otherSPKI := testCSR(t)
	node := func(serial, spki string) *pactv1.Node {
		return &pactv1.Node{NodeId: "n1", State: pactv1.NodeState_NODE_STATE_ACTIVE, Cert: &pactv1.CertificateInfo{Serial: serial, SpkiSha256: spki}}
	}
	for _, tc := range []struct {
		name      string
		principal auth.Principal
		node      *pactv1.Node
		serial    string // the request's current_serial
		checks    fakeChecks

		want        Outcome
		wantErr     error
		wantSigned  int
		wantPropose int
	}{
		{name: "the current certificate renews", principal: auth.Principal{Serial: "s1"}, node: node("s1", "old"), serial: "s1", want: OutcomeOK, wantSigned: 1, wantPropose: 1},
		{name: "an SVID renews through SPIRE", principal: auth.Principal{Serial: "s1", SVID: true}, node: node("s1", "old"), serial: "s1", want: OutcomeRefused, wantErr: auth.ErrPermission},
		{name: "a serial other than the caller's is refused", principal: auth.Principal{Serial: "s1"}, node: node("s1", "old"), serial: "s0", want: OutcomeRefused, wantErr: ErrInvalidArgument},
		{name: "a key that is another node's is refused before signing", principal: auth.Principal{Serial: "s1"}, node: node("s1", "old"), serial: "s1", checks: fakeChecks{keyErr: raftfsm.ErrKeyInUse}, want: OutcomeRefused, wantErr: raftfsm.ErrKeyInUse},
		{name: "a lost answer is answered again, nothing signed", principal: auth.Principal{Serial: "s1", Replaced: true}, node: node("s2", spki), serial: "s1", want: OutcomeRetried},
		{name: "a replaced certificate with another key is stale", principal: auth.Principal{Serial: "s1", Replaced: true}, node: node("s2", otherSPKI), serial: "s1", want: OutcomeRefused, wantErr: raftfsm.ErrStaleCertificate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := &fakeRegistry{nodes: map[string]*pactv1.Node{"n1": tc.node}}
			adm := &fakeAdmitter{}
			checks := tc.checks
			signer := &fakeSigner{}
			batcher := &fakeBatcher{}
			e, err := NewEnrollment(testEnrollConfig(reg, &fakeConfirmer{}, adm, &checks, signer, batcher))
			if err != nil {
				t.Fatal(err)
			}
			p := tc.principal
			p.ID = pki.Identity{Name: "n1"}
			ctx := auth.NewContext(context.Background(), &p)
			resp, err := e.RenewCert(ctx, &pactv1.RenewCertRequest{CurrentSerial: tc.serial, CsrDer: csr})
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("RenewCert: %v", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("RenewCert: %v, want %v", err, tc.wantErr)
			}
			if len(adm.outcomes) != 1 || adm.outcomes[0] != tc.want {
				t.Errorf("outcomes recorded %v, want [%s]", adm.outcomes, tc.want)
			}
			if signer.signed != tc.wantSigned || len(batcher.proposed) != tc.wantPropose {
				t.Errorf("signed %d, proposed %d; want %d, %d", signer.signed, len(batcher.proposed), tc.wantSigned, tc.wantPropose)
			}
			if tc.wantPropose > 0 {
				op := batcher.proposed[0].GetRenew()
				if op.GetNodeId() != "n1" || op.GetPreviousSerial() != "s1" || op.GetCert().GetSpkiSha256() != spki {
					t.Errorf("proposed %v", op)
				}
			}
			if tc.wantErr == nil && (resp.GetNodeId() != "n1" || resp.GetSerial() == "") {
				t.Errorf("answer %v", resp)
			}
		})
	}
}
