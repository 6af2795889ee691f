package keystore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/tpmdev"
)

// DefaultTPMTimeout bounds each TPM operation when Options.TPMTimeout is
// zero: opening the TPM (until it answers a first command) and each
// command after. A TPM answers pact's commands in well under a second; a
// TPM that another program keeps busy (/dev/tpm0 is exclusive; swtpm serves
// one client at a time; another client's RSA key generation through the
// resource manager may take tens of seconds) is waited for this long.
const DefaultTPMTimeout = 30 * time.Second

// lateAnswerWait is how long a command that timed out is still waited for,
// off the caller's path, so that what it loaded is flushed when the TPM
// answers after all.
const lateAnswerWait = 5 * time.Minute

// tpmError is a TPM error kind that is also ErrTPM.
type tpmError struct{ msg string }

func (e *tpmError) Error() string        { return e.msg }
func (e *tpmError) Is(target error) bool { return target == ErrTPM }

// Transient TPM errors: nothing is wrong with the key or the settings,
// and the same operation succeeds once the TPM is free. Both are also
// ErrTPM. The message names the device, what holds it and what to do.
var (
	// ErrTPMBusy: the TPM did not answer in time, or its device is held by
	// another program.
	ErrTPMBusy error = &tpmError{"keystore: TPM busy"}
	// ErrTPMFull: the TPM has no room for another object or session
	// (TPM_RC_OBJECT_MEMORY and its kin): transient objects that programs
	// left loaded fill it until they are flushed or the TPM is reset.
	ErrTPMFull error = &tpmError{"keystore: TPM out of memory"}
)

// openTransport reaches the TPM; tests replace it to stall a command.
var openTransport = tpmdev.Open

// tpmConn is one use of the TPM: opened for an operation (make, open or
// sign with a key) and closed at its end. Every command is bounded by the
// timeout, and every transient object pact makes through it (the storage
// root key, the loaded key) is flushed at close, on success, on error and
// after a timeout (when the TPM answers late). Not safe for concurrent
// use: a tpmKey holds its lock around one.
type tpmConn struct {
	device  string
	timeout time.Duration
	clk     clock.Clock
	t       transport.TPMCloser
	// loaded are the transient handles made through this connection and
	// not yet flushed.
	loaded []tpm2.TPMHandle
	// late is the answer to a command that timed out, still to come; no
	// command can follow it on this connection.
	late   chan sendResult
	lateCC tpm2.TPMCC
}

type sendResult struct {
	rsp []byte
	err error
}

func tpmTimeout(o Options) (time.Duration, clock.Clock) {
	d, clk := o.TPMTimeout, o.Clock
	if d <= 0 {
		d = DefaultTPMTimeout
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return d, clk
}

// dialTPM opens the TPM and has it answer a first command (a list of its
// transient handles), each within the timeout: a TPM that answers that is
// this connection's, and a stalled open leaves nothing loaded behind.
func dialTPM(device string, o Options) (*tpmConn, error) {
	timeout, clk := tpmTimeout(o)
	type opened struct {
		t   transport.TPMCloser
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		t, err := openTransport(device)
		ch <- opened{t, err}
	}()
	timer := clk.NewTimer(timeout)
	defer timer.Stop()
	var t transport.TPMCloser
	select {
	case o := <-ch:
		if o.err != nil {
			return nil, openError(device, o.err)
		}
		t = o.t
	case <-timer.C():
		// open(2) is blocked in the kernel: let it finish, then close.
		go func() {
			if o := <-ch; o.err == nil {
				_ = o.t.Close()
			}
		}()
		return nil, busyError(device, "did not open within "+timeout.String())
	}
	c := &tpmConn{device: device, timeout: timeout, clk: clk, t: t}
	if _, err := c.transientHandles(); err != nil {
		_ = c.close()
		if errors.Is(err, ErrTPMBusy) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrTPM, device, err)
	}
	return c, nil
}

