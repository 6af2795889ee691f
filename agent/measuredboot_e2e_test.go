package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/agent/tpm"
	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/measuredboot/imatest"
	"github.com/pact-hpc/pact/internal/measuredboot/measuredboottest"
	"github.com/pact-hpc/pact/internal/swtpmtest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// bootedTPM starts a software TPM whose PCRs boot extended, and writes
// the event log an agent reads (--tpm-event-log) as log.
func bootedTPM(t *testing.T, boot, log measuredboottest.Log) (sw *swtpmtest.TPM, logPath string) {
	t.Helper()
	sw = swtpmtest.Start(t)
	tr, err := tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	boot.Extend(t, tr)
	tr.Close()
	logPath = filepath.Join(t.TempDir(), "binary_bios_measurements")
	if err := os.WriteFile(logPath, log.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return sw, logPath
}

// End to end: the agent quotes its boot with the journal's nonce and sends
// its event log; the journal verifies both and the node enrolls. An event
// log that does not reproduce the quoted PCRs is refused for good: the
// agent stops with exit code 5 and a hint, it does not retry in a loop.
func TestAgentEnrollsWithQuote(t *testing.T) {
	boot := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))

	sw, logPath := bootedTPM(t, boot, boot)
	registerWithEK(t, h, "n1", "SN1", ekHashOf(t, sw.Device), mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice, cfg.TPMEventLog = sw.Device, logPath
	runAgent(t, cfg)
	eventually(t, "n1 is active", func() bool { return h.J.OpenStreams("n1") == 1 })

	// The log of another kernel than the TPM measured.
	sw2, badLog := bootedTPM(t, boot, measuredboottest.Boot("6.1.0-other", "root=nfs quiet"))
	registerWithEK(t, h, "n2", "SN2", ekHashOf(t, sw2.Device), "52:54:00:00:00:02")
	cfg = agentConfig(h, clock.Real{}, "SN2", "52:54:00:00:00:02")
	cfg.TPMDevice, cfg.TPMEventLog = sw2.Device, badLog
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, ErrRefused) || apierr.FromError(err).Reason != apierr.TPMQuoteRefused {
		t.Fatalf("Run = %v, want ErrRefused with %s", err, apierr.TPMQuoteRefused)
	}
	if got := ExitCode(err); got != ExitRevoked {
		t.Errorf("exit code %d, want %d", got, ExitRevoked)
	}
	if !strings.Contains(err.Error(), "--tpm-event-log") {
		t.Errorf("error %q does not point the operator at the event log", err)
	}
	if got := a.Status().LastFailureReason; got != ReasonTPMRefused {
		t.Errorf("status reason %q, want %q", got, ReasonTPMRefused)
	}
	if n := inspect(t, h, "n2"); n.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED {
		t.Errorf("n2 is %v, want still registered", n.GetState())
	}
}

// A node that enrolled with its TPM renews with it: every renewal answers
// a fresh challenge with a fresh quote. Once the TPM's PCRs no longer
// match the event log (the node's measurements changed under it), the
// renewal is refused TPM_QUOTE_REFUSED, reported as a TPM refusal, and
// the node keeps its certificate.
func TestAgentRenewsWithQuote(t *testing.T) {
	boot := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	sw, logPath := bootedTPM(t, boot, boot)
	registerWithEK(t, h, "n1", "SN1", ekHashOf(t, sw.Device), mac1)
	var renewCalls atomic.Int64
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice, cfg.TPMEventLog = sw.Device, logPath
	// RenewNow twice in a row: no floor between renewals.
	cfg.MinRenewInterval = time.Millisecond
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == pactv1.EnrollmentService_RenewCert_FullMethodName {
				renewCalls.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}
	r := runAgent(t, cfg)
	eventually(t, "n1 streams", func() bool { return r.Status().Ready })
	first := inspect(t, h, "n1").GetCert().GetSerial()
	if !r.RenewNow() {
		t.Fatal("RenewNow refused")
	}
	eventually(t, "the attested renewal commits", func() bool {
		return inspect(t, h, "n1").GetCert().GetSerial() != first && r.Status().Serial != first
	})
	if n := renewCalls.Load(); n != 2 {
		t.Errorf("%d RenewCert calls for an attested renewal, want 2 (challenge, answer)", n)
	}

	// The kernel measurement changes under the running node.
	tr, err := tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	measuredboottest.Log{{PCR: 9, Type: measuredboottest.EvIPL, Data: []byte("/vmlinuz 6.1.0-other")}}.Extend(t, tr)
	tr.Close()
	second := inspect(t, h, "n1").GetCert().GetSerial()
	if !r.RenewNow() {
		t.Fatal("RenewNow refused")
	}
	st := waitFailure(t, r.Agent, ReasonTPMRefused)
	if st.LastFailureOp != "renew" || !st.Ready {
		t.Errorf("after the refused renewal: status %+v", st)
	}
	if got := inspect(t, h, "n1").GetCert().GetSerial(); got != second {
		t.Errorf("the refused renewal changed the certificate %s -> %s", second, got)
	}
}

