package journal_test

import (
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// TestHardwareAloneDoesNotEnrollATPMNode: the attacker who knows a TPM
// node's MACs, BMC serial and even its EK public key (it is not secret), and
// has a TPM of their own, in each state of the node (docs/security.md).
// Before the first boot, while it streams, and after it has been quiet past
// the takeover window, they get no certificate and write nothing; the real
// node, with its TPM, enrolls and later takes itself over.
func TestHardwareAloneDoesNotEnrollATPMNode(t *testing.T) {
	e := newEnv(t)
	n := newTPMNode(t, e, "n1", "SN1", mac1)
	thief := startAttestor(t)

	attack := func(t *testing.T) {
		t.Helper()
		// Hardware alone, even reporting the registered EK hash.
		r := n.request()
		r.CsrDer, r.Credentials = journaltest.NewKey(t).CSR, nil
		before := e.registry(t)
		resp, err := e.enrollReq(t, r)
		e.refusedUnwritten(t, before, resp, err, codes.FailedPrecondition, apierr.TPMRequired)

		// Their own TPM, honestly.
		r = n.request()
		r.CsrDer = journaltest.NewKey(t).CSR
		r.Hardware.TpmEkHash, r.Credentials.Tpm.EkPublic, r.Credentials.Tpm.AkPublic = thief.EKHash(), thief.EKPublic(), thief.AKPublic()
		before = e.registry(t)
		resp, err = e.enrollReq(t, r)
		e.refusedUnwritten(t, before, resp, err, codes.PermissionDenied, apierr.TPMEKMismatch)

		// The registered EK's public key with their own AK: the journal
		// challenges the registered EK, which their TPM does not hold.
		r = n.request()
		r.CsrDer = journaltest.NewKey(t).CSR
		r.Credentials.Tpm.AkPublic = thief.AKPublic()
		resp, err = e.enrollReq(t, r)
		if err != nil {
			t.Fatalf("round one with the registered EK: %v", err)
		}
		ch := resp.GetTpmChallenge()
		if ch == nil || len(resp.GetCertChainDer()) > 0 {
			t.Fatalf("round one answered %v, want only a challenge", resp)
		}
		if secret, err := thief.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret()); err == nil {
			t.Fatalf("another TPM activated the registered EK's credential: %x", secret)
		}
	}

	t.Run("registered, never booted", attack)
	resp, err := e.enrollReq(t, n.answer(t, n.challenge(t, e), n.key))
	if err != nil {
		t.Fatalf("the node with its TPM: %v", err)
	}
	w := e.subscribe(t, newAgent("n1", n.key, resp.GetCertChainDer(), resp.GetSerial()))
	t.Run("up and streaming", attack)
	w.close(t, e)
	e.tick(t, e.cfg.TakeoverWindow+3*e.cfg.DigestInterval)
	t.Run("down past the takeover window", attack)

	// The real node rebooted with a new key: its TPM takes it over.
	n.key = journaltest.NewKey(t)
	if _, err := e.enrollReq(t, n.answer(t, n.challenge(t, e), n.key)); err != nil {
		t.Fatalf("the rebooted node with its TPM: %v", err)
	}
	if a := e.lastAudit(t, "n1"); a.GetAction() != "takeover" {
		t.Errorf("audit %v, want a takeover", a)
	}
}

// TestTPMSecretNeverLeaks: a challenge's secret (what only the TPM can
// recover) must never reach the journal's log, the audit trail or an error:
// it would let a reader answer for the TPM. The test recovers the secrets
// with the TPM, drives round two right, wrong and late, and looks for them
// (hex and base64) everywhere.
func TestTPMSecretNeverLeaks(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, func(c *journal.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	n := newTPMNode(t, e, "n1", "SN1", mac1)
	var secrets [][]byte
	var seen []string
	round := func(tamper func(*pactv1.EnrollRequest), late bool) {
		ch := n.challenge(t, e)
		secret, err := n.att.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret)
		seen = append(seen, protojson.Format(ch))
		req := n.answer(t, ch, n.key)
		if tamper != nil {
			tamper(req)
		}
		if late {
			e.fc.Advance(e.cfg.TPMChallenges.TTL + time.Second)
		}
		resp, err := e.enrollReq(t, req)
		if err != nil {
			seen = append(seen, err.Error())
		} else {
			seen = append(seen, protojson.Format(resp))
		}
	}
	round(func(r *pactv1.EnrollRequest) { r.Credentials.Tpm.Proof[0] ^= 1 }, false)
	round(nil, true)
	round(nil, false)
	for _, a := range e.audit(t, "") {
		seen = append(seen, protojson.Format(a))
	}
	if !strings.Contains(logs.String(), "TPM credential activation proved") || !strings.Contains(logs.String(), "enrollment refused") {
		t.Fatalf("the log did not record the TPM paths; the check below would prove nothing:\n%s", logs.String())
	}
	places := map[string]string{"the journal log": logs.String(), "answers, errors and audit": strings.Join(seen, "\n")}
	for where, text := range places {
		for _, s := range secrets {
			for _, enc := range []string{hex.EncodeToString(s), base64.StdEncoding.EncodeToString(s), base64.RawURLEncoding.EncodeToString(s)} {
				if strings.Contains(text, enc[:24]) {
					t.Errorf("%s holds a TPM challenge secret", where)
				}
			}
		}
	}
}