// openError says what to do when the TPM cannot be opened.
func openError(device string, err error) error {
	switch {
	case errors.Is(err, tpmdev.ErrNoDevice):
		return fmt.Errorf("%w: no TPM at %s: give --tpm-device DEV (unix:PATH for a software TPM), or keep the key in a pkcs11: token or a file: (docs/ca-keys.md): %w", ErrTPM, device, err)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: cannot open the TPM at %s: permission denied: run as a user in the tss group (or give --tpm-device): %w", ErrTPM, device, err)
	case errors.Is(err, syscall.EBUSY):
		return busyError(device, "is open in another program (device busy)")
	}
	return fmt.Errorf("%w: cannot open the TPM at %s: %w", ErrTPM, device, err)
}

// busyError: the TPM at device what (did not answer ..., is open ...);
// it names the other programs that have it open and what to do.
func busyError(device, what string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the TPM at %s %s", device, what)
	holders := tpmHolders(device)
	rm := resourceManagerOf(device)
	switch {
	case len(holders) > 0 && strings.HasPrefix(device, "unix:"):
		fmt.Fprintf(&b, "; another client is connected to this software TPM, which serves one client at a time: %s", strings.Join(holders, ", "))
	case len(holders) > 0:
		fmt.Fprintf(&b, "; it is held by %s", strings.Join(holders, ", "))
	case strings.HasPrefix(device, "unix:"):
		b.WriteString("; no other client of this software TPM was found (this user sees only its own processes)")
	default:
		fmt.Fprintf(&b, "; no other program was found with it open (this user sees only its own processes: as root, fuser -v %s shows them all)", device)
	}
	switch {
	case rm != "":
		fmt.Fprintf(&b, ". %s admits one program at a time: use %s, the kernel's resource manager, which shares the TPM (--tpm-device %s), or stop the program that holds it; then try again", device, rm, rm)
	case strings.HasPrefix(device, "unix:"):
		b.WriteString(". Stop that client (a pact-journal key holds the TPM only while it signs), then try again")
	default:
		b.WriteString(". Wait for it, or stop it, then try again; a TPM that answers nobody for minutes needs the host rebooted")
	}
	b.WriteString(" (docs/ca-keys.md)")
	return fmt.Errorf("%w: %s", ErrTPMBusy, b.String())
}

var rawTPM = regexp.MustCompile(`^tpm([0-9]+)$`)
var rmTPM = regexp.MustCompile(`^tpmrm([0-9]+)$`)

// resourceManagerOf: for a raw TPM device (/dev/tpmN), its resource
// manager (/dev/tpmrmN) when that exists; "" otherwise.
func resourceManagerOf(device string) string {
	m := rawTPM.FindStringSubmatch(filepath.Base(device))
	if m == nil || strings.HasPrefix(device, "unix:") {
		return ""
	}
	rm := filepath.Join(filepath.Dir(device), "tpmrm"+m[1])
	if _, err := os.Stat(rm); err != nil {
		return ""
	}
	return rm
}

// TPMDeviceWarning returns a warning for a tpm: key used through device
// when that is a raw TPM device (/dev/tpmN) and the kernel's resource
// manager (/dev/tpmrmN) exists, or "". The raw device admits one program at
// a time and keeps what a killed program loaded; the resource manager
// shares the TPM and flushes it.
func TPMDeviceWarning(device string) string {
	if device == "" {
		device = DefaultTPMDevice
	}
	rm := resourceManagerOf(device)
	if rm == "" {
		return ""
	}
	return fmt.Sprintf("the TPM is used through %s, which admits one program at a time (a second one waits or fails) and keeps the objects a killed program loaded; use %s, the kernel's resource manager, instead (--tpm-device %s; docs/ca-keys.md)", device, rm, rm)
}

