package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// TestEnroll runs pact node enroll against a real journal: what it
// registers, what it refuses and how it says so.
func TestEnroll(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	alice := l.alice(t)
	viewer := l.operator(t, "bob", pki.RoleViewer)

	tests := []struct {
		name       string
		args       []string // nodeX and MAC0.. stand for the case's fresh names
		cred       *credFiles
		seed       func(t *testing.T, node string, mac int)
		wantCode   int
		wantStdout string   // exact, when set
		wantErr    []string // substrings of stderr
		notErr     []string // what stderr must not say
		wantCalls  int
	}{
		{
			name:       "registers and prints a line",
			args:       []string{"nodeX", "--mac", "MAC1", "--bmc-serial", "SN123nodeX"},
			wantCode:   ExitOK,
			wantStdout: "registered nodeX (macs MAC1)\n",
			wantCalls:  1,
		},
		{
			name:       "several MACs, normalised and sorted",
			args:       []string{"nodeX", "--mac", "MAC2-dashes", "--mac", "MAC1", "--vcluster", "ml"},
			wantCode:   ExitOK,
			wantStdout: "registered nodeX (macs MAC1, MAC2)\n",
			wantCalls:  1,
		},
		{
			name:      "local validation reports every problem and calls nobody",
			args:      []string{"bad id!", "--mac", "zz:54:00:12:34:56", "--mac", "ff:ff:ff:ff:ff:ff", "--tpm-ek-hash", "abc", "--vcluster", "-x"},
			wantCode:  ExitUsage,
			wantErr:   []string{`node "bad id!"`, `"zz:54:00:12:34:56"`, `"ff:ff:ff:ff:ff:ff"`, "TPM EK hash", `vcluster "-x"`, "see: pact node enroll --help"},
			wantCalls: 0,
		},
		{
			name:      "multicast MAC",
			args:      []string{"nodeX", "--mac", "01:00:5e:00:00:fb", "--bmc-serial", "SN1"},
			wantCode:  ExitUsage,
			wantErr:   []string{`"01:00:5e:00:00:fb" is a multicast address`},
			wantCalls: 0,
		},
		{
			name:      "no MAC",
			args:      []string{"nodeX", "--bmc-serial", "SN1"},
			wantCode:  ExitUsage,
			wantErr:   []string{"no MAC address: pass --mac"},
			wantCalls: 0,
		},
		{
			name:      "no nodeX",
			args:      []string{"--mac", "MAC1"},
			wantCode:  ExitUsage,
			wantErr:   []string{"missing NODE"},
			wantCalls: 0,
		},
		{
			name: "already registered, with other hardware",
			seed: func(t *testing.T, node string, mac int) {
				l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: node, Hardware: &pactv1.HardwareIdentity{Macs: []string{liveMAC(mac + 9)}}})
			},
			args:      []string{"nodeX", "--mac", "MAC1"},
			wantCode:  ExitConflict,
			wantErr:   []string{"node nodeX is already registered", "NODE_ALREADY_ENROLLED", "see it with: pact node inspect nodeX"},
			wantCalls: 1,
		},
		{
			name: "hardware conflict",
			seed: func(t *testing.T, node string, mac int) {
				l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: node + "-other", Hardware: &pactv1.HardwareIdentity{Macs: []string{liveMAC(mac + 1)}}})
			},
			args:      []string{"nodeX", "--mac", "MAC1"},
			wantCode:  ExitConflict,
			wantErr:   []string{"already registered to another node", "HARDWARE_IDENTITY_CONFLICT: MAC MAC1 is registered to node nodeX-other", "pact node list"},
			notErr:    []string{"BMC serial", "TPM EK hash"},
			wantCalls: 1,
		},
		{
			// The MACs and serial are the node's own: only the EK hash is
			// another's, and the message must not send the operator
			// looking at the MACs.
			name: "TPM EK hash conflict names the EK hash",
			seed: func(t *testing.T, node string, mac int) {
				l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: node + "-other", Hardware: &pactv1.HardwareIdentity{Macs: []string{liveMAC(mac + 9)}, TpmEkHash: ekOf(node)}})
			},
			args:      []string{"nodeX", "--mac", "MAC1", "--bmc-serial", "SNnodeX", "--tpm-ek-hash", "EKX"},
			wantCode:  ExitConflict,
			wantErr:   []string{"an identifier given for nodeX is already registered to another node", "HARDWARE_IDENTITY_CONFLICT: TPM EK hash is registered to node nodeX-other"},
			notErr:    []string{"MAC", "BMC serial"},
			wantCalls: 1,
		},
		{
			name:      "permission denied names the role",
			cred:      &viewer,
			args:      []string{"nodeX", "--mac", "MAC1"},
			wantCode:  ExitDenied,
			wantErr:   []string{"your credential (admin bob, role viewer) may not register nodes", "registering nodes needs a credential with role platform-admin\n"},
			wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			suffix, mac := l.fresh()
			node := "node" + suffix
			names := strings.NewReplacer("nodeX", node, "EKX", ekOf(node), "MAC1", liveMAC(mac+1), "MAC2-dashes", strings.ReplaceAll(strings.ToUpper(liveMAC(mac+2)), ":", "-"), "MAC2", liveMAC(mac+2))
			if tt.seed != nil {
				tt.seed(t, node, mac)
			}
			cred := alice
			if tt.cred != nil {
				cred = *tt.cred
			}
			var args []string
			for _, a := range tt.args {
				args = append(args, names.Replace(a))
			}
			rec := &recorder{}
			code, stdout, stderr := runLive(t, l, cred, runOpts{rec: rec}, append([]string{"node", "enroll"}, args...)...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if want := names.Replace(tt.wantStdout); want != "" && stdout != want {
				t.Errorf("stdout %q, want %q", stdout, want)
			}
			if tt.wantCode != ExitOK && stdout != "" {
				t.Errorf("stdout %q on failure, want nothing", stdout)
			}
			if tt.wantCode == ExitOK && stderr != "" {
				t.Errorf("stderr %q on success", stderr)
			}
			for _, w := range tt.wantErr {
				if w := names.Replace(w); !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, w := range tt.notErr {
				if strings.Contains(stderr, w) {
					t.Errorf("stderr says %q:\n%s", w, stderr)
				}
			}
			if got := rec.callCount(); got != tt.wantCalls {
				t.Errorf("journal called %d times, want %d", got, tt.wantCalls)
			}
			if tt.wantCode == ExitOK {
				// The journal saw alice's certificate: she registered it.
				if by := l.node(t, node).GetRegisteredBy(); by != "admin/alice" {
					t.Errorf("registered by %q, want admin/alice", by)
				}
			}
		})
	}
}

