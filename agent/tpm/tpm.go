// Package tpm is the agent's side of TPM 2.0 credential activation: it
// reads the node's endorsement key (EK), makes a fresh attestation key (AK)
// and answers the journal's challenge with TPM2_ActivateCredential. The
// journal's side, which never touches a TPM, is internal/tpmattest.
//
// It speaks to the TPM through github.com/google/go-tpm (pure Go, no cgo),
// opened by internal/tpmdev: the kernel's resource manager (/dev/tpmrm0) in
// production, or a software TPM's socket (unix:PATH, swtpm's --server
// type=unixio) in tests and labs.
package tpm

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/pact-hpc/pact/internal/tpmattest"
	"github.com/pact-hpc/pact/internal/tpmdev"
)

// DefaultDevice is the kernel's TPM resource manager: it lets several
// programs use the TPM and flushes what a crashed one left loaded.
const DefaultDevice = tpmdev.DefaultDevice

// PersistentEK is where TCG's provisioning guidance puts the RSA EK
// (tpm2_createek -c 0x81010001 does too); when it is there the agent uses
// it, otherwise it derives the EK from the TCG default RSA template.
const PersistentEK tpm2.TPMHandle = 0x81010001

// Sentinel errors.
var (
	// ErrNoDevice: the TPM device does not exist (a node without a TPM, or
	// the driver is not loaded).
	ErrNoDevice = tpmdev.ErrNoDevice
	// ErrTPM: the TPM refused or failed a command.
	ErrTPM = errors.New("tpm: TPM command failed")
)

// DefaultTimeout bounds every TPM operation of the agent: opening the TPM
// and each command after (reading the EK, making the AK, activating the
// journal's credential, flushing). The agent's commands take well under a
// second; a TPM that another program holds (a raw /dev/tpmN admits one at
// a time, a software TPM serves one client) or that hangs fails after
// this with ErrTimeout, naming the device and what to do, instead of
// holding the node's enrollment for ever.
const DefaultTimeout = 30 * time.Second

// ErrTimeout: the TPM did not open or answer within the timeout.
var ErrTimeout = tpmdev.ErrTimeout

// Open connects to the TPM at device: a character device (/dev/tpmrm0), or
// unix:PATH for a software TPM's socket (internal/tpmdev). The open and
// every command through it wait at most DefaultTimeout.
func Open(device string) (transport.TPMCloser, error) {
	return tpmdev.OpenWithin(device, DefaultTimeout, nil)
}

// Attestor holds a node's EK and a fresh AK loaded in its TPM for one
// enrollment. Close flushes what it loaded.
type Attestor struct {
	t        transport.TPMCloser
	ekHandle tpm2.TPMHandle
	ekName   tpm2.TPM2BName
	ekPublic []byte
	ekHash   string
	flushEK  bool
	ak       *tpm2.CreatePrimaryResponse
	akPublic []byte
}

// AKTemplate is the attestation key the agent makes: ECC P-256 ECDSA, a
// restricted signing key that never leaves the TPM (fixedTPM, fixedParent,
// sensitiveDataOrigin). The journal refuses anything weaker.
var AKTemplate = tpm2.TPMTPublic{
	Type:    tpm2.TPMAlgECC,
	NameAlg: tpm2.TPMAlgSHA256,
	ObjectAttributes: tpm2.TPMAObject{
		FixedTPM:            true,
		FixedParent:         true,
		SensitiveDataOrigin: true,
		UserWithAuth:        true,
		Restricted:          true,
		SignEncrypt:         true,
	},
	Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
		Symmetric: tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgNull},
		Scheme: tpm2.TPMTECCScheme{
			Scheme:  tpm2.TPMAlgECDSA,
			Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256}),
		},
		CurveID: tpm2.TPMECCNistP256,
		KDF:     tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
	}),
}

// NewAttestor reads the EK from t and creates a fresh AK (a primary key in
// the endorsement hierarchy with a random unique field, so every enrollment
// gets a new one). It takes ownership of t: Close closes it.
func NewAttestor(t transport.TPMCloser) (_ *Attestor, err error) {
	a := &Attestor{t: t}
	defer func() {
		if err != nil {
			_ = a.Close()
		}
	}()
	if err := a.loadEK(); err != nil {
		return nil, err
	}
	tmpl := AKTemplate
	unique := make([]byte, 32)
	if _, err := rand.Read(unique); err != nil {
		return nil, err
	}
	tmpl.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{X: tpm2.TPM2BECCParameter{Buffer: unique}, Y: tpm2.TPM2BECCParameter{Buffer: make([]byte, 32)}})
	ak, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHEndorsement, InPublic: tpm2.New2B(tmpl)}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("%w: create attestation key: %w", ErrTPM, err)
	}
	a.ak = ak
	akPub, err := ak.OutPublic.Contents()
	if err != nil {
		return nil, fmt.Errorf("%w: attestation key public area: %w", ErrTPM, err)
	}
	a.akPublic = tpm2.Marshal(*akPub)
	return a, nil
}

