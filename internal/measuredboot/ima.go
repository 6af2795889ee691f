package measuredboot

import (
	"bytes"
	"crypto"
	"crypto/sha1" //nolint:gosec // IMA's list carries SHA-1 template digests; checked for consistency only, never trusted
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The Linux IMA runtime measurement list (docs/tpm.md, "IMA"): what the
// running kernel measured after boot, each file it was told to, extended
// into PCR 10. A site that asks for it (BootPolicyIMA) gets the list
// replayed against the quoted PCR and its files' digests checked.
//
// No well-kept Go library parses IMA's list (go-attestation, which parses
// the TCG event log here, does not; go-tpm-tools' server package is not
// buildable from the module proxy, docs/tpm.md), and its format is four
// length-prefixed fields an entry, so this file parses it, with the same
// bounds as the event log and a fuzz target (FuzzReplayIMA).

// ErrIMALogInvalid: the IMA list is malformed, of a template pact does not
// read, or does not reproduce the quoted PCR.
var ErrIMALogInvalid = errors.New("measuredboot: IMA measurement list does not reproduce the quoted PCR")

// Bounds on the IMA list.
const (
	// MaxIMALog: about ten thousand entries of a typical path length. A
	// node whose policy measures more sends a list that is refused, and
	// should measure less (docs/tpm.md, "IMA").
	MaxIMALog = 1 << 20
	// IMAPCR is the PCR the kernel extends unless built otherwise.
	IMAPCR = 10
	// maxIMAField bounds one field: a path (PATH_MAX), a digest, or a
	// signature.
	maxIMAField = 8192
	// maxTemplateName bounds a template's name ("ima-ng", "ima-sig", ...).
	maxTemplateName = 64
)

// IMAEntry is one verified entry of the list: its template hash
// reproduced the quoted PCR.
type IMAEntry struct {
	PCR      int
	Template string
	// FileDigestAlg and FileDigest are the measured file's digest ("sha256"
	// and its bytes); Path is the file's name as the kernel logged it.
	FileDigestAlg string
	FileDigest    []byte
	Path          string
	// Violation is an entry the kernel could not measure (a file open for
	// writing while measured, "ToMToU"): it extends the PCR with all ones
	// and carries no trustworthy digest.
	Violation bool
}

// imaRecord is one parsed entry before replay.
type imaRecord struct {
	pcr          int
	sha1Template []byte
	template     string
	data         []byte // the template data: every field, each after its length
}

// ReplayIMA parses an untrusted IMA list in the kernel's binary format
// (binary_runtime_measurements; integers little-endian, as on x86 and in
// ima_canonical_fmt) and replays its entries in the bank of quoted (each
// template's data hashed in that bank, as Linux 5.8 and later extend every
// bank) against the quoted values. Each PCR the list extends must be quoted.
//
// The list keeps growing while a node runs, and an agent reads it after
// its quote, so a list longer than the quote covers is the normal case:
// the entries kept are those of the shortest prefix that reproduces every
// quoted PCR the list extends; later ones are not verified and are
// dropped. No prefix reproducing them is an error.
func ReplayIMA(list []byte, bank crypto.Hash, quoted map[int][]byte) ([]IMAEntry, error) {
	if len(list) > MaxIMALog {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrIMALogInvalid, len(list), MaxIMALog)
	}
	if !bank.Available() {
		return nil, fmt.Errorf("%w: hash %v not available", ErrIMALogInvalid, bank)
	}
	records, err := parseIMA(list)
	if err != nil {
		return nil, err
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: the list is empty (IMA records at least its boot_aggregate)", ErrIMALogInvalid)
	}
	running := map[int][]byte{}
	for _, r := range records {
		if _, ok := quoted[r.pcr]; !ok {
			return nil, fmt.Errorf("%w: an entry extends PCR %d, which is not quoted", ErrIMALogInvalid, r.pcr)
		}
		if running[r.pcr] == nil {
			running[r.pcr] = make([]byte, bank.Size())
		}
	}
	// A prefix is checked whenever an entry has just changed its PCR; the
	// others cannot have changed since they last matched or did not.
	matches := func() bool {
		for pcr, v := range running {
			if !bytes.Equal(v, quoted[pcr]) {
				return false
			}
		}
		return true
	}
	out := make([]IMAEntry, 0, len(records))
	for _, r := range records {
		e, digest, err := r.entry(bank)
		if err != nil {
			return nil, err
		}
		h := bank.New()
		h.Write(running[r.pcr])
		h.Write(digest)
		running[r.pcr] = h.Sum(nil)
		out = append(out, e)
		if matches() {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w: no prefix of its %d entries reproduces the quoted PCRs", ErrIMALogInvalid, len(records))
}

// parseIMA splits the list into its entries, bounding every length.
func parseIMA(list []byte) ([]imaRecord, error) {
	var out []imaRecord
	r := list
	u32 := func(what string) (uint32, error) {
		if len(r) < 4 {
			return 0, fmt.Errorf("%w: entry %d: truncated before its %s", ErrIMALogInvalid, len(out)+1, what)
		}
		v := binary.LittleEndian.Uint32(r)
		r = r[4:]
		return v, nil
	}
	take := func(n uint32, limit int, what string) ([]byte, error) {
		if int64(n) > int64(limit) {
			return nil, fmt.Errorf("%w: entry %d: %s of %d bytes (at most %d)", ErrIMALogInvalid, len(out)+1, what, n, limit)
		}
		if int(n) > len(r) {
			return nil, fmt.Errorf("%w: entry %d: truncated in its %s", ErrIMALogInvalid, len(out)+1, what)
		}
		b := r[:n]
		r = r[n:]
		return b, nil
	}
	for len(r) > 0 {
		pcr, err := u32("PCR")
		if err != nil {
			return nil, err
		}
		if pcr >= NumPCRs {
			return nil, fmt.Errorf("%w: entry %d: PCR %d does not exist", ErrIMALogInvalid, len(out)+1, pcr)
		}
		digest, err := take(sha1.Size, sha1.Size, "template digest")
		if err != nil {
			return nil, err
		}
		n, err := u32("template name length")
		if err != nil {
			return nil, err
		}
		name, err := take(n, maxTemplateName, "template name")
		if err != nil {
			return nil, err
		}
		if string(name) == "ima" {
			// The first template (Linux before 3.13): SHA-1 digests
			// only, no length before its data.
			return nil, fmt.Errorf("%w: entry %d: the \"ima\" template (SHA-1 only) is not read; boot with ima_template=ima-ng", ErrIMALogInvalid, len(out)+1)
		}
		n, err = u32("template data length")
		if err != nil {
			return nil, err
		}
		data, err := take(n, 3*(4+maxIMAField), "template data")
		if err != nil {
			return nil, err
		}
		out = append(out, imaRecord{pcr: int(pcr), sha1Template: digest, template: string(name), data: data})
	}
	return out, nil
}

// entry reads a record's fields and returns what it extends its PCR with
// in bank.
func (r imaRecord) entry(bank crypto.Hash) (IMAEntry, []byte, error) {
	e := IMAEntry{PCR: r.pcr, Template: r.template}
	// A violation's template digest is all zeros; the kernel still logs
	// the file it could not measure.
	e.Violation = bytes.Equal(r.sha1Template, make([]byte, sha1.Size))
	if sum := sha1.Sum(r.data); !e.Violation && !bytes.Equal(sum[:], r.sha1Template) {
		return e, nil, fmt.Errorf("%w: an entry of template %s whose SHA-1 template digest is not its data's", ErrIMALogInvalid, r.template)
	}
	fields, err := imaFields(r.data)
	if err != nil {
		return e, nil, err
	}
	switch r.template {
	case "ima-ng", "ima-sig", "ima-buf", "ima-modsig":
		// d-ng, then n-ng (ima-buf: the buffer's name), then what the
		// template adds (a signature, a buffer), which pact does not read.
		if len(fields) < 2 {
			return e, nil, fmt.Errorf("%w: an entry of template %s with %d fields", ErrIMALogInvalid, r.template, len(fields))
		}
		alg, digest, ok := bytes.Cut(fields[0], []byte(":\x00"))
		if !ok || len(alg) == 0 || len(digest) == 0 {
			return e, nil, fmt.Errorf("%w: an entry of template %s whose digest field is not ALGO:\\0DIGEST", ErrIMALogInvalid, r.template)
		}
		e.FileDigestAlg, e.FileDigest = string(alg), bytes.Clone(digest)
		e.Path = strings.TrimSuffix(string(fields[1]), "\x00")
	default:
		return e, nil, fmt.Errorf("%w: template %q is not read (ima-ng, ima-sig, ima-buf and ima-modsig are)", ErrIMALogInvalid, r.template)
	}
	if e.Violation {
		// The kernel extends every bank with all ones, and the digest
		// logged says nothing of the file.
		e.FileDigest = nil
		return e, bytes.Repeat([]byte{0xff}, bank.Size()), nil
	}
	h := bank.New()
	h.Write(r.data)
	return e, h.Sum(nil), nil
}

// imaFields splits template data into its fields, each after its
// little-endian length.
func imaFields(data []byte) ([][]byte, error) {
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 4 {
			return nil, fmt.Errorf("%w: a template field truncated before its length", ErrIMALogInvalid)
		}
		n := binary.LittleEndian.Uint32(data)
		data = data[4:]
		if int64(n) > int64(len(data)) || n > maxIMAField {
			return nil, fmt.Errorf("%w: a template field of %d bytes (at most %d, and what is left)", ErrIMALogInvalid, n, maxIMAField)
		}
		out = append(out, data[:n])
		data = data[n:]
	}
	return out, nil
}

// Bounds on a policy's IMA rules (it lives in Raft).
const (
	MaxIMAFiles    = 1024
	MaxIMAExcludes = 64
	maxIMAPath     = 4096
)

// validateIMA reports every problem of a policy's IMA rules.
func validateIMA(r *pactv1.BootPolicyIma) []error {
	if r == nil {
		return nil
	}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: IMA: "+format, append([]any{ErrPolicyInvalid}, a...)...))
	}
	if len(r.GetFiles()) == 0 && !r.GetOnlyListed() {
		bad("no file rule and not only_listed: it would allow any measurement")
	}
	if len(r.GetFiles()) > MaxIMAFiles {
		bad("%d file rules, at most %d", len(r.GetFiles()), MaxIMAFiles)
	}
	if len(r.GetExcludePrefixes()) > MaxIMAExcludes {
		bad("%d excluded prefixes, at most %d", len(r.GetExcludePrefixes()), MaxIMAExcludes)
	}
	for _, x := range r.GetExcludePrefixes() {
		if x == "" || len(x) > maxIMAPath {
			bad("an excluded prefix of %d bytes (1..%d): an empty one would exclude every file", len(x), maxIMAPath)
		}
	}
	seen := map[string]bool{}
	for _, f := range r.GetFiles() {
		if f.GetPath() == "" || len(f.GetPath()) > maxIMAPath {
			bad("a file rule's path of %d bytes (1..%d)", len(f.GetPath()), maxIMAPath)
			continue
		}
		if seen[f.GetPath()] {
			bad("%q has two rules", f.GetPath())
		}
		seen[f.GetPath()] = true
		if len(f.GetAllowedDigests()) == 0 {
			bad("%q allows nothing", f.GetPath())
		}
		if len(f.GetAllowedDigests()) > MaxPolicyAllowed {
			bad("%q allows %d digests, at most %d", f.GetPath(), len(f.GetAllowedDigests()), MaxPolicyAllowed)
		}
		for _, d := range f.GetAllowedDigests() {
			switch len(d) {
			case 20, 32, 48, 64:
			default:
				bad("%q: a digest of %d bytes (SHA-1, -256, -384 or -512, as IMA logs them)", f.GetPath(), len(d))
			}
		}
	}
	return errs
}