// ekOf is a TPM EK hash of the test's own for node.
func ekOf(node string) string {
	sum := sha256.Sum256([]byte("ek of " + node))
	return hex.EncodeToString(sum[:])
}

// TestEnrollAnswers: how pact node enroll explains each class of answer a
// journal may give. The answers are injected (fakeJournal): a real journal
// gives most of them only under conditions a test cannot set up on demand.
func TestEnrollAnswers(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	tests := []struct {
		name     string
		fail     error
		args     []string
		wantCode int
		wantErr  []string
	}{
		{
			name:     "NODE_ALREADY_ENROLLED",
			fail:     apierr.Status(apierr.NodeAlreadyEnrolled, 0, "node-001 exists").Err(),
			args:     []string{"node-001", "--mac", "52:54:00:12:34:56"},
			wantCode: ExitConflict,
			wantErr:  []string{"already registered", "pact node inspect node-001"},
		},
		{
			name:     "unauthenticated",
			fail:     status.Error(codes.Unauthenticated, "who are you"),
			args:     []string{"node-001", "--mac", "52:54:00:12:34:56"},
			wantCode: ExitDenied,
			wantErr:  []string{"did not accept your credential", "--cert/--key"},
		},
		{
			name:     "rate limited says when to retry",
			fail:     apierr.Status(apierr.RateLimited, 2*time.Second, "too many enrollments").Err(),
			args:     []string{"node-001", "--mac", "52:54:00:12:34:56"},
			wantCode: ExitRateLimited,
			wantErr:  []string{"rate limiting", "retry in 2s"},
		},
		{
			name:     "failed precondition",
			fail:     apierr.Status(apierr.AlreadyActive, 0, "node-001 holds a certificate").Err(),
			args:     []string{"node-001", "--mac", "52:54:00:12:34:56"},
			wantCode: ExitPrecondition,
			wantErr:  []string{"node node-001 is already active", "pact node inspect node-001"},
		},
		{
			name:     "journal rejects an argument",
			fail:     apierr.Status(apierr.InvalidArgument, 0, "vcluster ml does not exist").Err(),
			args:     []string{"node-001", "--mac", "52:54:00:12:34:56", "--vcluster", "ml"},
			wantCode: ExitUsage,
			wantErr:  []string{"rejected the request", "vcluster ml does not exist", "pact node enroll --help"},
		},
		{
			name:     "journal fault",
			fail:     apierr.Status(apierr.Internal, 0, "disk full").Err(),
			args:     []string{"node-001", "--mac", "52:54:00:12:34:56"},
			wantCode: ExitInternal,
			wantErr:  []string{"could not register nodes", "disk full", "journal's log"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeJournal()
			fake.setFail(tt.fail)
			addr := startJournal(t, p, fake)
			code, stdout, stderr := runCLI(t, p, append(append([]string{"node", "enroll"}, tt.args...), p.flags(addr)...)...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q on failure, want nothing", stdout)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			// Which credential reached the journal is TestEnroll's to
			// check, on a real one (registered by admin/alice).
			if got := fake.callCount(); got != 1 {
				t.Errorf("journal called %d times, want 1", got)
			}
		})
	}
}

func TestEnrollJSON(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	suffix, mac := l.fresh()
	node, bmc := "node"+suffix, "SN123"+suffix
	code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{}, "node", "enroll", node, "--mac", liveMAC(mac+1), "--bmc-serial", bmc, "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var v NodeView
	if err := json.Unmarshal([]byte(stdout), &v); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	stored := l.node(t, node)
	at := time.Unix(0, stored.GetRegisteredAtUnixNano()).UTC().Format(time.RFC3339)
	want := NodeView{
		NodeID: node, State: "registered", MACs: []string{liveMAC(mac + 1)}, BMCSerial: bmc,
		RegisteredAt: at, RegisteredBy: "admin/alice", UpdatedAt: at,
	}
	if fmt.Sprint(v) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", v, want)
	}
	if got := stored.GetHardware().GetMacs(); len(got) != 1 || got[0] != liveMAC(mac+1) || stored.GetHardware().GetBmcSerial() != bmc {
		t.Errorf("journal stored hardware %v", stored.GetHardware())
	}
}

// seedRegistry puts three nodes in various states into fake, for the
// listing tests that need a fake journal (an older journal, a page token
// loop); the real journal's counterpart is seedLive.
func seedRegistry(fake *fakeJournal) {
	at := fakeNow.UnixNano()
	fake.put(&pactv1.Node{
		NodeId: "node-b", State: pactv1.NodeState_NODE_STATE_ACTIVE, Vcluster: "ml",
		Hardware:             &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:02", "52:54:00:00:00:03"}, BmcSerial: "BMC-0002", TpmEkHash: strings.Repeat("ab", 32)},
		Cert:                 &pactv1.CertificateInfo{Serial: "0123456789abcdef0123456789abcdef", NotAfterUnix: fakeNow.Add(72 * time.Hour).Unix(), IssuerSerial: "fedcba9876543210"},
		RegisteredAtUnixNano: at, RegisteredBy: "alice", ActivatedAtUnixNano: at + int64(time.Minute), UpdatedAtUnixNano: at + int64(time.Minute),
		LastSeenUnixNano: at + int64(time.Hour),
	})
	fake.put(&pactv1.Node{
		NodeId: "node-a", State: pactv1.NodeState_NODE_STATE_REGISTERED,
		Hardware:             &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}},
		RegisteredAtUnixNano: at, RegisteredBy: "alice", UpdatedAtUnixNano: at,
	})
	fake.put(&pactv1.Node{
		NodeId: "node-c", State: pactv1.NodeState_NODE_STATE_REVOKED, Vcluster: "hpc",
		Hardware:             &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:04"}, BmcSerial: "A-VERY-LONG-BMC-SERIAL-NUMBER-0004"},
		RegisteredAtUnixNano: at, RegisteredBy: "carol", UpdatedAtUnixNano: at,
		RevokedAtUnixNano: at + int64(2*time.Hour), RevokedBy: "admin/alice",
	})
}

