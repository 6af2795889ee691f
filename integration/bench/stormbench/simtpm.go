package main

import (
	"bufio"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-tpm/tpm2"

	"github.com/pact-hpc/pact/agent"
	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/cli"
	"github.com/pact-hpc/pact/internal/measuredboot"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	"github.com/pact-hpc/pact/internal/tpmattest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The TPM-attesting storm (storm -tpm, make bench-storm TPM=1): every node
// is registered with the EK hash of its own TPM and enrolls (and renews)
// with a full TPM round, under a boot policy its boot matches, so the
// journals do all their real work: the EK and AK checks, TPM2_MakeCredential
// to the EK, the proof, the quote's signature and nonce, the event log's
// parsing and replay, the boot policy's verdict.
//
// The TPMs are simulated here, in Go, because no machine runs 10,000
// software TPMs (swtpm is a process each; go-tpm-tools' simulator is cgo
// and one per process). The simulation is only of the TPM: the agent is
// pact-agent's own code (agent.Config.OpenTPM hands it a simTPM instead of
// /dev/tpmrm0), and each simulated TPM does in software exactly what a TPM
// does, with keys of its own, so every byte the journal checks is what a
// real TPM would have sent:
//   - an endorsement key of its own (RSA-2048 from the TCG template, as the
//     agent derives it, or ECC P-256 with -tpm-ek ecc), whose private part
//     never leaves the simulated TPM;
//   - a fresh ECC P-256 attestation key per enrollment, with the agent's
//     AK template (tpm.AKTemplate), so its name is what a TPM computes;
//   - TPM2_ActivateCredential (TPM 2.0 Part 1, 24.4): the seed decrypted
//     with the EK (RSA-OAEP "IDENTITY", or ECDH and KDFe), the credential's
//     HMAC checked under KDFa "INTEGRITY" over the AK's name, the secret
//     decrypted with KDFa "STORAGE" AES-CFB; a credential made for another
//     EK or AK name fails, as on a TPM;
//   - TPM2_Quote: a TPMS_ATTEST of type quote over the SHA-256 bank of the
//     agent's PCR selection (tpm.DefaultQuotePCRs), with the journal's nonce
//     as extraData, signed ECDSA-SHA256 by the AK;
//   - PCRs that are the replay of the node's TCG event log (a netbooted
//     node's boot: firmware, the NIC with the node's own MAC in PCR 1,
//     separators, boot loader, kernel, initrd, command line), written to a
//     file per node that the agent reads and sends as it would
//     /sys/kernel/security/tpm0/binary_bios_measurements.
//
// The endorsement keys are made before the storm, outside its timed
// window (an RSA-2048 key takes ~0.1 s of CPU; a machine's TPM has had
// its EK since manufacture). RSA keys are kept in the user's cache
// directory and reused by later runs.

// simEKKinds are the endorsement keys -tpm-ek makes.
var simEKKinds = []string{"rsa", "ecc"}

// simBootKernel and simBootCmdline are the image every simulated node
// boots (its measurements in PCRs 8 and 9).
const (
	simBootKernel  = "6.12.0-pact-image"
	simBootCmdline = "root=nfs:10.0.0.1:/images/compute ro quiet"
)

// simBoot is node mac's boot, as measuredboottest.Boot, with the node's
// own NIC in PCR 1 (what netbooted machines measure there, which is why
// the captured policy never holds PCR 1).
func simBoot(mac string) measuredboottest.Log {
	l := measuredboottest.Boot(simBootKernel, simBootCmdline)
	for i := range l {
		if l[i].PCR == 1 {
			l[i].Data = []byte("nic " + mac)
		}
	}
	return l
}

// simTPM is one node's TPM.
type simTPM struct {
	ekPublic []byte // TPMT_PUBLIC
	ekHash   string
	rsaEK    *rsa.PrivateKey // or
	eccEK    *ecdh.PrivateKey
	pcrs     map[int][]byte // the SHA-256 bank, from the boot's replay
}

// newSimTPM is a TPM with endorsement key ek (*rsa.PrivateKey or
// *ecdsa.PrivateKey) that booted log.
func newSimTPM(ek any, log measuredboottest.Log) (*simTPM, error) {
	t := &simTPM{pcrs: log.PCRs(tpm.DefaultQuotePCRs...)}
	var pub tpm2.TPMTPublic
	var pk any
	switch k := ek.(type) {
	case *rsa.PrivateKey:
		if k.N.BitLen() != 2048 || k.E != 65537 {
			return nil, fmt.Errorf("simulated TPM: RSA-%d EK with exponent %d (want RSA-2048, 65537)", k.N.BitLen(), k.E)
		}
		pub = tpm2.RSAEKTemplate
		pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: k.N.FillBytes(make([]byte, 256))})
		t.rsaEK, pk = k, &k.PublicKey
	case *ecdsa.PrivateKey:
		e, err := k.ECDH()
		if err != nil {
			return nil, err
		}
		pub = tpm2.ECCEKTemplate
		x, y := k.X.FillBytes(make([]byte, 32)), k.Y.FillBytes(make([]byte, 32))
		pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{X: tpm2.TPM2BECCParameter{Buffer: x}, Y: tpm2.TPM2BECCParameter{Buffer: y}})
		t.eccEK, pk = e, &k.PublicKey
	default:
		return nil, fmt.Errorf("simulated TPM: EK of type %T", ek)
	}
	t.ekPublic = tpm2.Marshal(pub)
	h, err := tpmattest.EKHash(pk)
	if err != nil {
		return nil, err
	}
	t.ekHash = h
	return t, nil
}

