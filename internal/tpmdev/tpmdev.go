// Package tpmdev opens a TPM 2.0: the kernel's resource manager
// (/dev/tpmrm0) in production, or a software TPM's socket (unix:PATH,
// swtpm's --server type=unixio) in tests and labs. The agent's attestation
// (agent/tpm) and the CA keys kept in a TPM (internal/keystore) both open
// their TPM here.
//
// It speaks to the TPM through github.com/google/go-tpm (pure Go, no cgo).
package tpmdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
)

// DefaultDevice is the kernel's TPM resource manager: it lets several
// programs use the TPM and flushes what a crashed one left loaded.
const DefaultDevice = "/dev/tpmrm0"

// ErrNoDevice: the TPM device does not exist (a host without a TPM, or the
// driver is not loaded).
var ErrNoDevice = errors.New("tpm: no TPM device")

// Open connects to the TPM at device: a character device (/dev/tpmrm0), or
// unix:PATH for a software TPM's socket.
func Open(device string) (transport.TPMCloser, error) {
	if path, ok := strings.CutPrefix(device, "unix:"); ok {
		path = strings.TrimPrefix(path, "//")
		c, err := net.Dial("unix", path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%w: %s: %w", ErrNoDevice, device, err)
			}
			return nil, fmt.Errorf("tpm: %s: %w", device, err)
		}
		return &retryTPM{t: &streamTPM{conn: c}}, nil
	}
	if _, err := os.Stat(device); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoDevice, device, err)
	}
	t, err := linuxtpm.Open(device)
	if err != nil {
		return nil, fmt.Errorf("tpm: open %s: %w", device, err)
	}
	return &retryTPM{t: t}, nil
}

// retryTPM resends a command the TPM answered with a warning that means
// "not started, send it again" (TPM 2.0 Part 2, 6.6.3): TPM_RC_RETRY,
// TPM_RC_YIELDED, TPM_RC_TESTING. The command had no effect, so the same
// bytes (same session nonces) are valid again.
type retryTPM struct{ t transport.TPMCloser }

const maxRetries = 100

func (r *retryTPM) Send(cmd []byte) ([]byte, error) {
	for i := 0; ; i++ {
		rsp, err := r.t.Send(cmd)
		if err != nil || len(rsp) < 10 || i == maxRetries {
			return rsp, err
		}
		switch tpm2.TPMRC(binary.BigEndian.Uint32(rsp[6:10])) {
		case tpm2.TPMRCRetry, tpm2.TPMRCYielded, tpm2.TPMRCTesting:
			time.Sleep(time.Duration(min(i+1, 10)) * time.Millisecond)
			continue
		}
		return rsp, nil
	}
}

func (r *retryTPM) Close() error { return r.t.Close() }

// streamTPM sends TPM commands over a stream socket and reads each
// response by the size in its header (swtpm's raw command channel).
type streamTPM struct {
	mu   sync.Mutex
	conn net.Conn
}

// maxResponse bounds what is read from a socket pact was pointed at.
const maxResponse = 64 << 10

func (s *streamTPM) Send(cmd []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.conn.Write(cmd); err != nil {
		return nil, fmt.Errorf("tpm: send: %w", err)
	}
	hdr := make([]byte, 10)
	if _, err := io.ReadFull(s.conn, hdr); err != nil {
		return nil, fmt.Errorf("tpm: read response header: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[2:6])
	if size < 10 || size > maxResponse {
		return nil, fmt.Errorf("tpm: response of %d bytes", size)
	}
	rsp := make([]byte, size)
	copy(rsp, hdr)
	if _, err := io.ReadFull(s.conn, rsp[10:]); err != nil {
		return nil, fmt.Errorf("tpm: read response: %w", err)
	}
	return rsp, nil
}

func (s *streamTPM) Close() error { return s.conn.Close() }