func TestListTable(t *testing.T) {
	clearEnv(t)
	l, r := seededJournal(t)
	b := l.node(t, r.b)
	// pact's clock reads 12.5 s after node-b was last seen.
	now := time.Unix(0, b.GetLastSeenUnixNano()).Add(12500 * time.Millisecond)
	code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{now: func() time.Time { return now }}, "node", "list")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want header and 3 rows, got:\n%s", stdout)
	}
	cols := regexp.MustCompile(`\s{2,}`)
	header := cols.Split(strings.TrimSpace(lines[0]), -1)
	wantHeader := []string{"NODE", "STATE", "VCLUSTER", "LAST SEEN", "MACS", "BMC SERIAL", "CERT SERIAL", "CERT EXPIRES"}
	if fmt.Sprint(header) != fmt.Sprint(wantHeader) {
		t.Errorf("header %q, want %q", header, wantHeader)
	}
	serial := b.GetCert().GetSerial()
	if len(serial) <= 11 {
		t.Fatalf("node-b's certificate serial %q is too short to be shortened", serial)
	}
	wantRows := [][]string{
		{"node-a", "registered", "(maintenance)", "-", r.macA, "-", "-", "-"},
		{"node-b", "active", "ml", "12s ago", strings.Join(r.macsB, ","), "BMC-0002", serial[:11] + "…",
			time.Unix(b.GetCert().GetNotAfterUnix(), 0).UTC().Format(time.RFC3339)},
		{"node-c", "revoked", "hpc", "-", r.macC, "A-VERY-LONG-BMC-SER…", "-", "-"},
	}
	for i, want := range wantRows {
		got := cols.Split(strings.TrimSpace(lines[i+1]), -1)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("row %d = %q, want %q", i, got, want)
		}
	}
	// Columns line up: every row's STATE starts where the header's does.
	col := strings.Index(lines[0], "STATE")
	for _, l := range lines[1:] {
		if l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("row not aligned with header:\n%s\n%s", lines[0], l)
		}
	}
}

func TestListJSON(t *testing.T) {
	clearEnv(t)
	l, r := seededJournal(t)
	code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{}, "node", "list", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var raw []map[string]any
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, stdout)
	}
	if len(raw) != 3 {
		t.Fatalf("got %d nodes, want 3", len(raw))
	}
	keysOf := func(m map[string]any) []string {
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return keys
	}
	wantKeys := []string{"activated_at", "bmc_serial", "cert_issuer_serial", "cert_not_after", "cert_serial", "last_seen", "macs", "node_id",
		"registered_at", "registered_by", "revoked_at", "revoked_by", "state", "updated_at", "vcluster"}
	if keys := keysOf(raw[1]); fmt.Sprint(keys) != fmt.Sprint(wantKeys) {
		t.Errorf("node-b's keys %v, want %v", keys, wantKeys)
	}
	// node-c has a TPM EK hash: the one key more.
	if keys := keysOf(raw[2]); fmt.Sprint(keys) != fmt.Sprint(slices.Sorted(slices.Values(append(wantKeys, "tpm_ek_hash")))) {
		t.Errorf("node-c's keys %v, want %v and tpm_ek_hash", keys, wantKeys)
	}
	var got []NodeView
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	wantStates := map[string]string{"node-a": "registered", "node-b": "active", "node-c": "revoked"}
	for i, v := range got {
		if want := []string{"node-a", "node-b", "node-c"}[i]; v.NodeID != want {
			t.Errorf("node %d is %s, want %s (sorted)", i, v.NodeID, want)
		}
		if v.State != wantStates[v.NodeID] {
			t.Errorf("%s state %q, want %q", v.NodeID, v.State, wantStates[v.NodeID])
		}
	}
	rfc := func(unixNano int64) string { return time.Unix(0, unixNano).UTC().Format(time.RFC3339) }
	b, nb := got[1], l.node(t, r.b)
	if b.CertSerial != nb.GetCert().GetSerial() || b.CertSerial == "" ||
		b.CertNotAfter != time.Unix(nb.GetCert().GetNotAfterUnix(), 0).UTC().Format(time.RFC3339) ||
		b.ActivatedAt != rfc(nb.GetActivatedAtUnixNano()) || b.CertIssuerSerial != nb.GetCert().GetIssuerSerial() || b.CertIssuerSerial == "" {
		t.Errorf("node-b certificate fields: %+v, journal: %v", b, nb)
	}
	if b.LastSeen != rfc(nb.GetLastSeenUnixNano()) || b.RevokedAt != "" || got[0].LastSeen != "" {
		t.Errorf("last_seen/revoked_at: %+v / %+v", b, got[0])
	}
	if c := got[2]; c.RevokedAt != rfc(l.node(t, r.c).GetRevokedAtUnixNano()) || c.RevokedBy != "admin/alice" || c.TPMEKHash != r.ekC {
		t.Errorf("node-c revocation fields and EK hash: %+v", c)
	}
	if got[2].BMCSerial != "A-VERY-LONG-BMC-SERIAL-NUMBER-0004" {
		t.Errorf("JSON must not shorten serials: %q", got[2].BMCSerial)
	}
	if got[0].CertNotAfter != "" || got[0].ActivatedAt != "" || got[0].MACs == nil {
		t.Errorf("unset fields of node-a: %+v", got[0])
	}
	if _, ok := raw[0]["tpm_ek_hash"]; ok {
		t.Error("empty tpm_ek_hash should be omitted")
	}
}

func TestListStateFilter(t *testing.T) {
	clearEnv(t)
	l := startLiveJournal(t)
	seedLive(t, l, "", 0)
	alice := l.alice(t)

	rec := &recorder{}
	code, stdout, _ := runLive(t, l, alice, runOpts{rec: rec}, "node", "list", "--state", "active", "-o", "json")
	var got []NodeView
	if err := json.Unmarshal([]byte(stdout), &got); code != ExitOK || err != nil || len(got) != 1 || got[0].NodeID != "node-b" {
		t.Errorf("exit %d, err %v, nodes %+v", code, err, got)
	}
	if s := last[*pactv1.ListNodesRequest](rec).GetState(); s != pactv1.NodeState_NODE_STATE_ACTIVE {
		t.Errorf("journal asked for state %v", s)
	}

	code, stdout, stderr := runLive(t, l, alice, runOpts{}, "node", "list", "--state", "inactive")
	if code != ExitOK || stdout != "" || !strings.Contains(stderr, "no nodes in state inactive") {
		t.Errorf("empty list: exit %d stdout %q stderr %q", code, stdout, stderr)
	}

	rec = &recorder{}
	code, _, stderr = runLive(t, l, alice, runOpts{rec: rec}, "node", "list", "--state", "dead")
	if code != ExitUsage || !strings.Contains(stderr, "registered, active, inactive, revoked") || rec.callCount() != 0 {
		t.Errorf("bad --state: exit %d, calls %d, stderr %q", code, rec.callCount(), stderr)
	}
}