// open is the node's agent.Config.OpenTPM: the TPM with a fresh
// attestation key, as tpm.NewAttestor makes one per enrollment.
func (t *simTPM) open() (agent.TPMAttestor, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pub := tpm.AKTemplate
	pub.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: k.X.FillBytes(make([]byte, 32))},
		Y: tpm2.TPM2BECCParameter{Buffer: k.Y.FillBytes(make([]byte, 32))},
	})
	name, err := tpm2.ObjectName(&pub)
	if err != nil {
		return nil, err
	}
	return &simAttestor{t: t, ak: k, akPublic: tpm2.Marshal(pub), akName: name.Buffer}, nil
}

// simAttestor is a simTPM with an attestation key loaded.
type simAttestor struct {
	t        *simTPM
	ak       *ecdsa.PrivateKey
	akPublic []byte
	akName   []byte
}

func (a *simAttestor) EKHash() string   { return a.t.ekHash }
func (a *simAttestor) EKPublic() []byte { return a.t.ekPublic }
func (a *simAttestor) AKPublic() []byte { return a.akPublic }
func (a *simAttestor) Close() error     { return nil }

// errSimIntegrity is TPM_RC_INTEGRITY: the credential was not made for
// this EK and this AK's name.
var errSimIntegrity = errors.New("simulated TPM: activate credential: TPM_RC_INTEGRITY (the credential is not for this EK and AK)")

