// Renewal: the journal-signed certificate renewed over the live channel at
// 2/3 of its life, and the standby a SPIRE node keeps for when SPIRE goes.

package agent

import (
	"cmp"
	"context"
	"crypto"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/spire"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// renew exchanges the live channel's journal-signed certificate for one
// for a fresh key (RenewCert over that channel) and swaps to it. From the
// moment the renewal commits the journal takes the old certificate for
// stale, so the swap follows at once, within the same rotation (calls the
// journal refuses as stale meanwhile are retried on the new channel). A
// swap that fails leaves the new certificate held (the journal provider's)
// and the renewal done: the step moves onto it later (actMove), paced as
// a connect is, and renews nothing meanwhile (renewedAhead).
func (a *Agent) renew(ctx context.Context, act *channel.Channel) error {
	a.metrics.attempts.Add(1)
	err := a.rot.Rotate(ctx, func(ctx context.Context, cur *channel.Channel) (*identity.Identity, error) {
		if cur != act {
			return nil, nil // the channel changed meanwhile; look again
		}
		key, csr, err := a.renewalKey(cur.Identity().Serial())
		if err != nil {
			return nil, err
		}
		done := a.startRenewing()
		resp, err := a.renewCall(ctx, cur, &pactv1.RenewCertRequest{
			CurrentSerial: cur.Identity().Serial(),
			CsrDer:        csr,
		}, key)
		if err != nil {
			// The renewal may have committed with its answer lost (a
			// deadline under load): the journal then takes the channel's
			// certificate for stale. The next renewal asks again over
			// the live channel with this key, and the journal answers
			// with the certificate that committed (a fresh key would be
			// refused stale); should the channel be lost meanwhile, the
			// node enrolls with this key and gets the same certificate
			// back, where a fresh key would be refused ALREADY_ACTIVE for
			// the takeover window.
			a.enrollKey, a.enrollCSR = key, csr
			if outcomeUnknown(err) {
				a.renewUnknown.Store(cur.Identity().Serial())
			}
			done()
			return nil, &RenewCertError{Journal: cur.Target(), Err: err}
		}
		defer done() // once the new certificate is adopted, or is not
		a.enrollKey, a.enrollCSR = nil, nil
		a.renewUnknown.Store("")
		if _, err := a.observeJournalTime(unixNano(resp.GetServerTimeUnixNano())); err != nil {
			return nil, err
		}
		id, who, err := journalIdentity(key, a.trustPool(), resp.GetCertChainDer(), resp.GetTrustBundleDer(), a.cfg.Clock.Now(), a.heldCerts())
		if err != nil {
			return nil, err
		}
		a.adopt(id, who, resp.GetVcluster())
		a.log.Info("certificate renewed", logkey.Identity, id, logkey.Previous, cur.Identity())
		return id, nil
	})
	if err != nil {
		if busy, ok := busyOf(err); ok {
			a.journalBusy("renew", err, busy)
		} else if ctx.Err() == nil {
			a.fail("renew", err, act.Identity())
		}
		a.attempted("renew", err)
		return err
	}
	// Told before the new stream is, so an observer has the attempt when
	// it sees the stream.
	a.attempted("renew", nil)
	a.rotated()
	return nil
}

// renewCall is RenewCert over cur. A node whose enrollment its TPM
// attested renews with its TPM: round one offers the EK and a fresh AK,
// round two answers the journal's challenge with the proof bound to the
// renewal's key and a fresh quote of the node's boot, over the same
// channel (the journal that issued the challenge).
func (a *Agent) renewCall(ctx context.Context, cur *channel.Channel, req *pactv1.RenewCertRequest, key crypto.Signer) (*pactv1.RenewCertResponse, error) {
	c := pactv1.NewEnrollmentServiceClient(cur.Conn())
	call := func(req *pactv1.RenewCertRequest) (*pactv1.RenewCertResponse, error) {
		cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
		defer cancel()
		return c.RenewCert(cctx, req)
	}
	if !a.tpmAttested.Load() {
		return call(req)
	}
	att, err := a.openTPM()
	if err != nil || att == nil {
		return nil, fmt.Errorf("%w: this node enrolled with its TPM and renews with it: %w", ErrTPM, cmp.Or(err, errors.New("no TPM")))
	}
	defer att.Close()
	req.Tpm = &pactv1.TpmAttestation{EkPublic: att.EKPublic(), AkPublic: att.AKPublic()}
	resp, err := call(req)
	if err != nil || resp.GetTpmChallenge() == nil {
		return resp, err
	}
	ch := resp.GetTpmChallenge()
	round2, err := a.tpmAnswer(req.Tpm, key, att, ch)
	if err != nil {
		return nil, err
	}
	req.Tpm = round2
	resp, err = call(req)
	if err == nil && resp.GetTpmChallenge() != nil {
		return nil, fmt.Errorf("%w: the journal answered the TPM proof with another challenge", ErrTPM)
	}
	return resp, err
}

// outcomeUnknown reports whether a failed call may have committed: no
// answer came (a deadline, a broken connection), or the journal could not
// tell (OUTCOME_UNKNOWN, NO_LEADER). A refusal (rate-limited, stale,
// revoked) wrote nothing.
func outcomeUnknown(err error) bool {
	pe := apierr.FromError(err)
	switch pe.Reason {
	case apierr.OutcomeUnknown, apierr.NoLeader:
		return true
	case "":
		switch pe.Code {
		case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled:
			return true
		}
	}
	return false
}

// renewalKey is the key a renewal of the certificate serial asks to have
// signed: the key of an earlier renewal of it whose outcome is unknown, so
// that a renewal that committed is answered again; a fresh one otherwise.
func (a *Agent) renewalKey(serial string) (crypto.Signer, []byte, error) {
	if pending, _ := a.renewUnknown.Load().(string); a.enrollKey != nil && pending == serial {
		return a.enrollKey, a.enrollCSR, nil
	}
	return newKey()
}

// startRenewing notes a RenewCert in flight; the function it returns
// notes its end (superseded waits for it).
func (a *Agent) startRenewing() (done func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	a.renewing = ch
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		if a.renewing == ch {
			a.renewing = nil
		}
		a.mu.Unlock()
		close(ch)
	}
}