// A journal from before the fenced and released filters ignores them and
// lists every node (the fake does too): the CLI filters the answer again.
func TestListStateMarksWithAnOlderJournal(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeJournal()
	seedRegistry(fake)
	fake.put(&pactv1.Node{NodeId: "node-f", State: pactv1.NodeState_NODE_STATE_INACTIVE, Fence: &pactv1.Fence{Reason: "INC-1"},
		Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:f1"}}})
	fake.put(&pactv1.Node{NodeId: "node-r", State: pactv1.NodeState_NODE_STATE_ACTIVE, ReleasedSerial: "0a",
		Cert: &pactv1.CertificateInfo{Serial: "0a"}, Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:f2"}}})
	addr := startJournal(t, p, fake)
	for state, want := range map[string]string{"fenced": "node-f", "inactive,fenced": "node-f", "released": "node-r", "active,released": "node-r"} {
		code, stdout, stderr := runCLI(t, p, append([]string{"node", "list", "--state", state, "-o", "json"}, p.flags(addr)...)...)
		var got []NodeView
		if err := json.Unmarshal([]byte(stdout), &got); code != ExitOK || err != nil || len(got) != 1 || got[0].NodeID != want {
			t.Errorf("--state %s: exit %d, %v, %+v %s", state, code, err, got, stderr)
		}
		if !fake.lastList.GetFenced() && !fake.lastList.GetReleased() {
			t.Errorf("--state %s: the journal was not asked to filter: %v", state, fake.lastList)
		}
	}
}

func TestInspect(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	suffix, mac := l.fresh()
	r := seedLive(t, l, suffix, mac)
	b := l.node(t, r.b)
	missing := "node-zz" + suffix

	tests := []struct {
		name     string
		args     []string
		wantCode int
		check    func(t *testing.T, stdout, stderr string)
	}{
		{
			name: "block", args: []string{r.b}, wantCode: ExitOK,
			check: func(t *testing.T, stdout, _ string) {
				for _, re := range []string{
					`(?m)^node: +` + r.b + `$`, `(?m)^state: +active$`, `(?m)^vcluster: +ml$`,
					`(?m)^macs: +` + strings.Join(r.macsB, ", ") + `$`,
					`(?m)^cert serial: +` + b.GetCert().GetSerial() + `$`, // never shortened here
					`(?m)^cert expires: +` + time.Unix(b.GetCert().GetNotAfterUnix(), 0).UTC().Format(time.RFC3339) + `$`,
					`(?m)^registered by: +admin/alice$`,
				} {
					if !regexp.MustCompile(re).MatchString(stdout) {
						t.Errorf("output does not match %s:\n%s", re, stdout)
					}
				}
			},
		},
		{
			name: "maintenance", args: []string{r.a}, wantCode: ExitOK,
			check: func(t *testing.T, stdout, _ string) {
				if !regexp.MustCompile(`(?m)^vcluster: +\(maintenance\)$`).MatchString(stdout) ||
					!regexp.MustCompile(`(?m)^activated at: +-$`).MatchString(stdout) {
					t.Errorf("empty fields:\n%s", stdout)
				}
			},
		},
		{
			name: "json", args: []string{r.c, "-o", "json"}, wantCode: ExitOK,
			check: func(t *testing.T, stdout, _ string) {
				var v NodeView
				if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.NodeID != r.c || v.State != "revoked" || v.TPMEKHash != r.ekC || v.RevokedBy != "admin/alice" {
					t.Errorf("err %v, view %+v", err, v)
				}
			},
		},
		{
			name: "not found", args: []string{missing}, wantCode: ExitNotFound,
			check: func(t *testing.T, _, stderr string) {
				want := "pact: no node " + missing + " in the registry (journal: NODE_NOT_ENROLLED: no node \"" + missing + "\" in the registry); list nodes with: pact node list\n"
				if stderr != want {
					t.Errorf("stderr %q\nwant   %q", stderr, want)
				}
			},
		},
		{
			name: "bad name is caught locally", args: []string{"../etc"}, wantCode: ExitUsage,
			check: func(t *testing.T, _, stderr string) {
				if !strings.Contains(stderr, `node "../etc"`) {
					t.Errorf("stderr %q", stderr)
				}
			},
		},
		{
			name: "two names", args: []string{r.a, r.b}, wantCode: ExitUsage,
			check: func(t *testing.T, _, stderr string) {
				if !strings.Contains(stderr, "takes one NODE") {
					t.Errorf("stderr %q", stderr)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{rec: rec}, append([]string{"node", "inspect"}, tt.args...)...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr %s", code, tt.wantCode, stderr)
			}
			if tt.wantCode == ExitUsage && rec.callCount() != 0 {
				t.Errorf("a usage error called the journal %d times", rec.callCount())
			}
			tt.check(t, stdout, stderr)
		})
	}
}

func TestFailover(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	alice := l.alice(t)
	suffix, mac := l.fresh()
	node := "node" + suffix
	l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: node, Hardware: &pactv1.HardwareIdentity{Macs: []string{liveMAC(mac + 1)}}})

	t.Run("dead address first, then the live one", func(t *testing.T) {
		code, stdout, stderr := runEnv(t, nil, runOpts{key: alice.keyPEM}, append([]string{"node", "inspect", node}, l.flags(alice, deadAddr(t), l.h.Addr)...)...)
		if code != ExitOK || stderr != "" || !strings.Contains(stdout, node) {
			t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
		}
	})

	t.Run("failover before any request was sent adds no doubt", func(t *testing.T) {
		// The node is registered with other hardware: NODE_ALREADY_ENROLLED.
		code, _, stderr := runEnv(t, nil, runOpts{key: alice.keyPEM}, append([]string{"node", "enroll", node, "--mac", liveMAC(mac + 2)}, l.flags(alice, deadAddr(t), l.h.Addr)...)...)
		if code != ExitConflict || !strings.Contains(stderr, "NODE_ALREADY_ENROLLED") || strings.Contains(stderr, "earlier attempt") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("a definite answer is final", func(t *testing.T) {
		second, tried := countingAddr(t)
		code, _, stderr := runEnv(t, nil, runOpts{key: alice.keyPEM}, append([]string{"node", "inspect", "node-zz" + suffix}, l.flags(alice, l.h.Addr, second)...)...)
		if code != ExitNotFound || tried() != 0 {
			t.Errorf("exit %d, second journal dialled %d times; stderr %s", code, tried(), stderr)
		}
	})

	t.Run("all dead", func(t *testing.T) {
		d1, d2 := deadAddr(t), deadAddr(t)
		code, stdout, stderr := runEnv(t, nil, runOpts{key: alice.keyPEM}, append([]string{"node", "list"}, l.flags(alice, d1, d2)...)...)
		if code != ExitUnavailable {
			t.Errorf("exit %d, want %d", code, ExitUnavailable)
		}
		for _, w := range []string{"cannot reach any journal at " + d1 + ", " + d2 + ":\n", "\n  " + d1 + ": ", "\n  " + d2 + ": ",
			"no journal took a connection at " + d1 + ", " + d2, "systemctl status pact-journal", "--journal (or PACT_JOURNAL) names the address it listens on"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		// Not the development layout's address: no make run.
		if strings.Contains(stderr, "make run") {
			t.Errorf("a production address is told make run:\n%s", stderr)
		}
		if stdout != "" {
			t.Errorf("stdout %q", stdout)
		}
	})

	t.Run("a journal that takes the connection and never answers", func(t *testing.T) {
		// What a journal does while it has no leader or loads the
		// registry: its port is bound, nothing is served. The answer
		// used to be gRPC's "context deadline exceeded while waiting for
		// connections to become ready" and "check the journal is running
		// (make run)".
		silent := silentAddr(t)
		code, _, stderr := runEnv(t, nil, runOpts{key: alice.keyPEM}, append([]string{"node", "list", "--timeout", "500ms"}, l.flags(alice, silent)...)...)
		if code != ExitUnavailable {
			t.Errorf("exit %d, want %d", code, ExitUnavailable)
		}
		for _, w := range []string{silent + ": took the connection, but did not answer the TLS handshake in time: it is not serving (yet)",
			silent + " took the connection but did not answer within 500ms", "until it has a leader", "its quorum has no majority up", "pact journal status against another journal"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		for _, not := range []string{"make run", "no journal took a connection", "waiting for connections to become ready"} {
			if strings.Contains(stderr, not) {
				t.Errorf("stderr says %q:\n%s", not, stderr)
			}
		}
	})

	t.Run("journal certificate from another domain", func(t *testing.T) {
		// The credential and --ca are of a root made in the test; the
		// journal's certificate is of its own root.
		other := newTestPKI(t)
		// Every journal answered with a certificate --ca does not trust:
		// the CLI's root is wrong, not the journal down.
		code, _, stderr := runCLI(t, other, append([]string{"node", "list"}, other.flags(l.h.Addr)...)...)
		if code != ExitUsage || !strings.Contains(stderr, "server certificate is not trusted") || !strings.Contains(stderr, "--ca "+other.caFile) ||
			strings.Contains(stderr, "cannot reach") {
			t.Errorf("exit %d stderr %s", code, stderr)
		}
		// One journal down and one untrusted: the outage explanation, which
		// names both.
		code, _, stderr = runCLI(t, other, append([]string{"node", "list"}, other.flags(deadAddr(t), l.h.Addr)...)...)
		if code != ExitUnavailable || !strings.Contains(stderr, "did not verify against --ca "+other.caFile) {
			t.Errorf("mixed: exit %d stderr %s", code, stderr)
		}
	})
}

// TestFailoverFromALeaderlessJournal: a journal without a leader is
// passed over for the next. The NO_LEADER answers are injected
// (fakeJournal): a real journal gives them only between losing its quorum
// and an election, which a test cannot hold it in; the journal package's
// own tests show it gives them then.
func TestFailoverFromALeaderlessJournal(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)

	t.Run("journal without a leader, then one with", func(t *testing.T) {
		noLeader, good := newFakeJournal(), newFakeJournal()
		noLeader.setFail(apierr.Status(apierr.NoLeader, 0, "election in progress").Err())
		a1, a2 := startJournal(t, p, noLeader), startJournal(t, p, good)
		code, _, stderr := runCLI(t, p, append([]string{"node", "enroll", "node-001", "--mac", "52:54:00:12:34:56"}, p.flags(a1, a2)...)...)
		if code != ExitOK || noLeader.callCount() != 1 || good.callsOf("RegisterNode") != 1 || stderr != "" {
			t.Errorf("exit %d, calls %d/%d, stderr %q", code, noLeader.callCount(), good.callCount(), stderr)
		}
	})

	t.Run("no leader anywhere", func(t *testing.T) {
		noLeader := newFakeJournal()
		noLeader.setFail(apierr.Status(apierr.NoLeader, 0, "election in progress").Err())
		code, _, stderr := runCLI(t, p, append([]string{"node", "list"}, p.flags(startJournal(t, p, noLeader), deadAddr(t))...)...)
		if code != ExitUnavailable || !strings.Contains(stderr, "NO_LEADER: election in progress") || !strings.Contains(stderr, "majority of the quorum") {
			t.Errorf("exit %d stderr %s", code, stderr)
		}
	})
}

func TestEnvironment(t *testing.T) {
	l := sharedJournal(t)
	alice := l.alice(t)
	suffix, mac := l.fresh()
	node := "node" + suffix
	l.register(t, alice, &pactv1.RegisterNodeRequest{NodeId: node, Hardware: &pactv1.HardwareIdentity{Macs: []string{liveMAC(mac + 1)}}})
	// Main, as the binary runs: it reads the process environment.
	run := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		code, stdout, stderr := runCLI(t, nil, args...)
		assertNoKeyMaterial(t, stdout+stderr, alice.keyPEM)
		return code, stdout, stderr
	}

	t.Run("env alone is enough", func(t *testing.T) {
		t.Setenv(EnvJournal, l.h.Addr)
		t.Setenv(EnvCA, l.caFile)
		t.Setenv(EnvCert, alice.certFile)
		t.Setenv(EnvKey, alice.keyFile)
		code, stdout, stderr := run(t, "node", "inspect", node)
		if code != ExitOK || !strings.Contains(stdout, node) {
			t.Errorf("exit %d stderr %s", code, stderr)
		}
	})

	t.Run("flags win over env", func(t *testing.T) {
		t.Setenv(EnvJournal, deadAddr(t))
		t.Setenv(EnvCA, "/nonexistent/ca.pem")
		t.Setenv(EnvCert, alice.certFile)
		t.Setenv(EnvKey, alice.keyFile)
		code, _, stderr := run(t, "node", "inspect", node, "--journal", l.h.Addr, "--ca", l.caFile)
		if code != ExitOK {
			t.Errorf("exit %d stderr %s", code, stderr)
		}
	})

	t.Run("missing journal", func(t *testing.T) {
		clearEnv(t)
		t.Setenv(EnvCA, l.caFile)
		t.Setenv(EnvCert, alice.certFile)
		t.Setenv(EnvKey, alice.keyFile)
		code, _, stderr := run(t, "node", "list")
		want := "pact: no journal address: pass --journal host:port or set PACT_JOURNAL (make run prints the exports)\nsee: pact node list --help\n"
		if code != ExitUsage || stderr != want {
			t.Errorf("exit %d stderr %q\nwant %q", code, stderr, want)
		}
	})

	t.Run("everything missing is reported at once", func(t *testing.T) {
		clearEnv(t)
		code, _, stderr := run(t, "node", "list")
		for _, w := range []string{"--journal", "--ca FILE or set PACT_CA", "--cert FILE or set PACT_CERT", "--key FILE or set PACT_KEY"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if code != ExitUsage {
			t.Errorf("exit %d", code)
		}
	})

	t.Run("bad address", func(t *testing.T) {
		clearEnv(t)
		code, _, stderr := run(t, append([]string{"node", "list"}, l.flags(alice, "localhost")...)...)
		if code != ExitUsage || !strings.Contains(stderr, `bad journal address "localhost": want host:port`) {
			t.Errorf("exit %d stderr %s", code, stderr)
		}
	})
}

// TestCredentialFiles: credentials pact cannot use are refused before any
// call, naming the file and never echoing a key.
func TestCredentialFiles(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	alice := l.alice(t)
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	secret := "-----BEGIN PRIVATE KEY-----\nU0VDUkVULUtFWS1NQVRFUklBTC1ET05PVC1QUklOVA==\n-----END PRIVATE KEY-----\n"
	garbage := write("garbage-key.pem", secret)
	notPEM := write("not-pem-key.pem", "SECRET-KEY-MATERIAL-DONOT-PRINT\n")
	other := l.operator(t, "eve", pki.RolePlatformAdmin)
	expired := l.expiredOperator(t, "old", pki.RolePlatformAdmin)

	tests := []struct {
		name     string
		cert     string
		key      string
		wantCode int
		wantErr  string
	}{
		{"key does not parse", alice.certFile, garbage, ExitUsage, "not a usable private key for the certificate"},
		{"key is not PEM", alice.certFile, notPEM, ExitUsage, "no PEM private key in the file"},
		{"key of another certificate", alice.certFile, other.keyFile, ExitUsage, "not a usable private key for the certificate"},
		{"key where the cert belongs", alice.keyFile, alice.keyFile, ExitUsage, "--cert " + alice.keyFile},
		{"missing key file", alice.certFile, dir + "/nope.pem", ExitUsage, "--key: open " + dir + "/nope.pem"},
		{"expired credential", expired.certFile, expired.keyFile, ExitDenied, "(admin old, role platform-admin) expired at"},
	}
	rec := &recorder{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"node", "list", "--journal", l.h.Addr, "--ca", l.caFile, "--cert", tt.cert, "--key", tt.key}
			code, stdout, stderr := runEnv(t, nil, runOpts{rec: rec, key: alice.keyPEM}, args...)
			if code != tt.wantCode || !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("exit %d (want %d), stderr %q lacks %q", code, tt.wantCode, stderr, tt.wantErr)
			}
			for _, s := range []string{"U0VDUkVU", "SECRET-KEY", "BEGIN"} {
				if strings.Contains(stdout+stderr, s) {
					t.Errorf("output echoes key file contents (%q): %s", s, stderr)
				}
			}
			assertNoKeyMaterial(t, stdout+stderr, other.keyPEM)
			assertNoKeyMaterial(t, stdout+stderr, expired.keyPEM)
		})
	}
	if rec.callCount() != 0 {
		t.Errorf("journal called %d times with unusable credentials", rec.callCount())
	}
	// The same journal and files, with alice's own key: the refusals above
	// were the credentials', not the journal's.
	if code, _, stderr := runLive(t, l, alice, runOpts{}, "node", "list", "--state", "inactive"); code != ExitOK {
		t.Errorf("alice's own credential: exit %d: %s", code, stderr)
	}
}

// TestWriteTimeout uses a fake AdminClient: a write that timed out on a
// journal that was connected must not be retried elsewhere, and the
// message must say the outcome is unknown.
func TestWriteTimeout(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	var out, errb bytes.Buffer
	a := &app{env: Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}.withDefaults()}
	a.newClient = func(Config, *credential) (pactv1.AdminServiceClient, io.Closer, error) {
		return timeoutClient{}, nil, nil
	}
	args := append([]string{"node", "enroll", "node-001", "--mac", "52:54:00:12:34:56", "--timeout", "3s"}, p.flags("127.0.0.1:1")...)
	code := a.run(context.Background(), args)
	if code != ExitUnavailable {
		t.Errorf("exit %d", code)
	}
	for _, w := range []string{"journal 127.0.0.1:1 did not answer within 3s", "may or may not have been made", "pact node inspect node-001"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q: %s", w, errb.String())
		}
	}
}

