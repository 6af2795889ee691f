package tpmdev

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/go-tpm/tpm2/transport"

	"github.com/pact-hpc/pact/internal/clock"
)

// ErrTimeout: the TPM did not open, or did not answer a command, within
// the time it was given: another program holds it (a raw /dev/tpmN admits
// one program at a time, a software TPM serves one client), or it hangs.
var ErrTimeout = errors.New("tpm: the TPM did not answer in time")

// OpenWithin is Open, bounded: opening the TPM and each command sent
// through what it returns wait at most timeout (timed by clk, the system
// clock when nil) and then fail with ErrTimeout, naming the device and
// what to do, instead of hanging their caller. A command that timed out
// is left to finish in the background; no command follows it on the
// connection, and Close does not wait for it.
func OpenWithin(device string, timeout time.Duration, clk clock.Clock) (transport.TPMCloser, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	type opened struct {
		t   transport.TPMCloser
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		t, err := Open(device)
		ch <- opened{t, err}
	}()
	timer := clk.NewTimer(timeout)
	defer timer.Stop()
	select {
	case o := <-ch:
		if o.err != nil {
			return nil, o.err
		}
		return &bounded{device: device, timeout: timeout, clk: clk, t: o.t}, nil
	case <-timer.C():
		// open(2) is blocked in the kernel: let it finish, then close.
		go func() {
			if o := <-ch; o.err == nil {
				_ = o.t.Close()
			}
		}()
		return nil, timeoutError(device, "did not open within "+timeout.String())
	}
}

// timeoutError says which TPM did not answer, and what to do.
func timeoutError(device, what string) error {
	var hint string
	switch {
	case strings.HasPrefix(device, "unix:"):
		hint = "a software TPM serves one client at a time: stop the other client"
	case strings.HasPrefix(device, "/dev/tpm") && !strings.HasPrefix(device, "/dev/tpmrm"):
		hint = device + " admits one program at a time: use the kernel's resource manager (--tpm-device /dev/tpmrm0), or stop the program that holds it (fuser -v " + device + ")"
	default:
		hint = "another program may keep it busy (fuser -v " + device + " shows who has it open); a TPM that answers nobody for minutes needs the host rebooted"
	}
	return fmt.Errorf("%w: the TPM at %s %s; %s, then try again (docs/tpm.md)", ErrTimeout, device, what, hint)
}

// bounded is a TPM connection whose every command waits at most timeout.
type bounded struct {
	device  string
	timeout time.Duration
	clk     clock.Clock
	t       transport.TPMCloser

	mu sync.Mutex
	// late: a command timed out, and its answer may still come; no
	// command follows it.
	late bool
}

type sent struct {
	rsp []byte
	err error
}

func (b *bounded) Send(cmd []byte) ([]byte, error) {
	b.mu.Lock()
	late := b.late
	b.mu.Unlock()
	if late {
		return nil, timeoutError(b.device, "has not answered an earlier command")
	}
	ch := make(chan sent, 1)
	go func() {
		rsp, err := b.t.Send(cmd)
		ch <- sent{rsp, err}
	}()
	timer := b.clk.NewTimer(b.timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.rsp, r.err
	case <-timer.C():
		b.mu.Lock()
		b.late = true
		b.mu.Unlock()
		return nil, timeoutError(b.device, fmt.Sprintf("did not answer a command within %s", b.timeout))
	}
}

// Close closes the connection. With a command still outstanding it does
// not wait for it: the close is done off the caller's path (a device's
// file is closed once that command's read returns; a socket at once).
func (b *bounded) Close() error {
	b.mu.Lock()
	late := b.late
	b.mu.Unlock()
	if !late {
		return b.t.Close()
	}
	go func() { _ = b.t.Close() }()
	return nil
}