func (a *Attestor) loadEK() error {
	var pub *tpm2.TPMTPublic
	rp, err := (tpm2.ReadPublic{ObjectHandle: PersistentEK}).Execute(a.t)
	if errors.Is(err, ErrTimeout) {
		// Not "no persistent EK": the TPM does not answer at all.
		return fmt.Errorf("%w: read the endorsement key: %w", ErrTPM, err)
	}
	if err == nil {
		p, err := rp.OutPublic.Contents()
		if err != nil {
			return fmt.Errorf("%w: persistent EK public area: %w", ErrTPM, err)
		}
		pub, a.ekHandle, a.ekName = p, PersistentEK, rp.Name
	} else {
		ek, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHEndorsement, InPublic: tpm2.New2B(tpm2.RSAEKTemplate)}.Execute(a.t)
		if err != nil {
			return fmt.Errorf("%w: create the endorsement key from the TCG RSA template: %w", ErrTPM, err)
		}
		p, err := ek.OutPublic.Contents()
		if err != nil {
			return fmt.Errorf("%w: EK public area: %w", ErrTPM, err)
		}
		pub, a.ekHandle, a.ekName, a.flushEK = p, ek.ObjectHandle, ek.Name, true
	}
	a.ekPublic = tpm2.Marshal(*pub)
	parsed, err := tpmattest.ParseEK(a.ekPublic)
	if err != nil {
		return err
	}
	a.ekHash = parsed.Hash
	return nil
}

// EKPublic is the EK's TPMT_PUBLIC.
func (a *Attestor) EKPublic() []byte { return a.ekPublic }

// EKHash is the EK hash as registration defines it (tpmattest.EKHash).
func (a *Attestor) EKHash() string { return a.ekHash }

// TPM is the connection the attestor holds: a test measures into a
// software TPM through it (swtpm serves one connection at a time).
func (a *Attestor) TPM() transport.TPM { return a.t }

// AKPublic is the AK's TPMT_PUBLIC.
func (a *Attestor) AKPublic() []byte { return a.akPublic }

// Activate runs TPM2_ActivateCredential: the TPM recovers the secret only
// if the credential was made for this EK and this AK's name.
func (a *Attestor) Activate(credentialBlob, encryptedSecret []byte) ([]byte, error) {
	rsp, err := tpm2.ActivateCredential{
		ActivateHandle: tpm2.NamedHandle{Handle: a.ak.ObjectHandle, Name: a.ak.Name},
		KeyHandle: tpm2.AuthHandle{
			Handle: a.ekHandle,
			Name:   a.ekName,
			// The TCG EK's policy is PolicySecret(TPM_RH_ENDORSEMENT).
			Auth: tpm2.Policy(tpm2.TPMAlgSHA256, 16, func(t transport.TPM, h tpm2.TPMISHPolicy, nonce tpm2.TPM2BNonce) error {
				_, err := tpm2.PolicySecret{AuthHandle: tpm2.TPMRHEndorsement, PolicySession: h, NonceTPM: nonce}.Execute(t)
				return err
			}),
		},
		CredentialBlob: tpm2.TPM2BIDObject{Buffer: credentialBlob},
		Secret:         tpm2.TPM2BEncryptedSecret{Buffer: encryptedSecret},
	}.Execute(a.t)
	if err != nil {
		return nil, fmt.Errorf("%w: activate credential: %w", ErrTPM, err)
	}
	return rsp.CertInfo.Buffer, nil
}

// Close flushes the AK (and a derived EK) and closes the TPM connection.
func (a *Attestor) Close() error {
	var errs []error
	if a.ak != nil {
		if _, err := (tpm2.FlushContext{FlushHandle: a.ak.ObjectHandle}).Execute(a.t); err != nil {
			errs = append(errs, err)
		}
	}
	if a.flushEK {
		if _, err := (tpm2.FlushContext{FlushHandle: a.ekHandle}).Execute(a.t); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, a.t.Close())
	return errors.Join(errs...)
}

// ReadEK opens device and returns the EK's public area and hash, for
// registration (pact-agent tpm-ek).
func ReadEK(device string) (ekPublic []byte, ekHash string, err error) {
	t, err := Open(device)
	if err != nil {
		return nil, "", err
	}
	a := &Attestor{t: t}
	defer a.Close()
	if err := a.loadEK(); err != nil {
		return nil, "", err
	}
	return a.ekPublic, a.ekHash, nil
}

// DefaultEventLog is where Linux exposes the firmware's TCG event log.
const DefaultEventLog = "/sys/kernel/security/tpm0/binary_bios_measurements"

// MaxEventLog is the largest event log the agent sends (the journal's
// bound, internal/measuredboot.MaxEventLog).
const MaxEventLog = 2 << 20

// ReadEventLog reads the TCG event log at path. A missing file is no log
// (nil, nil): a node without measured boot firmware, or a test.
func ReadEventLog(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tpm: event log: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxEventLog+1))
	if err != nil {
		return nil, fmt.Errorf("tpm: event log %s: %w", path, err)
	}
	if len(b) > MaxEventLog {
		return nil, fmt.Errorf("tpm: event log %s is larger than %d bytes", path, MaxEventLog)
	}
	return b, nil
}