func TestUncertainEarlierAttempt(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	var out, errb bytes.Buffer
	a := &app{env: Env{Stdout: &out, Stderr: &errb}.withDefaults()}
	a.newClient = func(Config, *credential) (pactv1.AdminServiceClient, io.Closer, error) {
		return conflictAfterDrop{}, nil, nil
	}
	code := a.run(context.Background(), append([]string{"node", "enroll", "node-001", "--mac", "52:54:00:12:34:56"}, p.flags("127.0.0.1:1", "127.0.0.1:2")...))
	if code != ExitConflict || !strings.Contains(errb.String(), "an earlier attempt at 127.0.0.1:1 failed mid-request and may have made this change") {
		t.Errorf("exit %d stderr %q", code, errb.String())
	}
}

type conflictAfterDrop struct{ pactv1.AdminServiceClient }

func (conflictAfterDrop) RegisterNode(context.Context, *pactv1.RegisterNodeRequest, ...grpc.CallOption) (*pactv1.RegisterNodeResponse, error) {
	return nil, &JournalError{
		Addr:    "127.0.0.1:2",
		Err:     apierr.FromError(apierr.Status(apierr.NodeAlreadyEnrolled, 0, "exists").Err()),
		Earlier: []Attempt{{Addr: "127.0.0.1:1", Err: &apierr.Error{Code: codes.Unavailable, Message: "transport is closing"}, Uncertain: true}},
	}
}

