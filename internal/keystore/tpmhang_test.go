package keystore_test

import (
	"bufio"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"

	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	"github.com/pact-hpc/pact/internal/keystore"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/internal/swtpmtest"
)

// stallEnv makes this test binary a client that is killed mid-operation
// (TestMain): it opens the tpm: key named by stallKeyEnv and stops for good
// right after the TPM loaded it, its storage root key not yet flushed.
const (
	stallEnv    = "PACT_KEYSTORE_TEST_STALL_DEVICE"
	stallKeyEnv = "PACT_KEYSTORE_TEST_STALL_KEY"
)

func TestMain(m *testing.M) {
	if dev := os.Getenv(stallEnv); dev != "" {
		keystore.SetOpenTransport(func(d string) (transport.TPMCloser, error) {
			t, err := keystore.OpenTransport(d)
			if err != nil {
				return nil, err
			}
			g := newGate(t, tpm2.TPMCCLoad)
			go func() {
				<-g.stalled
				fmt.Println("loaded")
			}()
			return g, nil
		})
		_, err := keystore.Open(keystore.Spec{Backend: keystore.BackendTPM, Location: os.Getenv(stallKeyEnv)}, keystore.Options{TPMDevice: dev})
		fmt.Fprintln(os.Stderr, "the stalled open returned:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// gate passes commands to the TPM and, once the TPM has answered the
// command cc, holds that answer until release is closed.
type gate struct {
	transport.TPMCloser
	cc      tpm2.TPMCC
	once    sync.Once
	stalled chan struct{}
	release chan struct{}
}

func newGate(t transport.TPMCloser, cc tpm2.TPMCC) *gate {
	return &gate{TPMCloser: t, cc: cc, stalled: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) Send(cmd []byte) ([]byte, error) {
	rsp, err := g.TPMCloser.Send(cmd)
	if len(cmd) >= 10 && tpm2.TPMCC(binary.BigEndian.Uint32(cmd[6:10])) == g.cc {
		g.once.Do(func() { close(g.stalled) })
		<-g.release
	}
	return rsp, err
}

// timerClock is a fake clock that reports every timer it makes, so a test
// advances it only once the code waits on the timer it means.
type timerClock struct {
	*fakeclock.Clock
	made chan time.Duration
}

func newTimerClock() timerClock {
	return timerClock{fakeclock.New(time.Unix(1_700_000_000, 0)), make(chan time.Duration, 100)}
}

func (c timerClock) NewTimer(d time.Duration) clock.Timer {
	t := c.Clock.NewTimer(d)
	c.made <- d
	return t
}

// next waits for the clock's next timer.
func (c timerClock) next(t *testing.T) {
	t.Helper()
	select {
	case <-c.made:
	case <-time.After(20 * time.Second):
		t.Fatal("no TPM command was started")
	}
}

// result waits for an operation that must end by itself: a hang fails the
// test instead of stopping it.
func result[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("the TPM operation hangs")
		panic("unreachable")
	}
}

func generateTPMKey(t *testing.T, sw *swtpmtest.TPM) keystore.Spec {
	t.Helper()
	spec := tpmSpec(t)
	k, err := keystore.Generate(spec, keystore.Options{TPMDevice: sw.Device})
	if err != nil {
		t.Fatal(err)
	}
	k.Close()
	return spec
}

func wantAll(t *testing.T, err error, says ...string) {
	t.Helper()
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
}

// Another process holds the TPM (swtpm serves one client at a time, as
// /dev/tpm0 admits one program): opening a key gives up after the timeout,
// naming the device and the holder, instead of hanging. Once the holder
// is gone, the same key opens and signs, and nothing stays loaded.
func TestTPMHeldByAnotherProcess(t *testing.T) {
	sw := swtpmtest.Start(t)
	spec := generateTPMKey(t, sw)
	holder := sw.Hold(t)

	clk := newTimerClock()
	done := make(chan error, 1)
	go func() {
		k, err := keystore.Open(spec, keystore.Options{TPMDevice: sw.Device, Clock: clk})
		if err == nil {
			k.Close()
		}
		done <- err
	}()
	clk.next(t) // the open: a socket connects at once, queued by swtpm
	clk.next(t) // the first command, which swtpm does not read
	clk.Advance(keystore.DefaultTPMTimeout)
	err := result(t, done)
	if !errors.Is(err, keystore.ErrTPMBusy) || !errors.Is(err, keystore.ErrTPM) {
		t.Fatalf("open of a held TPM: %v, want ErrTPMBusy", err)
	}
	t.Log(err)
	wantAll(t, err, sw.Device, "did not answer its first command", "within 30s",
		fmt.Sprintf("pid %d (", holder.Pid), "serves one client at a time", "then try again")

	holder.Kill()
	k, err := keystore.Open(spec, keystore.Options{TPMDevice: sw.Device})
	if err != nil {
		t.Fatalf("open once the holder is gone: %v", err)
	}
	checkSigner(t, k)
	k.Close()
	if left := sw.Transient(t); len(left) != 0 {
		t.Errorf("transient objects left in the TPM: %v", left)
	}
}

// The TPM answers a command after the timeout: the caller had its error at
// the timeout, and what the late command loaded (and the storage root key
// loaded before it) is flushed when the answer comes.
func TestTPMLateAnswerIsFlushed(t *testing.T) {
	sw := swtpmtest.Start(t)
	spec := generateTPMKey(t, sw)
	var g *gate
	defer keystore.SetOpenTransport(func(d string) (transport.TPMCloser, error) {
		tr, err := keystore.OpenTransport(d)
		if err != nil {
			return nil, err
		}
		g = newGate(tr, tpm2.TPMCCLoad)
		return g, nil
	})()
	clk := newTimerClock()
	done := make(chan error, 1)
	go func() {
		_, err := keystore.Open(spec, keystore.Options{TPMDevice: sw.Device, Clock: clk, TPMTimeout: 10 * time.Second})
		done <- err
	}()
	clk.next(t) // open
	clk.next(t) // GetCapability
	clk.next(t) // CreatePrimary
	clk.next(t) // Load
	<-g.stalled
	clk.Advance(10 * time.Second)
	err := result(t, done)
	if !errors.Is(err, keystore.ErrTPMBusy) {
		t.Fatalf("open with a stalled load: %v, want ErrTPMBusy", err)
	}
	wantAll(t, err, sw.Device, "did not answer TPM2_Load (the key) within 10s")
	close(g.release)
	// swtpm serves the next connection once the stalled one is flushed and
	// closed.
	if left := sw.Transient(t); len(left) != 0 {
		t.Errorf("transient objects left in the TPM after the late answer: %v", left)
	}
}

// An open(2) that blocks (a TPM driver that waits for the device) is given
// up after the timeout, and what it opens later is closed.
func TestTPMOpenBlocks(t *testing.T) {
	unblock, closed := make(chan struct{}), make(chan struct{})
	defer keystore.SetOpenTransport(func(string) (transport.TPMCloser, error) {
		<-unblock
		return closeNotifier{closed}, nil
	})()
	clk := newTimerClock()
	done := make(chan error, 1)
	go func() {
		_, err := keystore.Generate(tpmSpec(t), keystore.Options{TPMDevice: "/dev/tpm9", Clock: clk, TPMTimeout: 15 * time.Second})
		done <- err
	}()
	clk.next(t)
	clk.Advance(15 * time.Second)
	err := result(t, done)
	if !errors.Is(err, keystore.ErrTPMBusy) {
		t.Fatalf("generate with a blocked open: %v, want ErrTPMBusy", err)
	}
	wantAll(t, err, "the TPM at /dev/tpm9 did not open within 15s", "fuser -v /dev/tpm9")
	close(unblock)
	result(t, closed)
}

type closeNotifier struct{ closed chan struct{} }

func (c closeNotifier) Send([]byte) ([]byte, error) { return nil, errors.New("unused") }
func (c closeNotifier) Close() error                { close(c.closed); return nil }

// A raw TPM device admits one program: the kernel refuses a second open
// (EBUSY). The error names the program that has it open and the resource
// manager beside it. No TPM character device can be made here, so a file
// stands in for /dev/tpm0: the processes holding it are found the same
// way, by their /proc/PID/fd.
func TestTPMDeviceBusy(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, "tpm0")
	for _, f := range []string{dev, filepath.Join(dir, "tpmrm0")} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pid := holdFile(t, dev)
	if got := keystore.TPMHolders(dev); len(got) != 1 || got[0] != fmt.Sprintf("pid %d (sleep)", pid) {
		t.Errorf("holders of %s: %q, want the sleep process %d", dev, got, pid)
	}
	defer keystore.SetOpenTransport(func(d string) (transport.TPMCloser, error) {
		return nil, &os.PathError{Op: "open", Path: d, Err: syscall.EBUSY}
	})()
	_, err := keystore.Generate(tpmSpec(t), keystore.Options{TPMDevice: dev})
	if !errors.Is(err, keystore.ErrTPMBusy) {
		t.Fatalf("generate on a busy device: %v, want ErrTPMBusy", err)
	}
	t.Log(err)
	wantAll(t, err, "the TPM at "+dev+" is open in another program", fmt.Sprintf("pid %d (sleep)", pid),
		"admits one program at a time", "use "+filepath.Join(dir, "tpmrm0"))
}

// holdFile starts a process that holds path open until the test ends.
func holdFile(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("sleep", "600")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// sleep holds it from its start.
	polltest.Until(t, 10*time.Second, 5*time.Millisecond, func() bool { return len(keystore.TPMHolders(path)) > 0 },
		"%s: no holder found within 10s of starting sleep (pid %d)", path, cmd.Process.Pid)
	return cmd.Process.Pid
}

func TestTPMDeviceWarning(t *testing.T) {
	dir := t.TempDir()
	raw, rm := filepath.Join(dir, "tpm0"), filepath.Join(dir, "tpmrm0")
	if w := keystore.TPMDeviceWarning(raw); w != "" {
		t.Errorf("warning without a resource manager: %q", w)
	}
	if err := os.WriteFile(rm, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w := keystore.TPMDeviceWarning(raw)
	for _, s := range []string{raw, "one program at a time", "--tpm-device " + rm} {
		if !strings.Contains(w, s) {
			t.Errorf("warning lacks %q: %q", s, w)
		}
	}
	for _, d := range []string{rm, "unix:" + raw, filepath.Join(dir, "tpm1")} {
		if w := keystore.TPMDeviceWarning(d); w != "" {
			t.Errorf("warning for %s: %q", d, w)
		}
	}
}

// A client killed mid-operation, after the TPM loaded the key and before it
// flushed anything, leaves its objects in a TPM used without a resource
// manager (swtpm keeps them, as /dev/tpm0 does). With the TPM's object
// memory full, opening the key fails with ErrTPMFull, which says what fills
// the TPM and how to clear it, and flushes what it loaded itself; once
// cleared, the key opens and signs, and leaves nothing loaded.
func TestTPMClientKilledMidOperation(t *testing.T) {
	sw := swtpmtest.Start(t)
	spec := generateTPMKey(t, sw)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stallEnv+"="+sw.Device, stallKeyEnv+"="+spec.Location)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "loaded" {
		t.Fatalf("the client did not load the key: %q\n%s", line, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	left := sw.Transient(t)
	if len(left) != 2 {
		t.Fatalf("the killed client left %v, want its storage root key and its key", left)
	}
	// Room for one more object (swtpm holds 3: none to load here): the
	// storage root key loads, the key after it does not.
	sw.Fill(t, 1)
	full := sw.Transient(t)

	_, err = keystore.Open(spec, keystore.Options{TPMDevice: sw.Device})
	if !errors.Is(err, keystore.ErrTPMFull) || !errors.Is(err, keystore.ErrTPM) || !errors.Is(err, tpm2.TPMRCObjectMemory) {
		t.Fatalf("open with the TPM's object memory full: %v, want ErrTPMFull", err)
	}
	t.Log(err)
	tcti := "swtpm:path=" + strings.TrimPrefix(sw.Device, "unix:")
	wantAll(t, err, sw.Device, "no room to load the key "+spec.Location, "TPM_RC_OBJECT_MEMORY",
		fmt.Sprintf("%d transient objects that pact did not load", len(full)), "killed", "tpm2_flushcontext -t -T "+tcti, "reboot")
	// The refused open flushed the storage root key it had loaded.
	if after := sw.Transient(t); !slices.Equal(after, full) {
		t.Errorf("after the refused open the TPM holds %v, want %v", after, full)
	}

	// What docs/ca-keys.md says to run; tpm2-tools is optional here.
	if _, err := exec.LookPath("tpm2_flushcontext"); err == nil {
		if out, err := exec.Command("tpm2_flushcontext", "-t", "-T", tcti).CombinedOutput(); err != nil {
			t.Fatalf("tpm2_flushcontext -t: %v\n%s", err, out)
		}
	} else {
		t.Log("tpm2-tools is not installed: flushing as tpm2_flushcontext -t does")
		sw.FlushTransient(t)
	}
	if left := sw.Transient(t); len(left) != 0 {
		t.Fatalf("still loaded after the flush: %v", left)
	}
	k, err := keystore.Open(spec, keystore.Options{TPMDevice: sw.Device})
	if err != nil {
		t.Fatalf("open once the TPM is cleared: %v", err)
	}
	digest := sha256.Sum256([]byte("after the flush"))
	if _, err := k.Sign(rand.Reader, digest[:], crypto.SHA256); err != nil {
		t.Fatalf("sign: %v", err)
	}
	k.Close()
	if left := sw.Transient(t); len(left) != 0 {
		t.Errorf("the key left %v loaded", left)
	}
}