// An enforced boot policy that the node's boot does not match stops the
// agent at enrollment with exit code 5 and the policy's hint: it does not
// retry in a loop.
func TestAgentRefusedByBootPolicy(t *testing.T) {
	boot := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	sw, logPath := bootedTPM(t, boot, boot)
	registerWithEK(t, h, "ref", "SN1", ekHashOf(t, sw.Device), mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice, cfg.TPMEventLog = sw.Device, logPath
	runAgent(t, cfg)
	eventually(t, "the reference node is active", func() bool { return h.J.OpenStreams("ref") == 1 })
	bp := pactv1.NewBootPolicyServiceClient(h.Dial(t, &h.Admin))
	captured, err := bp.CaptureBootPolicy(context.Background(), &pactv1.CaptureBootPolicyRequest{NodeId: "ref",
		Mode: pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, Action: pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bp.SetBootPolicy(context.Background(), &pactv1.SetBootPolicyRequest{Policy: captured.GetPolicy()}); err != nil {
		t.Fatal(err)
	}

	evil := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet init=/bin/sh")
	sw2, log2 := bootedTPM(t, evil, evil)
	registerWithEK(t, h, "n2", "SN2", ekHashOf(t, sw2.Device), "52:54:00:00:00:02")
	cfg = agentConfig(h, clock.Real{}, "SN2", "52:54:00:00:00:02")
	cfg.TPMDevice, cfg.TPMEventLog = sw2.Device, log2
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, ErrRefused) || apierr.FromError(err).Reason != apierr.BootPolicyRefused {
		t.Fatalf("Run = %v, want ErrRefused with %s", err, apierr.BootPolicyRefused)
	}
	if got := ExitCode(err); got != ExitRevoked {
		t.Errorf("exit code %d, want %d", got, ExitRevoked)
	}
	if !strings.Contains(err.Error(), "EV_IPL in PCR 8") || !strings.Contains(err.Error(), "pact boot-policy show") {
		t.Errorf("error %q does not say what differs and what to do", err)
	}
	if got := a.Status().LastFailureReason; got != ReasonTPMRefused {
		t.Errorf("status reason %q, want %q", got, ReasonTPMRefused)
	}
}

// imaTPM extends a booted software TPM's PCR 10 with ran, as the kernel's
// IMA does, and writes the list an agent reads (--tpm-ima-log) as list:
// ran and whatever ran after the quote. This kernel has no IMA, so the
// list is built in the kernel's format (imatest.List).
func imaTPM(t *testing.T, sw *swtpmtest.TPM, ran, list imatest.List) string {
	t.Helper()
	tr, err := tpm.Open(sw.Device)
	if err != nil {
		t.Fatal(err)
	}
	ran.Extend(t, tr)
	tr.Close()
	path := filepath.Join(t.TempDir(), "binary_runtime_measurements")
	if err := os.WriteFile(path, list.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A boot policy with IMA rules: the journal's challenge asks for PCR 10
// and the IMA list; a node that ran what the policy allows enrolls (its
// list read after the quote may hold more than the quote covers), and a
// node that ran a changed binary is refused for good, told which file.
func TestAgentAttestsIMA(t *testing.T) {
	boot := measuredboottest.Boot("6.1.0-pact", "root=nfs quiet")
	slurmd := imatest.File{Path: "/usr/sbin/slurmd", Content: []byte("slurmd 24.05")}
	munged := imatest.File{Path: "/usr/sbin/munged", Content: []byte("munged 0.5")}
	h := journaltest.Start(t, journaltest.Config(t.TempDir()))
	bp := pactv1.NewBootPolicyServiceClient(h.Dial(t, &h.Admin))
	policy := &pactv1.BootPolicy{
		Mode: pactv1.BootPolicyMode_BOOT_POLICY_MODE_ENFORCE, Action: pactv1.BootPolicyAction_BOOT_POLICY_ACTION_REFUSE,
		Ima: &pactv1.BootPolicyIma{Files: []*pactv1.BootPolicyImaFile{
			{Path: slurmd.Path, AllowedDigests: [][]byte{slurmd.FileDigest()}},
			{Path: munged.Path, AllowedDigests: [][]byte{munged.FileDigest()}},
		}},
	}
	if _, err := bp.SetBootPolicy(context.Background(), &pactv1.SetBootPolicyRequest{Policy: policy}); err != nil {
		t.Fatal(err)
	}

	sw, logPath := bootedTPM(t, boot, boot)
	ran := imatest.Runtime(slurmd, munged)
	afterQuote := append(append(imatest.List{}, ran...), imatest.File{Path: "/usr/bin/srun", Content: []byte("srun")})
	imaPath := imaTPM(t, sw, ran, afterQuote)
	registerWithEK(t, h, "n1", "SN1", ekHashOf(t, sw.Device), mac1)
	cfg := agentConfig(h, clock.Real{}, "SN1", mac1)
	cfg.TPMDevice, cfg.TPMEventLog, cfg.TPMIMALog = sw.Device, logPath, imaPath
	runAgent(t, cfg)
	eventually(t, "n1, whose IMA list the policy allows, is active", func() bool { return h.J.OpenStreams("n1") == 1 })
	// Captured from n1: the files its quote covered, not srun, read after.
	captured, err := bp.CaptureBootPolicy(context.Background(), &pactv1.CaptureBootPolicyRequest{NodeId: "n1", Ima: true, Pcrs: []uint32{7}})
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, f := range captured.GetPolicy().GetIma().GetFiles() {
		files = append(files, f.GetPath())
	}
	if strings.Join(files, " ") != slurmd.Path+" "+munged.Path {
		t.Errorf("capture --ima listed %q, want slurmd and munged", files)
	}

	// The same image, but munged was replaced after boot.
	sw2, log2 := bootedTPM(t, boot, boot)
	trojan := imatest.Runtime(slurmd, imatest.File{Path: munged.Path, Content: []byte("munged, trojaned")})
	ima2 := imaTPM(t, sw2, trojan, trojan)
	registerWithEK(t, h, "n2", "SN2", ekHashOf(t, sw2.Device), "52:54:00:00:00:02")
	cfg = agentConfig(h, clock.Real{}, "SN2", "52:54:00:00:00:02")
	cfg.TPMDevice, cfg.TPMEventLog, cfg.TPMIMALog = sw2.Device, log2, ima2
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if !errors.Is(err, ErrRefused) || apierr.FromError(err).Reason != apierr.BootPolicyRefused {
		t.Fatalf("Run = %v, want ErrRefused with %s", err, apierr.BootPolicyRefused)
	}
	if !strings.Contains(err.Error(), "IMA: /usr/sbin/munged has sha256 digest") {
		t.Errorf("error %q does not name the file that differs", err)
	}
	if n := inspect(t, h, "n2"); n.GetState() != pactv1.NodeState_NODE_STATE_REGISTERED {
		t.Errorf("n2 is %v, want still registered", n.GetState())
	}

	// A node whose agent cannot read the list the journal asks for is
	// refused saying so, not enrolled on its boot alone.
	sw3, log3 := bootedTPM(t, boot, boot)
	imaTPM(t, sw3, ran, ran)
	registerWithEK(t, h, "n3", "SN3", ekHashOf(t, sw3.Device), "52:54:00:00:00:03")
	cfg = agentConfig(h, clock.Real{}, "SN3", "52:54:00:00:00:03")
	cfg.TPMDevice, cfg.TPMEventLog, cfg.TPMIMALog = sw3.Device, log3, filepath.Join(t.TempDir(), "no-ima")
	a, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx3, cancel3 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel3()
	err = a.Run(ctx3)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "no IMA measurement list") {
		t.Fatalf("Run without the IMA list = %v, want a refusal saying no list was sent", err)
	}
}