// TestWriteOutcomeUnknown: a journal that answered OUTCOME_UNKNOWN did
// answer; the message says the outcome is unknown, not that it timed out.
func TestWriteOutcomeUnknown(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	var out, errb bytes.Buffer
	a := &app{env: Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}.withDefaults()}
	a.newClient = func(Config, *credential) (pactv1.AdminServiceClient, io.Closer, error) {
		return outcomeUnknownClient{}, nil, nil
	}
	args := append([]string{"node", "enroll", "node-001", "--mac", "52:54:00:12:34:56"}, p.flags("127.0.0.1:1")...)
	if code := a.run(context.Background(), args); code != ExitUnavailable {
		t.Errorf("exit %d", code)
	}
	for _, w := range []string{"journal 127.0.0.1:1 could not tell whether the change was made", "OUTCOME_UNKNOWN", "may or may not have been made", "pact node inspect node-001"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q: %s", w, errb.String())
		}
	}
	if strings.Contains(errb.String(), "did not answer") {
		t.Errorf("stderr says the journal did not answer: %s", errb.String())
	}
}

type outcomeUnknownClient struct{ pactv1.AdminServiceClient }

func (outcomeUnknownClient) RegisterNode(context.Context, *pactv1.RegisterNodeRequest, ...grpc.CallOption) (*pactv1.RegisterNodeResponse, error) {
	return nil, &JournalError{Addr: "127.0.0.1:1", Err: apierr.FromError(apierr.Status(apierr.OutcomeUnknown, 0, "leader j2 committed the write at index 42, but this journal has not applied it yet").Err())}
}