// Activate is TPM2_ActivateCredential with the AK as the activated object
// and the EK as the key that decrypts the seed.
func (a *simAttestor) Activate(credentialBlob, encryptedSecret []byte) ([]byte, error) {
	const label = "IDENTITY"
	var seed []byte
	switch {
	case a.t.rsaEK != nil:
		s, err := rsa.DecryptOAEP(sha256.New(), nil, a.t.rsaEK, encryptedSecret, []byte(label+"\x00"))
		if err != nil {
			return nil, fmt.Errorf("simulated TPM: activate credential: TPM_RC_VALUE (seed): %w", err)
		}
		seed = s
	default:
		pt, err := tpm2.Unmarshal[tpm2.TPMSECCPoint](encryptedSecret)
		if err != nil {
			return nil, fmt.Errorf("simulated TPM: activate credential: ephemeral point: %w", err)
		}
		eph, err := ecdh.P256().NewPublicKey(slices.Concat([]byte{4}, pt.X.Buffer, pt.Y.Buffer))
		if err != nil {
			return nil, fmt.Errorf("simulated TPM: activate credential: TPM_RC_ECC_POINT: %w", err)
		}
		z, err := a.t.eccEK.ECDH(eph)
		if err != nil {
			return nil, err
		}
		ekX := a.t.eccEK.PublicKey().Bytes()[1:33]
		seed = tpm2.KDFe(crypto.SHA256, z, label, pt.X.Buffer, ekX, 256)
	}
	if len(credentialBlob) < 2 {
		return nil, errSimIntegrity
	}
	n := int(binary.BigEndian.Uint16(credentialBlob))
	if len(credentialBlob) < 2+n {
		return nil, errSimIntegrity
	}
	integrity, encIdentity := credentialBlob[2:2+n], credentialBlob[2+n:]
	mac := hmac.New(sha256.New, tpm2.KDFa(crypto.SHA256, seed, "INTEGRITY", nil, nil, 256))
	mac.Write(encIdentity)
	mac.Write(a.akName)
	if !hmac.Equal(mac.Sum(nil), integrity) {
		return nil, errSimIntegrity
	}
	// The EK templates' symmetric key: AES-128 in CFB mode.
	block, err := aes.NewCipher(tpm2.KDFa(crypto.SHA256, seed, "STORAGE", a.akName, nil, 128))
	if err != nil {
		return nil, err
	}
	plain := make([]byte, len(encIdentity))
	//lint:ignore SA1019 TPM2_ActivateCredential's credential is AES-CFB (TPM 2.0 Part 1, 24.4): this simulates it
	cipher.NewCFBDecrypter(block, make([]byte, block.BlockSize())).XORKeyStream(plain, encIdentity)
	if len(plain) < 2 || int(binary.BigEndian.Uint16(plain)) != len(plain)-2 {
		return nil, errSimIntegrity
	}
	return plain[2:], nil
}

// simClock is the TPMS_CLOCK_INFO's clock: milliseconds since this
// process started (a TPM's since its last reset).
var simClockStart = time.Now()

// Quote is TPM2_Quote of the SHA-256 PCRs pcrs, with nonce as extraData,
// signed by the AK (its scheme: ECDSA-SHA256).
func (a *simAttestor) Quote(nonce []byte, pcrs []int) (*tpm.Quote, error) {
	idx := slices.Sorted(slices.Values(pcrs))
	idx = slices.Compact(idx)
	sel := make([]uint, len(idx))
	digest := sha256.New()
	out := &tpm.Quote{PCRs: make(map[int][]byte, len(idx))}
	for k, i := range idx {
		v, ok := a.t.pcrs[i]
		if !ok {
			v = make([]byte, sha256.Size) // reset, never extended
		}
		sel[k] = uint(i)
		digest.Write(v)
		out.PCRs[i] = slices.Clone(v)
	}
	att := tpm2.TPMSAttest{
		Magic:           tpm2.TPMGeneratedValue,
		Type:            tpm2.TPMSTAttestQuote,
		QualifiedSigner: tpm2.TPM2BName{Buffer: a.akName},
		ExtraData:       tpm2.TPM2BData{Buffer: nonce},
		ClockInfo:       tpm2.TPMSClockInfo{Clock: uint64(time.Since(simClockStart).Milliseconds()), Safe: true},
		Attested: tpm2.NewTPMUAttest(tpm2.TPMSTAttestQuote, &tpm2.TPMSQuoteInfo{
			PCRSelect: tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(sel...)}}},
			PCRDigest: tpm2.TPM2BDigest{Buffer: digest.Sum(nil)},
		}),
	}
	out.Quoted = tpm2.Marshal(att)
	h := sha256.Sum256(out.Quoted)
	r, s, err := ecdsa.Sign(rand.Reader, a.ak, h[:])
	if err != nil {
		return nil, err
	}
	out.Signature = tpm2.Marshal(tpm2.TPMTSignature{
		SigAlg: tpm2.TPMAlgECDSA,
		Signature: tpm2.NewTPMUSignature(tpm2.TPMAlgECDSA, &tpm2.TPMSSignatureECC{
			Hash:       tpm2.TPMAlgSHA256,
			SignatureR: tpm2.TPM2BECCParameter{Buffer: r.FillBytes(make([]byte, 32))},
			SignatureS: tpm2.TPM2BECCParameter{Buffer: s.FillBytes(make([]byte, 32))},
		}),
	})
	return out, nil
}

