package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// subscribeRequest is what each stream asks: a node whose enrollment its
// TPM attested answers boot attestation requests (docs/tpm.md,
// "Attestation between renewals").
func (a *Agent) subscribeRequest() *pactv1.SubscribeRequest {
	return &pactv1.SubscribeRequest{AnswersBootAttestation: a.tpmAttested.Load()}
}

// onEvent is the rotator's OnEvent: a boot attestation request is
// answered here, every other event goes to handleEvent.
func (a *Agent) onEvent(ch *channel.Channel, ev *pactv1.SubscribeResponse) error {
	if req := ev.GetAttestBoot(); req != nil {
		a.sawStream(a.cfg.Clock.Now())
		matches, err := a.attestBoot(ch, req)
		st := &AttestationStatus{At: a.cfg.Clock.Now(), JournalID: ch.JournalID(), Matches: matches}
		if err != nil {
			// The journal counts a request left without a verified
			// answer; the stream goes on.
			a.log.Warn("cannot answer the journal's boot attestation request", logkey.JournalID, ch.JournalID(), logkey.Err, err)
			st.Error = err.Error()
		}
		a.mu.Lock()
		a.attestation = st
		a.mu.Unlock()
		return nil
	}
	return a.handleEvent(ch, ev)
}

// attestBoot answers a boot attestation request of ch's stream, on ch
// (the journal that asked, with the certificate the stream was opened
// with), in the two rounds of an attested renewal: the EK and a fresh AK,
// then the proof bound to the certificate's key and a quote of the boot
// over the challenge's nonce. It runs on the stream's goroutine: each
// call is bounded by CallTimeout.
func (a *Agent) attestBoot(ch *channel.Channel, req *pactv1.AttestBootRequest) (matches bool, err error) {
	id := ch.Identity()
	if id == nil || id.Source != identity.SourceJournal || id.Key == nil {
		return false, errors.New("the stream's identity is not a journal certificate")
	}
	att, err := a.openTPM()
	if err != nil || att == nil {
		return false, fmt.Errorf("%w: this node enrolled with its TPM and attests with it: %w", ErrTPM, errors.Join(err, errors.New("no TPM")))
	}
	defer att.Close()
	c := pactv1.NewEnrollmentServiceClient(ch.Conn())
	call := func(r *pactv1.AttestBootRequest) (*pactv1.AttestBootResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.CallTimeout)
		defer cancel()
		return c.AttestBoot(ctx, r)
	}
	round1 := &pactv1.TpmAttestation{EkPublic: att.EKPublic(), AkPublic: att.AKPublic()}
	resp, err := call(&pactv1.AttestBootRequest{Nonce: req.GetNonce(), Tpm: round1})
	if err != nil {
		return false, err
	}
	if resp.GetTpmChallenge() == nil {
		return false, fmt.Errorf("%w: the journal answered round one of boot attestation without a challenge", ErrTPM)
	}
	round2, err := a.tpmAnswer(round1, id.Key, att, resp.GetTpmChallenge())
	if err != nil {
		return false, err
	}
	if resp, err = call(&pactv1.AttestBootRequest{Nonce: req.GetNonce(), Tpm: round2}); err != nil {
		return false, err
	}
	if resp.GetMatches() {
		a.log.Info("boot attested", logkey.JournalID, ch.JournalID())
	} else {
		a.log.Warn("boot attested: it does not match the boot policy (pact boot-policy show; docs/tpm.md)", logkey.JournalID, ch.JournalID())
	}
	return resp.GetMatches(), nil
}