type timeoutClient struct{ pactv1.AdminServiceClient }

func (timeoutClient) RegisterNode(context.Context, *pactv1.RegisterNodeRequest, ...grpc.CallOption) (*pactv1.RegisterNodeResponse, error) {
	return nil, &JournalError{Addr: "127.0.0.1:1", Err: &apierr.Error{Code: codes.DeadlineExceeded, Message: "context deadline exceeded"}}
}

func TestFailoverDecision(t *testing.T) {
	tests := []struct {
		code             codes.Code
		connected, write bool
		want             bool
	}{
		{codes.Unavailable, false, true, true},
		{codes.Unavailable, true, true, true},
		{codes.DeadlineExceeded, false, true, true}, // never connected: never sent
		{codes.DeadlineExceeded, true, true, false}, // sent: may have happened
		{codes.DeadlineExceeded, true, false, true}, // a read is safe to repeat
		// A journal of an older release that does not know the call did
		// nothing: an upgraded one may know it, a write included.
		{codes.Unimplemented, true, true, true},
		{codes.NotFound, false, false, false},
		{codes.PermissionDenied, true, false, false},
		{codes.ResourceExhausted, true, false, false},
		{codes.Internal, true, false, false},
	}
	for _, tt := range tests {
		if got := failover(tt.code, tt.connected, tt.write); got != tt.want {
			t.Errorf("failover(%v, connected=%v, write=%v) = %v, want %v", tt.code, tt.connected, tt.write, got, tt.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	st := func(r apierr.Reason) error { return apierr.Status(r, 0, "x").Err() }
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"plain error", errors.New("boom"), ExitInternal},
		{"cancelled", context.Canceled, ExitInternal},
		{"usage", &UsageError{Problems: []error{errors.New("x")}}, ExitUsage},
		{"wrapped usage", fmt.Errorf("ctx: %w", &UsageError{}), ExitUsage},
		{"unreachable", &UnreachableError{Attempts: []Attempt{{Addr: "a", Err: &apierr.Error{Code: codes.Unavailable}}}}, ExitUnavailable},
		{"invalid argument", st(apierr.InvalidArgument), ExitUsage},
		{"invalid CSR", st(apierr.InvalidCSR), ExitUsage},
		{"not enrolled", st(apierr.NodeNotEnrolled), ExitNotFound},
		{"already enrolled", st(apierr.NodeAlreadyEnrolled), ExitConflict},
		{"hardware conflict", st(apierr.HardwareIdentityConflict), ExitConflict},
		{"revoked", st(apierr.NodeRevoked), ExitDenied},
		{"permission denied", st(apierr.PermissionDenied), ExitDenied},
		{"unauthenticated", st(apierr.Unauthenticated), ExitDenied},
		{"stale certificate", st(apierr.StaleCertificate), ExitDenied},
		{"already active", st(apierr.AlreadyActive), ExitPrecondition},
		{"quorum version", st(apierr.QuorumVersion), ExitPrecondition},
		{"no leader", st(apierr.NoLeader), ExitUnavailable},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), ExitUnavailable},
		{"rate limited", st(apierr.RateLimited), ExitRateLimited},
		{"internal", st(apierr.Internal), ExitInternal},
		{"unimplemented", status.Error(codes.Unimplemented, "old journal"), ExitInternal},
		{"journal error", &JournalError{Addr: "a", Err: apierr.FromError(st(apierr.NodeNotEnrolled))}, ExitNotFound},
		{"hinted journal error", &hintError{msg: "m", err: &JournalError{Addr: "a", Err: apierr.FromError(st(apierr.RateLimited))}}, ExitRateLimited},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("%s: ExitCode = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestExitCodesDocumented keeps docs/exit-codes.md in step with the constants.
func TestExitCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/exit-codes.md")
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]int{
		"ExitOK": ExitOK, "ExitInternal": ExitInternal, "ExitUsage": ExitUsage, "ExitNotFound": ExitNotFound,
		"ExitConflict": ExitConflict, "ExitDenied": ExitDenied, "ExitPrecondition": ExitPrecondition,
		"ExitUnavailable": ExitUnavailable, "ExitRateLimited": ExitRateLimited,
		"ExitQuorumNoLeader": ExitQuorumNoLeader, "ExitQuorumDegraded": ExitQuorumDegraded, "ExitQuorumLearnerStuck": ExitQuorumLearnerStuck,
	}
	rows := regexp.MustCompile("(?m)^\\| *(\\d+) *\\| *`(Exit\\w+)` *\\|").FindAllStringSubmatch(string(doc), -1)
	seen := map[string]bool{}
	for _, r := range rows {
		n, _ := strconv.Atoi(r[1])
		want, ok := consts[r[2]]
		if !ok {
			t.Errorf("docs/exit-codes.md documents unknown %s", r[2])
			continue
		}
		if n != want {
			t.Errorf("docs/exit-codes.md says %s = %d, code says %d", r[2], n, want)
		}
		seen[r[2]] = true
	}
	for name := range consts {
		if !seen[name] {
			t.Errorf("docs/exit-codes.md does not document %s", name)
		}
	}
}

