package agent

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/google/go-tpm/tpm2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/tpmattest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ErrTPM: the agent could not use its TPM (it exists but failed), or the
// journal challenged a TPM the agent does not have.
var ErrTPM = errors.New("agent: TPM")

// TPMAttestor is what the agent does with a node's TPM for one enrollment
// or renewal: *tpm.Attestor (the node's TPM, with a fresh attestation key
// loaded), or what Config.OpenTPM gives.
type TPMAttestor interface {
	// EKHash is the EK hash as registration defines it.
	EKHash() string
	// EKPublic and AKPublic are the EK's and the AK's TPMT_PUBLIC.
	EKPublic() []byte
	AKPublic() []byte
	// Activate is TPM2_ActivateCredential of the journal's challenge.
	Activate(credentialBlob, encryptedSecret []byte) ([]byte, error)
	// Quote is a TPM2 quote of the SHA-256 PCRs pcrs over nonce by the
	// AK, with the PCRs' values.
	Quote(nonce []byte, pcrs []int) (*tpm.Quote, error)
	Close() error
}

// openTPM opens the node's TPM and makes a fresh attestation key for one
// enrollment. It returns nil, nil when the agent runs without a TPM (none
// configured, or the device does not exist): the journal then decides
// whether the node needs one (TPM_REQUIRED).
func (a *Agent) openTPM() (TPMAttestor, error) {
	if a.cfg.OpenTPM != nil {
		att, err := a.cfg.OpenTPM()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTPM, err)
		}
		return att, nil
	}
	if a.cfg.TPMDevice == "" {
		return nil, nil
	}
	t, err := tpm.Open(a.cfg.TPMDevice)
	if errors.Is(err, tpm.ErrNoDevice) {
		a.log.Debug("no TPM; enrolling without TPM attestation", logkey.TPMDevice, a.cfg.TPMDevice, logkey.Err, err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrTPM, a.cfg.TPMDevice, err)
	}
	att, err := tpm.NewAttestor(t)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrTPM, a.cfg.TPMDevice, err)
	}
	if a.hw.EKHash != "" && a.hw.EKHash != att.EKHash() {
		a.log.Warn("--tpm-ek-hash differs from the TPM's EK hash; reporting the TPM's", logkey.Configured, a.hw.EKHash, logkey.TPM, att.EKHash())
	}
	return att, nil
}

// answerTPM is round two of a TPM enrollment: the TPM activates the
// journal's credential, and the agent sends the same request again, over
// round one's connection to the same journal (which alone holds the
// challenge), with the proof bound to its CSR key.
func (a *Agent) answerTPM(ctx context.Context, conn *grpc.ClientConn, req *pactv1.EnrollRequest, key crypto.Signer, att TPMAttestor, ch *pactv1.TpmChallenge) (*pactv1.EnrollResponse, error) {
	if att == nil {
		return nil, fmt.Errorf("%w: the journal asks this node to prove its TPM, and the agent has none (--tpm-device %q)", ErrTPM, a.cfg.TPMDevice)
	}
	tpmAtt, err := a.tpmAnswer(req.GetCredentials().GetTpm(), key, att, ch)
	if err != nil {
		return nil, err
	}
	round2 := proto.Clone(req).(*pactv1.EnrollRequest)
	round2.Credentials.Tpm = tpmAtt
	resp, err := a.callEnroll(ctx, conn, round2)
	if err == nil && resp.GetTpmChallenge() != nil {
		return nil, fmt.Errorf("%w: the journal answered the TPM proof with another challenge", ErrTPM)
	}
	return resp, err
}

// tpmAnswer is round two's TPM attestation: the TPM activates the
// journal's credential, the proof binds it to key, and the quote of the
// node's boot carries the challenge's nonce.
func (a *Agent) tpmAnswer(round1 *pactv1.TpmAttestation, key crypto.Signer, att TPMAttestor, ch *pactv1.TpmChallenge) (*pactv1.TpmAttestation, error) {
	secret, err := att.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTPM, err)
	}
	defer clear(secret)
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	out := proto.Clone(round1).(*pactv1.TpmAttestation)
	out.ChallengeId = ch.GetChallengeId()
	out.Proof = tpmattest.Proof(secret, ch.GetChallengeId(), pki.SPKIFingerprintRaw(spki))
	if n := ch.GetQuoteNonce(); len(n) > 0 {
		if out.Quote, err = a.quoteBoot(att, n, ch.GetQuoteIma()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// quoteBoot quotes the node's boot PCRs over the journal's nonce with the
// AK being activated, and adds the TCG event log; with ima (the node's
// boot policy reads it) PCR 10 too, and IMA's list, read after the quote
// so that it holds at least what the quote covers.
func (a *Agent) quoteBoot(att TPMAttestor, nonce []byte, ima bool) (*pactv1.TpmQuote, error) {
	pcrs := tpm.DefaultQuotePCRs
	if ima {
		pcrs = tpm.IMAQuotePCRs
	}
	q, err := att.Quote(nonce, pcrs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTPM, err)
	}
	var imaLog []byte
	if ima {
		if imaLog, err = tpm.ReadIMALog(a.cfg.TPMIMALog); err != nil {
			// The journal decides: its policy finds no list and says so.
			a.log.Warn("cannot read the IMA measurement list the journal asks for; sending the TPM quote without it", logkey.Err, err)
		}
	}
	log, err := tpm.ReadEventLog(a.cfg.TPMEventLog)
	if err != nil {
		// The quote still proves the PCR values; the journal's boot policy
		// decides whether events it cannot replay matter.
		a.log.Warn("cannot read the TCG event log; sending the TPM quote without it", logkey.Err, err)
	}
	out := &pactv1.TpmQuote{Quoted: q.Quoted, Signature: q.Signature, PcrHashAlg: uint32(tpm2.TPMAlgSHA256), EventLog: log, ImaLog: imaLog}
	for _, i := range pcrs {
		out.Pcrs = append(out.Pcrs, &pactv1.TpmPcr{Index: uint32(i), Digest: q.PCRs[i]})
	}
	return out, nil
}

// tpmAttrs say, on the "enrolled" line, what the node's TPM did: attested
// (the journal challenged it and it proved the registered EK), or
// not_required (the node is registered without an EK hash, so the
// hardware match alone enrolled it), with the first 16 hex digits of its
// EK hash to compare with the registry (pact node inspect).
func tpmAttrs(challenged bool, ekHash string) []any {
	what := "not_required"
	if challenged {
		what = "attested"
	}
	return []any{logkey.TPM, what, logkey.TPMEKHash, ekHash[:min(16, len(ekHash))]}
}