// standbyDue reports whether the agent, on a live SVID channel, should ask
// for a standby now: it has none the registry holds (or it expired), its
// standby is due for renewal, and no retry is pending. Otherwise it returns
// when to look again.
func (a *Agent) standbyDue(ctx context.Context, s *loopState, now time.Time) (time.Time, bool) {
	id, err := a.jp.Current(ctx)
	if err != nil || id.Serial() != a.standbySerial() {
		return s.standby.notBefore, s.standby.due(now)
	}
	if s.standbyFor != id.Serial() {
		s.standbyFor, s.standbyAt = id.Serial(), renewalTimeWith(id, a.cfg.RenewAt, a.backoff.Rand)
	}
	due := latest(s.standbyAt, s.standby.notBefore)
	return due, !now.Before(due)
}

// obtainStandby asks the journal, over the live SVID channel, to sign a
// journal certificate for a fresh key and record it as the node's standby,
// and makes it the journal provider's identity: the one the agent swaps to
// when SPIRE stops serving it. The previous standby is dropped: the
// journal no longer takes it.
func (a *Agent) obtainStandby(ctx context.Context, act *channel.Channel) (err error) {
	a.metrics.attempts.Add(1)
	defer func() { a.attempted("standby", err) }()
	key, csr, err := newKey()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, a.cfg.CallTimeout)
	resp, err := pactv1.NewEnrollmentServiceClient(act.Conn()).IssueStandby(cctx, &pactv1.IssueStandbyRequest{CsrDer: csr})
	cancel()
	if err == nil {
		var id *identity.Identity
		var who pki.Identity
		if id, who, err = journalIdentity(key, a.trustPool(), resp.GetCertChainDer(), resp.GetTrustBundleDer(), a.cfg.Clock.Now(), a.heldCerts()); err == nil {
			prev := a.latestJournal()
			a.adopt(id, who, resp.GetVcluster())
			a.setStandby(id.Serial())
			a.log.Info("standby certificate obtained", logkey.Identity, id, logkey.Previous, prev, logkey.Addr, act.Target())
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	err = fmt.Errorf("agent: IssueStandby at %s: %w", act.Target(), err)
	a.fail("standby", err, act.Identity())
	return err
}

func (a *Agent) setStandby(serial string) {
	a.mu.Lock()
	a.standby = serial
	a.mu.Unlock()
}

func (a *Agent) standbySerial() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.standby
}

func (a *Agent) spireProvider() *spire.Provider {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spire
}
