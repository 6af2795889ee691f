package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
)

// pact domain federate, list and remove against two real journals of two
// domains: JSON output, the refresh seen in list, the refusals an
// operator meets.
func TestDomainFederateListRemove(t *testing.T) {
	clearEnv(t)
	aDir := t.TempDir()
	if _, err := ca.InitDev(aDir, "a.example", time.Now()); err != nil {
		t.Fatal(err)
	}
	acfg := journaltest.Config(aDir)
	acfg.BundleEndpointListen = "127.0.0.1:0"
	a := journaltest.Start(t, acfg)
	b := startLiveJournal(t, func(c *journal.Config) { c.DigestInterval = 50 * time.Millisecond })
	alice := b.alice(t)
	aRoot := filepath.Join(aDir, ca.RootCertFile)
	endpoint := "https://" + a.J.BundleEndpointAddr() + "/"

	code, stdout, stderr := runLive(t, b, alice, runOpts{}, "domain", "federate", "a.example", "--endpoint", endpoint, "--bundle", aRoot, "-o", "json")
	if code != 0 {
		t.Fatalf("federate: exit %d\n%s%s", code, stdout, stderr)
	}
	var fed FederatedDomainView
	if err := json.Unmarshal([]byte(stdout), &fed); err != nil {
		t.Fatalf("federate -o json: %v\n%s", err, stdout)
	}
	if fed.Name != "a.example" || fed.Policy != "warn" || len(fed.AuthoritiesSHA256) != 1 || fed.AddedBy == "" || len(fed.Endpoints) != 1 {
		t.Fatalf("federate -o json: %+v", fed)
	}

	var list []FederatedDomainView
	polltest.Until(t, 20*time.Second, 50*time.Millisecond, func() bool {
		code, stdout, stderr = runLive(t, b, alice, runOpts{}, "domain", "list", "-o", "json")
		if code != 0 {
			t.Fatalf("list: exit %d\n%s%s", code, stdout, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &list); err != nil {
			t.Fatalf("list -o json: %v\n%s", err, stdout)
		}
		return len(list) == 1 && list[0].Sequence > 0
	}, "pact domain list never showed the bundle fetched from a.example's endpoint: %+v", list)
	code, stdout, _ = runLive(t, b, alice, runOpts{}, "domain", "list")
	if code != 0 || !strings.Contains(stdout, "a.example") || !strings.Contains(stdout, "BUNDLE AGE") {
		t.Fatalf("list (table): exit %d\n%s", code, stdout)
	}

	// A viewer lists, and may not federate.
	viewer := b.operator(t, "vera", pki.RoleViewer)
	if code, _, _ := runLive(t, b, viewer, runOpts{}, "domain", "list"); code != 0 {
		t.Errorf("viewer list: exit %d", code)
	}
	if code, _, stderr := runLive(t, b, viewer, runOpts{}, "domain", "federate", "c.example", "--endpoint", endpoint, "--bundle", aRoot); code == 0 || !strings.Contains(stderr, "platform-admin") {
		t.Errorf("viewer federate: exit %d\n%s", code, stderr)
	}
	// Missing flags are reported together, before any call.
	code, _, stderr = runLive(t, b, alice, runOpts{}, "domain", "federate", "a.example", "--policy", "maybe")
	if code == 0 || !strings.Contains(stderr, "--endpoint") || !strings.Contains(stderr, "--bundle") || !strings.Contains(stderr, "--policy") {
		t.Errorf("federate without flags: exit %d\n%s", code, stderr)
	}

	code, stdout, stderr = runLive(t, b, alice, runOpts{}, "domain", "remove", "a.example")
	if code != 0 || !strings.Contains(stdout, "federation with domain a.example removed") {
		t.Fatalf("remove: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = runLive(t, b, alice, runOpts{}, "domain", "remove", "a.example")
	if code == 0 || !strings.Contains(stderr, "pact domain list") {
		t.Errorf("remove again: exit %d\n%s", code, stderr)
	}
}
