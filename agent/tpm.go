package agent

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"

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

// openTPM opens the node's TPM and makes a fresh attestation key for one
// enrollment. It returns nil, nil when the agent runs without a TPM (none
// configured, or the device does not exist): the journal then decides
// whether the node needs one (TPM_REQUIRED).
func (a *Agent) openTPM() (*tpm.Attestor, error) {
	if a.cfg.TPMDevice == "" {
		return nil, nil
	}
	t, err := tpm.Open(a.cfg.TPMDevice)
	if errors.Is(err, tpm.ErrNoDevice) {
		a.log.Debug("no TPM; enrolling without TPM attestation", "tpm_device", a.cfg.TPMDevice, logkey.Err, err)
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
		a.log.Warn("--tpm-ek-hash differs from the TPM's EK hash; reporting the TPM's", "configured", a.hw.EKHash, "tpm", att.EKHash())
	}
	return att, nil
}

// answerTPM is round two of a TPM enrollment: the TPM activates the
// journal's credential, and the agent sends the same request again, to the
// same journal (which alone holds the challenge), with the proof bound to
// its CSR key.
func (a *Agent) answerTPM(ctx context.Context, addr string, req *pactv1.EnrollRequest, key crypto.Signer, att *tpm.Attestor, ch *pactv1.TpmChallenge) (*pactv1.EnrollResponse, error) {
	if att == nil {
		return nil, fmt.Errorf("%w: the journal asks this node to prove its TPM, and the agent has none (--tpm-device %q)", ErrTPM, a.cfg.TPMDevice)
	}
	secret, err := att.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTPM, err)
	}
	defer clear(secret)
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	round2 := proto.Clone(req).(*pactv1.EnrollRequest)
	round2.Credentials.Tpm.ChallengeId = ch.GetChallengeId()
	round2.Credentials.Tpm.Proof = tpmattest.Proof(secret, ch.GetChallengeId(), pki.SPKIFingerprintRaw(spki))
	resp, err := a.callEnroll(ctx, addr, round2)
	if err == nil && resp.GetTpmChallenge() != nil {
		return nil, fmt.Errorf("%w: the journal answered the TPM proof with another challenge", ErrTPM)
	}
	return resp, err
}

const tpmEKUsage = `Usage:
  pact-agent tpm-ek [--tpm-device DEV] [-o text|json]

Reads the node's TPM endorsement key (EK) the way pact-agent does when it
enrolls (the persistent EK at 0x81010001, or the one derived from the TCG
default RSA template) and prints its EK hash, the value to register:

  pact node enroll NODE --mac ... --tpm-ek-hash HASH

The EK hash is the hex SHA-256 of the EK public key's DER
SubjectPublicKeyInfo (docs/tpm.md). Also printed: the EK public key in
PEM, for records or to compare with the vendor's EK certificate.

Flags:
`

// tpmEKMain prints the node's EK hash and public key for registration.
func tpmEKMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("pact-agent tpm-ek", stderr, tpmEKUsage)
	device := fs.String("tpm-device", envOrDefault("PACT_AGENT_TPM_DEVICE", tpm.DefaultDevice), "TPM device, or unix:PATH for a software TPM (PACT_AGENT_TPM_DEVICE)")
	output := fs.String("o", "text", "text or json")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "pact-agent tpm-ek: -o %q: want text or json\n", *output)
		return ExitUsage
	}
	pubArea, hash, err := tpm.ReadEK(*device)
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent tpm-ek: %v\n", err)
		if errors.Is(err, tpm.ErrNoDevice) {
			fmt.Fprintf(stderr, "no TPM at %s: is the tpm_crb/tpm_tis driver loaded (ls /dev/tpm*)? Use --tpm-device for another path\n", *device)
		}
		return ExitError
	}
	ek, err := tpmattest.ParseEK(pubArea)
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent tpm-ek: %v\n", err)
		return ExitError
	}
	der, err := x509.MarshalPKIXPublicKey(ek.PublicKey())
	if err != nil {
		fmt.Fprintf(stderr, "pact-agent tpm-ek: %v\n", err)
		return ExitError
	}
	pemText := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			EKHash      string `json:"tpm_ek_hash"`
			EKPublicPEM string `json:"ek_public_pem"`
			Device      string `json:"tpm_device"`
		}{hash, pemText, *device})
		return ExitOK
	}
	fmt.Fprintf(stdout, "tpm_ek_hash: %s\n%s", hash, pemText)
	return ExitOK
}