// evaluateIMA says how the IMA list of ev differs from a policy's IMA
// rules: a line each, naming the file.
func evaluateIMA(r *pactv1.BootPolicyIma, ev *BootEvidence) []string {
	if r == nil {
		return nil
	}
	if !ev.IMALog {
		return []string{fmt.Sprintf("no IMA measurement list was sent (with PCR %d quoted)", IMAPCR)}
	}
	allowed := make(map[string][][]byte, len(r.GetFiles()))
	for _, f := range r.GetFiles() {
		allowed[f.GetPath()] = f.GetAllowedDigests()
	}
	excluded := func(path string) bool {
		return slices.ContainsFunc(r.GetExcludePrefixes(), func(x string) bool { return strings.HasPrefix(path, x) })
	}
	var out []string
	for _, e := range ev.IMA {
		if excluded(e.Path) {
			continue
		}
		want, listed := allowed[e.Path]
		switch {
		case e.Violation:
			// The kernel could not measure a file (it was open for
			// writing): its content is unknown.
			if r.GetOnlyListed() || listed {
				out = append(out, fmt.Sprintf("IMA: a measurement violation (a file measured while open for writing)%s", pathNote(e.Path)))
			}
		case listed && !containsDigest(want, e.FileDigest):
			out = append(out, fmt.Sprintf("IMA: %s has %s digest %s, not an allowed one", e.Path, e.FileDigestAlg, short(e.FileDigest)))
		case !listed && r.GetOnlyListed():
			out = append(out, fmt.Sprintf("IMA: %s (%s %s) is not a listed file", e.Path, e.FileDigestAlg, short(e.FileDigest)))
		}
	}
	return out
}

