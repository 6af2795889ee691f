// Package measuredboottest builds TCG event logs for tests and extends a
// (software) TPM's PCRs with the same events, as firmware and a boot
// loader do on a real machine.
package measuredboottest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// TCG event types used by tests.
const (
	EvNoAction         = 0x03
	EvSeparator        = 0x04
	EvIPL              = 0x0d
	EvEFIAction        = 0x80000007
	EvEFIBootServicesA = 0x80000003
)

// Event is one measurement: SHA-256 of Data into PCR.
type Event struct {
	PCR  int
	Type uint32
	Data []byte
}

// Digest is the event's SHA-256.
func (e Event) Digest() []byte { d := sha256.Sum256(e.Data); return d[:] }

// Log is a sequence of events.
type Log []Event

// Bytes is the crypto-agile (TCG PC Client, SHA-256 only) binary log:
// the Spec ID event in the SHA-1 format, then one TCG_PCR_EVENT2 each.
func (l Log) Bytes() []byte {
	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	var spec bytes.Buffer
	spec.WriteString("Spec ID Event03\x00")
	_ = binary.Write(&spec, binary.LittleEndian, struct {
		PlatformClass              uint32
		Minor, Major, Errata, Uint uint8
		NumAlgs                    uint32
		Alg, Size                  uint16
		VendorInfoSize             uint8
	}{0, 0, 2, 0, 2, 1, uint16(tpm2.TPMAlgSHA256), 32, 0})
	w(uint32(0))
	w(uint32(EvNoAction))
	w([20]byte{})
	w(uint32(spec.Len()))
	b.Write(spec.Bytes())
	for _, e := range l {
		w(uint32(e.PCR))
		w(e.Type)
		w(uint32(1))
		w(uint16(tpm2.TPMAlgSHA256))
		b.Write(e.Digest())
		w(uint32(len(e.Data)))
		b.Write(e.Data)
	}
	return b.Bytes()
}

// Extend extends the TPM's SHA-256 PCRs with the log's events.
func (l Log) Extend(t testing.TB, tr transport.TPM) {
	t.Helper()
	for _, e := range l {
		_, err := tpm2.PCRExtend{
			PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(e.PCR), Auth: tpm2.PasswordAuth(nil)},
			Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: e.Digest()}}},
		}.Execute(tr)
		if err != nil {
			t.Fatalf("extend PCR %d: %v", e.PCR, err)
		}
	}
}

// Boot is a small boot as a netbooted node measures it: firmware (PCR 0),
// the NIC's option ROM/MAC (PCR 1), separators, the boot loader (PCR 4),
// and the kernel, initrd and command line (PCR 8, 9) as GRUB logs them.
func Boot(kernel, cmdline string) Log {
	var l Log
	l = append(l, Event{0, EvEFIAction, []byte("firmware 1.0")})
	l = append(l, Event{1, EvEFIAction, []byte("nic 52:54:00:00:00:01")})
	for pcr := range 8 {
		l = append(l, Event{pcr, EvSeparator, []byte{0, 0, 0, 0}})
	}
	l = append(l, Event{4, EvEFIBootServicesA, []byte("grubx64.efi")})
	l = append(l, Event{9, EvIPL, []byte("/vmlinuz " + kernel)})
	l = append(l, Event{9, EvIPL, []byte("/initrd.img")})
	l = append(l, Event{8, EvIPL, []byte("kernel_cmdline: " + cmdline)})
	return l
}

// PCRs are the SHA-256 PCR values the log's events produce from reset
// (all zero), for the PCRs given (every PCR of the log when none are).
func (l Log) PCRs(pcrs ...int) map[int][]byte {
	out := map[int][]byte{}
	for _, i := range pcrs {
		out[i] = make([]byte, 32)
	}
	for _, e := range l {
		prev, ok := out[e.PCR]
		if !ok {
			if len(pcrs) > 0 {
				continue
			}
			prev = make([]byte, 32)
		}
		h := sha256.New()
		h.Write(prev)
		h.Write(e.Digest())
		out[e.PCR] = h.Sum(nil)
	}
	return out
}