// simFleet is the TPMs of the inventory's nodes, by inventory index, and
// the directory holding their keys (eks.der) and event logs (log-N.bin).
type simFleet struct {
	dir  string
	kind string
	tpms map[int]*simTPM
}

// logPath is node i's TCG event log.
func (f *simFleet) logPath(i int) string { return filepath.Join(f.dir, fmt.Sprintf("log-%06d.bin", i)) }

// makeSimFleet gives every node of the inventory a TPM with a new EK of
// kind ("rsa": RSA-2048, from the cache when it holds enough; "ecc": P-256)
// and writes the keys and the event logs to dir, for the workers.
func makeSimFleet(dir, kind string, nodes []benchNode) (*simFleet, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	began := time.Now()
	var ders [][]byte
	var err error
	switch kind {
	case "rsa":
		ders, err = cachedRSAKeys(len(nodes))
	case "ecc":
		ders = make([][]byte, len(nodes))
		for i := range ders {
			k, kerr := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if kerr != nil {
				return nil, kerr
			}
			if ders[i], err = x509.MarshalPKCS8PrivateKey(k); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("-tpm-ek %q: want one of %v", kind, simEKKinds)
	}
	if err != nil {
		return nil, err
	}
	if err := writeKeyRecords(filepath.Join(dir, "eks.der"), ders); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "kind"), []byte(kind), 0o600); err != nil {
		return nil, err
	}
	for i, n := range nodes {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("log-%06d.bin", i)), simBoot(n.mac).Bytes(), 0o600); err != nil {
			return nil, err
		}
	}
	f, err := loadSimFleet(dir, nodes, 0, len(nodes))
	if err != nil {
		return nil, err
	}
	logf("-tpm: %d simulated TPMs (%s endorsement keys), their event logs in %s, made in %.1fs, before the storm", len(nodes), ekName(kind), dir, time.Since(began).Seconds())
	return f, nil
}

func ekName(kind string) string {
	if kind == "ecc" {
		return "ECC P-256"
	}
	return "RSA-2048"
}

// loadSimFleet reads the TPMs of nodes [from, to) that makeSimFleet wrote
// to dir.
func loadSimFleet(dir string, nodes []benchNode, from, to int) (*simFleet, error) {
	kind, err := os.ReadFile(filepath.Join(dir, "kind"))
	if err != nil {
		return nil, err
	}
	ders, err := readKeyRecords(filepath.Join(dir, "eks.der"), to)
	if err != nil {
		return nil, err
	}
	if len(ders) < to {
		return nil, fmt.Errorf("%s holds %d keys, not %d", dir, len(ders), to)
	}
	f := &simFleet{dir: dir, kind: string(kind), tpms: make(map[int]*simTPM, to-from)}
	var mu sync.Mutex
	var firstErr error
	parallel(to-from, func(k int) {
		i := from + k
		t, err := parseSimTPM(ders[i], simBoot(nodes[i].mac))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("simulated TPM %d: %w", i, err))
			return
		}
		f.tpms[i] = t
	})
	return f, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func parseSimTPM(der []byte, log measuredboottest.Log) (*simTPM, error) {
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	return newSimTPM(k, log)
}