func pathNote(p string) string {
	if p == "" {
		return ""
	}
	return ": " + p
}

// captureIMA lists each file of ev's verified IMA list with the digests
// seen.
func captureIMA(ev *BootEvidence) (*pactv1.BootPolicyIma, error) {
	if !ev.IMALog {
		return nil, errors.New("measuredboot: the node's last quote carries no IMA list (its policy did not ask for one: set a policy in observe mode with \"ima\": {\"only_listed\": true} first, docs/tpm.md \"IMA\")")
	}
	out := &pactv1.BootPolicyIma{}
	for _, e := range ev.IMA {
		if e.Violation || e.Path == "boot_aggregate" {
			continue
		}
		k := slices.IndexFunc(out.Files, func(f *pactv1.BootPolicyImaFile) bool { return f.Path == e.Path })
		if k < 0 {
			out.Files = append(out.Files, &pactv1.BootPolicyImaFile{Path: e.Path})
			k = len(out.Files) - 1
		}
		if !containsDigest(out.Files[k].AllowedDigests, e.FileDigest) {
			out.Files[k].AllowedDigests = append(out.Files[k].AllowedDigests, slices.Clone(e.FileDigest))
		}
	}
	if len(out.Files) == 0 {
		return nil, errors.New("measuredboot: the node's IMA list measured no file besides its boot aggregate")
	}
	return out, nil
}

