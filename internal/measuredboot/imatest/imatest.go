// Package imatest builds Linux IMA runtime measurement lists for tests and
// extends a (software) TPM's PCR 10 with them, as the kernel's IMA does.
// It is apart from measuredboottest, which the boot-storm benchmark links.
package imatest

import (
	"bytes"
	"crypto/sha1" //nolint:gosec // IMA's list carries SHA-1 template digests
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// File is one entry of an IMA runtime measurement list (template
// ima-ng): the SHA-256 of Content, measured as Path. A Violation is an
// entry the kernel could not measure (its template digest all zeros).
//
// This kernel has no IMA (no securityfs ima/), so tests build the list in
// the kernel's binary format (ima_measurements_show, little-endian as on
// x86) and extend a software TPM's PCR 10 as the kernel would.
type File struct {
	Path      string
	Content   []byte
	Violation bool
}

// FileDigest is the file's SHA-256, as IMA logs it.
func (f File) FileDigest() []byte { d := sha256.Sum256(f.Content); return d[:] }

// templateData is the ima-ng template data: the d-ng field ("sha256:\0"
// and the digest), then the n-ng field (the path and its NUL), each after
// its length.
func (f File) templateData() []byte {
	var b bytes.Buffer
	field := func(v []byte) {
		_ = binary.Write(&b, binary.LittleEndian, uint32(len(v)))
		b.Write(v)
	}
	field(append([]byte("sha256:\x00"), f.FileDigest()...))
	field(append([]byte(f.Path), 0))
	return b.Bytes()
}

// extends is what the entry extends the SHA-256 bank of PCR 10 with.
func (f File) extends() []byte {
	if f.Violation {
		return bytes.Repeat([]byte{0xff}, sha256.Size)
	}
	d := sha256.Sum256(f.templateData())
	return d[:]
}

// List is an IMA measurement list.
type List []File

// Bytes is the list as binary_runtime_measurements gives it.
func (l List) Bytes() []byte {
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	for _, f := range l {
		data := f.templateData()
		w(uint32(10))
		if f.Violation {
			b.Write(make([]byte, sha1.Size))
		} else {
			d := sha1.Sum(data) //nolint:gosec // the list's own field
			b.Write(d[:])
		}
		w(uint32(len("ima-ng")))
		b.WriteString("ima-ng")
		w(uint32(len(data)))
		b.Write(data)
	}
	return b.Bytes()
}

// PCR10 is the SHA-256 PCR 10 the list produces from reset.
func (l List) PCR10() []byte {
	pcr := make([]byte, sha256.Size)
	for _, f := range l {
		h := sha256.New()
		h.Write(pcr)
		h.Write(f.extends())
		pcr = h.Sum(nil)
	}
	return pcr
}

// Extend extends the TPM's SHA-256 PCR 10 with the list's entries.
func (l List) Extend(t testing.TB, tr transport.TPM) {
	t.Helper()
	for _, f := range l {
		_, err := tpm2.PCRExtend{
			PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(10), Auth: tpm2.PasswordAuth(nil)},
			Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: f.extends()}}},
		}.Execute(tr)
		if err != nil {
			t.Fatalf("extend PCR 10 (IMA %s): %v", f.Path, err)
		}
	}
}

// Runtime is a node's IMA list a moment after boot: the boot aggregate,
// then the files it ran.
func Runtime(files ...File) List {
	return append(List{{Path: "boot_aggregate", Content: []byte("pcrs 0-9")}}, files...)
}
