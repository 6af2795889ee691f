package journal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// smallDisk mounts a tmpfs of size on a new directory for the test (root
// only; outside CI a test without root is skipped, in CI it fails).
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	var why error
	if os.Geteuid() != 0 {
		why = errors.New("mounting a tmpfs needs root")
	} else if _, err := exec.LookPath("mount"); err != nil {
		why = err
	}
	if why != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("this test must run in CI: %v", why)
		}
		t.Skipf("needs a small filesystem: %v", why)
	}
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// A journal whose disk fills stops writing cleanly: every write after the
// disk is full is refused as NO_LEADER ("nothing was written"), never an
// internal error; nothing it acknowledged is lost; and once the disk has
// room again it takes writes without a restart.
func TestDiskFullStopsWritesCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a filesystem; skipped with -short")
	}
	dir := smallDisk(t, "1m")
	cfg := journaltest.Config(filepath.Join(dir, "j"))
	h := journaltest.Start(t, cfg)
	admin := h.AdminClient(t)
	// Each call's deadline is a hang guard, longer than the journal's own
	// apply timeout (10 s): a loaded machine must end a call with the
	// journal's answer, never with the client's DEADLINE_EXCEEDED.
	register := func(id, mac string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := admin.RegisterNode(ctx, &pactv1.RegisterNodeRequest{NodeId: id, Hardware: &pactv1.HardwareIdentity{Macs: []string{mac}}})
		return err
	}
	var acked []string
	var refusal error
	for i := 0; i < 20000 && refusal == nil; i++ {
		id := fmt.Sprintf("disk-%05d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := admin.RegisterNode(ctx, &pactv1.RegisterNodeRequest{
			NodeId:   id,
			Hardware: &pactv1.HardwareIdentity{Macs: []string{fmt.Sprintf("52:54:%02x:%02x:%02x:01", i>>16&0xff, i>>8&0xff, i&0xff)}},
		})
		cancel()
		if err != nil {
			refusal = err
			break
		}
		acked = append(acked, id)
	}
	if refusal == nil {
		t.Fatalf("%d registrations fitted on a 1 MB disk", len(acked))
	}
	if pe := apierr.FromError(refusal); pe.Reason != apierr.NoLeader || pe.Code != codes.Unavailable {
		t.Fatalf("after %d registrations the full disk gave %v, want NO_LEADER", len(acked), refusal)
	}
	// Still full: refused the same way, again and again.
	for k := range 3 {
		if pe := apierr.FromError(register(fmt.Sprintf("full-%d", k), fmt.Sprintf("52:54:ff:00:00:%02x", k))); pe == nil || pe.Reason != apierr.NoLeader {
			t.Fatalf("write %d on the full disk: %v, want NO_LEADER", k, pe)
		}
	}
	if out, err := exec.Command("mount", "-o", "remount,size=16m", dir).CombinedOutput(); err != nil {
		t.Fatalf("growing the tmpfs: %v: %s", err, out)
	}
	var last polltest.Last
	polltest.Until(t, 30*time.Second, 100*time.Millisecond, func() bool {
		last.Err = register("after", "52:54:ff:00:01:00")
		return last.Err == nil
	}, "no write accepted within 30 s of the disk growing: %v", &last)
	list, err := admin.ListNodes(context.Background(), &pactv1.ListNodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, n := range list.GetNodes() {
		have[n.GetNodeId()] = true
	}
	for _, id := range acked {
		if !have[id] {
			t.Fatalf("acknowledged %s is lost (%d of %d acknowledged kept)", id, len(have), len(acked))
		}
	}
	t.Logf("%d registrations acknowledged before the disk filled; refused as %v; writes resumed once it grew", len(acked), apierr.FromError(refusal).Reason)
}