// mergeIMA allows what either allows, as Merge does for the boot's
// rules: each file's digests of both, only_listed when each policy with
// IMA rules has it, the excluded prefixes of both.
func mergeIMA(p, q *pactv1.BootPolicyIma) *pactv1.BootPolicyIma {
	if p == nil && q == nil {
		return nil
	}
	out := &pactv1.BootPolicyIma{OnlyListed: (p == nil || p.GetOnlyListed()) && (q == nil || q.GetOnlyListed())}
	for _, r := range []*pactv1.BootPolicyIma{p, q} {
		for _, f := range r.GetFiles() {
			k := slices.IndexFunc(out.Files, func(o *pactv1.BootPolicyImaFile) bool { return o.Path == f.GetPath() })
			if k < 0 {
				out.Files = append(out.Files, &pactv1.BootPolicyImaFile{Path: f.GetPath()})
				k = len(out.Files) - 1
			}
			for _, d := range f.GetAllowedDigests() {
				if !containsDigest(out.Files[k].AllowedDigests, d) {
					out.Files[k].AllowedDigests = append(out.Files[k].AllowedDigests, slices.Clone(d))
				}
			}
		}
		for _, x := range r.GetExcludePrefixes() {
			if !slices.Contains(out.ExcludePrefixes, x) {
				out.ExcludePrefixes = append(out.ExcludePrefixes, x)
			}
		}
	}
	return out
}