// Send sends one command, waiting at most the timeout for its answer. A
// command that timed out is still waited for off the caller's path (close),
// and no other command is sent on this connection.
func (c *tpmConn) Send(cmd []byte) ([]byte, error) {
	cc := commandCode(cmd)
	if c.late != nil {
		return nil, fmt.Errorf("%w: the TPM at %s has not answered an earlier command", ErrTPMBusy, c.device)
	}
	ch := make(chan sendResult, 1)
	go func() {
		rsp, err := c.t.Send(cmd)
		ch <- sendResult{rsp, err}
	}()
	timer := c.clk.NewTimer(c.timeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		c.track(cc, cmd, r)
		return r.rsp, r.err
	case <-timer.C():
		c.late, c.lateCC = ch, cc
		return nil, busyError(c.device, fmt.Sprintf("did not answer %s within %s", commandName(cc), c.timeout))
	}
}

// track records the transient handle a command made, and forgets the one
// FlushContext flushed.
func (c *tpmConn) track(cc tpm2.TPMCC, cmd []byte, r sendResult) {
	if r.err != nil || len(r.rsp) < 10 || binary.BigEndian.Uint32(r.rsp[6:10]) != 0 {
		return
	}
	switch cc {
	case tpm2.TPMCCCreatePrimary, tpm2.TPMCCLoad, tpm2.TPMCCCreateLoaded, tpm2.TPMCCLoadExternal, tpm2.TPMCCStartAuthSession, tpm2.TPMCCContextLoad:
		if len(r.rsp) < 14 {
			return
		}
		c.loaded = append(c.loaded, tpm2.TPMHandle(binary.BigEndian.Uint32(r.rsp[10:14])))
	case tpm2.TPMCCFlushContext:
		if len(cmd) >= 14 {
			h := tpm2.TPMHandle(binary.BigEndian.Uint32(cmd[10:14]))
			c.loaded = slices.DeleteFunc(c.loaded, func(x tpm2.TPMHandle) bool { return x == h })
		}
	}
}

// flush flushes one handle this connection made.
func (c *tpmConn) flush(h tpm2.TPMHandle) error {
	_, err := tpm2.FlushContext{FlushHandle: h}.Execute(c)
	return err
}

// close flushes what this connection loaded and closes it. After a
// timeout, that happens in the background once the TPM answers (or gives
// up after lateAnswerWait): the caller does not wait again.
func (c *tpmConn) close() error {
	if c.late != nil {
		go c.drain()
		return nil
	}
	return c.flushAndClose()
}

func (c *tpmConn) flushAndClose() error {
	var errs []error
	for len(c.loaded) > 0 {
		h := c.loaded[len(c.loaded)-1]
		if err := c.flush(h); err != nil {
			if c.late != nil {
				go c.drain()
				return fmt.Errorf("%w: %s: flush %#x: %w", ErrTPM, c.device, uint32(h), err)
			}
			errs = append(errs, fmt.Errorf("%w: %s: flush %#x: %w", ErrTPM, c.device, uint32(h), err))
			c.loaded = c.loaded[:len(c.loaded)-1]
		}
	}
	errs = append(errs, c.t.Close())
	return errors.Join(errs...)
}

// drain waits for the answer to the command that timed out, then flushes
// what the connection loaded (that command's object too) and closes it.
func (c *tpmConn) drain() {
	timer := c.clk.NewTimer(lateAnswerWait)
	defer timer.Stop()
	select {
	case r := <-c.late:
		c.track(c.lateCC, nil, r)
		c.late = nil
		_ = c.flushAndClose()
	case <-timer.C():
		// Closing ends the read (a socket, a pollable device); what the
		// TPM made meanwhile stays until flushed by hand (docs/ca-keys.md).
		_ = c.t.Close()
	}
}

// transientHandles lists the transient objects loaded in the TPM (through
// a resource manager: this connection's only).
func (c *tpmConn) transientHandles() ([]tpm2.TPMHandle, error) {
	rsp, err := tpm2.GetCapability{
		Capability:    tpm2.TPMCapHandles,
		Property:      uint32(tpm2.TPMHTTransient) << 24,
		PropertyCount: 64,
	}.Execute(c)
	if err != nil {
		return nil, err
	}
	hs, err := rsp.CapabilityData.Data.Handles()
	if err != nil {
		return nil, err
	}
	return hs.Handle, nil
}