// parallel runs fn(0..n-1) on every CPU.
func parallel(n int, fn func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// cachedRSAKeys is n RSA-2048 keys (PKCS #8), from the user's cache
// directory, made and added there when it holds fewer.
func cachedRSAKeys(n int) ([][]byte, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "pact-stormbench")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "ek-rsa2048.der")
	have, err := readKeyRecords(path, n)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		logf("-tpm: %s: %v; making new keys", path, err)
		have = nil
	}
	if len(have) >= n {
		return have[:n], nil
	}
	missing := n - len(have)
	logf("-tpm: making %d RSA-2048 endorsement keys (about 0.1 s of CPU each), kept in %s for later runs", missing, path)
	fresh := make([][]byte, missing)
	var mu sync.Mutex
	var firstErr error
	parallel(missing, func(i int) {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		var der []byte
		if err == nil {
			der, err = x509.MarshalPKCS8PrivateKey(k)
		}
		mu.Lock()
		defer mu.Unlock()
		fresh[i], firstErr = der, cmpErr(firstErr, err)
	})
	if firstErr != nil {
		return nil, firstErr
	}
	all := append(have, fresh...)
	if err := writeKeyRecords(path, all); err != nil {
		return nil, err
	}
	return all, nil
}

// writeKeyRecords writes keys as records of a 4-byte big-endian length
// and the key (mode 0600: they are simulated TPMs' private keys, of no
// use outside the benchmark).
func writeKeyRecords(path string, keys [][]byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, k := range keys {
		_ = binary.Write(w, binary.BigEndian, uint32(len(k)))
		_, _ = w.Write(k)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readKeyRecords reads at most max records writeKeyRecords wrote.
func readKeyRecords(path string, max int) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var out [][]byte
	for len(out) < max {
		var n uint32
		if err := binary.Read(r, binary.BigEndian, &n); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if n > 1<<14 {
			return nil, fmt.Errorf("%s: a record of %d bytes", path, n)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// bootPolicyFile writes the boot policy the storm runs under: captured
// (measuredboot.Capture, the defaults of pact boot-policy capture) from a
// quote of the first node's TPM that the journal's own verification
// accepts, enforced with action refuse, as JSON for pact boot-policy set
// --file. Every node boots the same image; PCR 1 (the NIC) differs per
// node and is not in the policy.
func (f *simFleet) bootPolicyFile(path string) error {
	t := f.tpms[0]
	if t == nil {
		return errors.New("no TPM for node 0")
	}
	att, err := t.open()
	if err != nil {
		return err
	}
	nonce := make([]byte, measuredboot.NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	q, err := att.Quote(nonce, tpm.DefaultQuotePCRs)
	if err != nil {
		return err
	}
	log, err := os.ReadFile(f.logPath(0))
	if err != nil {
		return err
	}
	ev, err := measuredboot.VerifyQuote(att.AKPublic(), nonce, measuredboot.Quote{Quoted: q.Quoted, Signature: q.Signature, HashAlg: uint16(tpm2.TPMAlgSHA256), PCRs: q.PCRs, EventLog: log})
	if err != nil {
		return fmt.Errorf("a simulated TPM's quote does not verify: %w", err)
	}
	p, err := measuredboot.Capture(ev, measuredboot.DefaultCapture(), pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE)
	if err != nil {
		return err
	}
	v := cli.BootPolicyView{Mode: "enforce", Action: "refuse", Comment: "stormbench -tpm: the simulated nodes' image"}
	for _, r := range p.GetPcrs() {
		v.PCRs = append(v.PCRs, cli.BootPolicyPCRView{Index: r.GetIndex(), Allowed: hexes(r.GetAllowed())})
	}
	for _, r := range p.GetEvents() {
		v.Events = append(v.Events, cli.BootPolicyEventRow{Name: r.GetName(), PCR: r.GetPcr(), EventType: r.GetEventType(), AllowedDigests: hexes(r.GetAllowedDigests())})
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func hexes(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = hex.EncodeToString(b)
	}
	return out
}