func TestNodeViewOfEmpty(t *testing.T) {
	b, err := json.Marshal(NodeViewOf(&pactv1.Node{NodeId: "n", State: pactv1.NodeState(42)}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"node_id":"n","state":"unknown","macs":[],"bmc_serial":"","vcluster":"","cert_serial":"","cert_not_after":"","cert_issuer_serial":"","registered_at":"","registered_by":"","activated_at":"","updated_at":"","last_seen":"","revoked_at":"","revoked_by":""}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

// A SPIRE node's standby shows in inspect, as JSON and as a block.
func TestNodeViewShowsTheStandby(t *testing.T) {
	n := &pactv1.Node{NodeId: "n", State: pactv1.NodeState_NODE_STATE_ACTIVE,
		Cert:        &pactv1.CertificateInfo{Serial: "a1", IssuerSerial: "spire", NotAfterUnix: 1800000000},
		StandbyCert: &pactv1.CertificateInfo{Serial: "s1", IssuerSerial: "i1", NotAfterUnix: 1800003600}}
	v := NodeViewOf(n)
	if v.StandbySerial != "s1" || v.StandbyNotAfter != "2027-01-15T09:00:00Z" {
		t.Errorf("view %+v, want standby s1 until 2027-01-15T09:00:00Z", v)
	}
	var out bytes.Buffer
	if err := writeNodeBlock(&out, v, fakeNow); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "standby serial:     s1") || !strings.Contains(out.String(), "standby expires:") {
		t.Errorf("inspect block lacks the standby:\n%s", out.String())
	}
}

func TestTableCellsAreSanitised(t *testing.T) {
	var out bytes.Buffer
	if err := writeNodeTable(&out, []NodeView{{NodeID: "n", State: "active", BMCSerial: "\x1b[31mred"}}, fakeNow); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("escape sequence reached the table: %q", out.String())
	}
}

func TestHelp(t *testing.T) {
	clearEnv(t)
	code, stdout, _ := runCLI(t, nil, "node", "enroll", "--help")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{"Examples:", "pact node enroll node-001 --mac 52:54:00:12:34:56 --bmc-serial SN123", "--mac", "--journal", "PACT_JOURNAL"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("enroll --help lacks %q", w)
		}
	}
	// Every command teaches: a Short, a Long and examples.
	a := &app{env: Env{}.withDefaults()}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		if c.Short == "" || c.Long == "" || c.Example == "" {
			t.Errorf("%s: Short, Long and Example are all needed", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(a.rootCommand())
}

func TestUsageErrors(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"nodes"}, `unknown command "nodes" for "pact"`},
		{[]string{"node", "lst"}, `did you mean list?`},
		{[]string{"node", "enroll", "--mca", "x"}, "unknown flag: --mca"},
		{[]string{"node", "enroll", "--bmc-seral", "x"}, "unknown flag: --bmc-seral; did you mean --bmc-serial?"},
		{[]string{"node", "list", "-o", "yaml", "--journal", "h:1", "--ca", "a", "--cert", "b", "--key", "c"}, `unknown output format "yaml"`},
		{[]string{"version", "extra"}, `unknown command "extra"`},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(t, nil, tt.args...)
		if code != ExitUsage || !strings.Contains(stderr, tt.wantErr) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q (want %q)", tt.args, code, stdout, stderr, tt.wantErr)
		}
	}
}

func TestVersion(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeJournal()
	seedQuorum(fake, "j2", time.Now())
	downJ3(fake)
	addr := startJournal(t, p, fake)

	t.Run("no journal configured", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, nil, "version", "-o", "json")
		var v versionView
		if err := json.Unmarshal([]byte(stdout), &v); code != ExitOK || err != nil || v.Version == "" || v.Go == "" || v.Journals != nil {
			t.Errorf("exit %d err %v %+v stderr %q", code, err, v, stderr)
		}
	})
	t.Run("each journal", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, p, append([]string{"version"}, p.flags(addr)...)...)
		if code != ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		if len(lines) != 5 || !strings.HasPrefix(lines[0], "pact ") {
			t.Fatalf("want the CLI's line, a header and 3 journals:\n%s", stdout)
		}
		rows := tableRows(lines[1:])
		want := [][]string{
			{"JOURNAL", "VERSION"},
			{"j1", "v0.3.1 (commit 0123abc, go1.26.0, linux/amd64)"},
			{"j2", "v0.3.2 (commit 0123abc, go1.26.0, linux/amd64)"},
		}
		for i := range want {
			if fmt.Sprint(rows[i]) != fmt.Sprint(want[i]) {
				t.Errorf("line %d = %q, want %q", i+1, rows[i], want[i])
			}
		}
		if !strings.HasPrefix(lines[4], "j3") || !strings.Contains(lines[4], "unreachable: ") {
			t.Errorf("j3: %q", lines[4])
		}
	})
	t.Run("json", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, p, append([]string{"version", "-o", "json"}, p.flags(addr)...)...)
		var v versionView
		if err := json.Unmarshal([]byte(stdout), &v); code != ExitOK || err != nil || len(v.Journals) != 3 {
			t.Fatalf("exit %d err %v %+v stderr %q", code, err, v, stderr)
		}
		if j := v.Journals[1]; j.JournalID != "j2" || !j.Reachable || j.Version != "v0.3.2 (commit 0123abc, go1.26.0, linux/amd64)" {
			t.Errorf("j2 %+v", j)
		}
		if j := v.Journals[2]; j.Reachable || j.Version != "" || j.Error == "" {
			t.Errorf("j3 %+v", j)
		}
	})
	t.Run("client only never dials", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, p, append([]string{"version", "--client"}, p.flags(deadAddr(t))...)...)
		if code != ExitOK || strings.Count(stdout, "\n") != 1 || !strings.HasPrefix(stdout, "pact ") {
			t.Errorf("exit %d stdout %q stderr %q", code, stdout, stderr)
		}
	})
	t.Run("journal down", func(t *testing.T) {
		code, _, stderr := runCLI(t, p, append([]string{"version"}, p.flags(deadAddr(t))...)...)
		if code != ExitUnavailable {
			t.Errorf("exit %d, want %d: %s", code, ExitUnavailable, stderr)
		}
	})
}

// Messages carry no internal package prefixes ("hwid:", "pki:"), whether
// the problem was found locally or by the journal.
func TestNoInternalPrefixes(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeJournal()
	fake.setFail(apierr.Status(apierr.InvalidArgument, 0, `hwid: invalid MAC address: "x"; pki: invalid name`).Err())
	addr := startJournal(t, p, fake)
	for _, args := range [][]string{
		{"node", "enroll", "bad!", "--mac", "zz", "--bmc-serial", "a\x01"},
		{"node", "assign", "n1", "--vcluster", "no/pe"},
		append([]string{"node", "list"}, p.flags(addr)...),
	} {
		_, _, stderr := runCLI(t, p, args...)
		if stderr == "" || strings.Contains(stderr, "hwid:") || strings.Contains(stderr, "pki:") {
			t.Errorf("%v: %q", args, stderr)
		}
	}
}