// memoryError maps the TPM's resource errors (TPM_RC_OBJECT_MEMORY and
// kin) to ErrTPMFull, saying what fills the TPM and how to clear it; it
// returns nil for any other error.
func (c *tpmConn) memoryError(what string, err error) error {
	var rc tpm2.TPMRC
	if !errors.As(err, &rc) {
		return nil
	}
	switch rc {
	case tpm2.TPMRCObjectMemory, tpm2.TPMRCSessionMemory, tpm2.TPMRCMemory, tpm2.TPMRCObjectHandles, tpm2.TPMRCSessionHandles:
	default:
		return nil
	}
	name, _, _ := strings.Cut(rc.Error(), ":")
	var b strings.Builder
	fmt.Fprintf(&b, "the TPM at %s has no room to %s (%s)", c.device, what, name)
	var others []string
	if hs, herr := c.transientHandles(); herr == nil {
		for _, h := range hs {
			if !slices.Contains(c.loaded, h) {
				others = append(others, fmt.Sprintf("%#x", uint32(h)))
			}
		}
	}
	raw, tcti := flushTarget(c.device)
	switch {
	case len(others) > 0:
		fmt.Fprintf(&b, ": %d transient objects that pact did not load take its room (%s)", len(others), strings.Join(others, ", "))
	case strings.HasPrefix(filepath.Base(c.device), "tpmrm"):
		fmt.Fprintf(&b, ": transient objects that the resource manager does not show fill it, loaded through %s", raw)
	default:
		b.WriteString(": transient objects fill it")
	}
	b.WriteString(", left by programs that ended without flushing them (a killed pact-journal ca-request or --check-config, a tpm2-tools command) on a TPM used without the kernel's resource manager, which flushes what a program leaves. ")
	fmt.Fprintf(&b, "Clear them: stop every program that uses the TPM (the journal too), then run tpm2_flushcontext -t -T %s (tpm2-tools), or reboot the host (a TPM reset flushes them)", tcti)
	if !strings.HasPrefix(c.device, "unix:") {
		b.WriteString("; use the resource manager (/dev/tpmrm0, the default --tpm-device) from then on")
	}
	b.WriteString(" (docs/ca-keys.md)")
	return fmt.Errorf("%w: %s: %w", ErrTPMFull, b.String(), err)
}

// flushTarget: the raw device that shows every transient object, and its
// tpm2-tools TCTI.
func flushTarget(device string) (raw, tcti string) {
	if path, ok := strings.CutPrefix(device, "unix:"); ok {
		return device, "swtpm:path=" + strings.TrimPrefix(path, "//")
	}
	raw = device
	if m := rmTPM.FindStringSubmatch(filepath.Base(device)); m != nil {
		raw = filepath.Join(filepath.Dir(device), "tpm"+m[1])
	}
	return raw, "device:" + raw
}

func commandCode(cmd []byte) tpm2.TPMCC {
	if len(cmd) < 10 {
		return 0
	}
	return tpm2.TPMCC(binary.BigEndian.Uint32(cmd[6:10]))
}

func commandName(cc tpm2.TPMCC) string {
	switch cc {
	case tpm2.TPMCCGetCapability:
		return "its first command (TPM2_GetCapability)"
	case tpm2.TPMCCCreatePrimary:
		return "TPM2_CreatePrimary (the storage root key)"
	case tpm2.TPMCCCreate:
		return "TPM2_Create (the new key)"
	case tpm2.TPMCCLoad:
		return "TPM2_Load (the key)"
	case tpm2.TPMCCSign:
		return "TPM2_Sign"
	case tpm2.TPMCCFlushContext:
		return "TPM2_FlushContext"
	}
	return fmt.Sprintf("command %#x", uint32(cc))
}