// DefaultQuotePCRs are the PCRs the agent quotes: the firmware, boot
// loader, kernel and Secure Boot measurements of a PC client (0-9) and
// shim's (14). PCR 10 (IMA) changes while the node runs: it is quoted,
// with the IMA list, only when the node's boot policy reads that
// (IMAQuotePCRs).
var DefaultQuotePCRs = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 14}

// IMAPCR is the PCR the kernel's IMA extends.
const IMAPCR = 10

// IMAQuotePCRs are DefaultQuotePCRs and IMA's PCR.
var IMAQuotePCRs = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, IMAPCR, 14}

// DefaultIMALog is where Linux exposes IMA's runtime measurement list.
const DefaultIMALog = "/sys/kernel/security/ima/binary_runtime_measurements"

// MaxIMALog is the largest IMA list the agent sends (the journal's bound,
// internal/measuredboot.MaxIMALog).
const MaxIMALog = 1 << 20

// ReadIMALog reads IMA's measurement list at path. Unlike the event log,
// a list asked for must be there: a missing file is an error naming it.
// Read after the quote, it holds at least what the quote covers.
func ReadIMALog(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("tpm: the journal asks for the IMA measurement list, and no --tpm-ima-log is set")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tpm: IMA measurement list (is IMA on, and securityfs mounted?): %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxIMALog+1))
	if err != nil {
		return nil, fmt.Errorf("tpm: IMA measurement list %s: %w", path, err)
	}
	if len(b) > MaxIMALog {
		return nil, fmt.Errorf("tpm: IMA measurement list %s is larger than %d bytes: measure fewer files (the IMA policy)", path, MaxIMALog)
	}
	return b, nil
}

// Quote is a TPM2 quote of the SHA-256 PCR bank by the attestor's AK.
type Quote struct {
	// Quoted is the TPMS_ATTEST the TPM signed, Signature its
	// TPMT_SIGNATURE.
	Quoted, Signature []byte
	// PCRs are the values of the quoted PCRs, read after the quote.
	PCRs map[int][]byte
}

// Quote signs the SHA-256 values of pcrs, with nonce as the quote's
// extraData, by the AK, and reads those values.
func (a *Attestor) Quote(nonce []byte, pcrs []int) (*Quote, error) {
	for _, i := range pcrs {
		if i < 0 || i > 23 {
			return nil, fmt.Errorf("tpm: PCR %d does not exist (0..23)", i)
		}
	}
	sel := func(idx []int) tpm2.TPMLPCRSelection {
		return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(toUint(idx)...)}}}
	}
	rsp, err := tpm2.Quote{
		SignHandle:     tpm2.AuthHandle{Handle: a.ak.ObjectHandle, Name: a.ak.Name, Auth: tpm2.PasswordAuth(nil)},
		QualifyingData: tpm2.TPM2BData{Buffer: nonce},
		InScheme:       tpm2.TPMTSigScheme{Scheme: tpm2.TPMAlgNull},
		PCRSelect:      sel(pcrs),
	}.Execute(a.t)
	if err != nil {
		return nil, fmt.Errorf("%w: quote: %w", ErrTPM, err)
	}
	q := &Quote{Quoted: rsp.Quoted.Bytes(), Signature: tpm2.Marshal(rsp.Signature), PCRs: make(map[int][]byte, len(pcrs))}
	want := slices.Clone(pcrs)
	// TPM2_PCR_Read returns at most 8 digests a call, and says which.
	for len(want) > 0 {
		r, err := tpm2.PCRRead{PCRSelectionIn: sel(want)}.Execute(a.t)
		if err != nil {
			return nil, fmt.Errorf("%w: read PCRs: %w", ErrTPM, err)
		}
		var got []int
		for _, s := range r.PCRSelectionOut.PCRSelections {
			for b, bits := range s.PCRSelect {
				for bit := range 8 {
					if bits&(1<<bit) != 0 {
						got = append(got, b*8+bit)
					}
				}
			}
		}
		if len(got) == 0 || len(got) != len(r.PCRValues.Digests) {
			return nil, fmt.Errorf("%w: read PCRs: the TPM returned %d values for %d PCRs", ErrTPM, len(r.PCRValues.Digests), len(got))
		}
		for k, i := range got {
			q.PCRs[i] = slices.Clone(r.PCRValues.Digests[k].Buffer)
		}
		before := len(want)
		want = slices.DeleteFunc(want, func(i int) bool { return slices.Contains(got, i) })
		if len(want) == before {
			return nil, fmt.Errorf("%w: read PCRs: the TPM returned none of those asked for", ErrTPM)
		}
	}
	return q, nil
}

func toUint(idx []int) []uint {
	out := make([]uint, len(idx))
	for k, i := range idx {
		out[k] = uint(i)
	}
	return out
}
