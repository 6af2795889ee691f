package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The SPIFFE ID override of SPIRE sites: --spiffe-id on "pact node enroll"
// and the spiffe_id column of a batch file.

func TestReadBatchSPIFFEID(t *testing.T) {
	in := "node_id,mac,spiffe_id\n" +
		"node-1,52:54:00:00:00:01,spiffe://site.example/custom/a\n" +
		"node-2,52:54:00:00:00:02,\n" +
		"node-3,52:54:00:00:00:03,spiffe://site.example/custom/a\n" +
		"node-4,52:54:00:00:00:04,https://site.example/x\n" +
		"node-5,52:54:00:00:00:05,spiffe://site.example/pact-agent/node-1\n" +
		"node-6,52:54:00:00:00:06,spiffe://site.example/pact-agent/node-6\n" +
		"node-7,52:54:00:00:00:07,spiffe://Site.example/x\n" +
		"node-8,52:54:00:00:00:08,spiffe://site.example\n"
	rows, err := readAll(t, in)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spiffeID string
		reason   RowReason
		msg      string
	}{
		{spiffeID: "spiffe://site.example/custom/a"},
		{spiffeID: ""},
		{reason: ReasonDuplicateInFile, msg: `SPIFFE ID "spiffe://site.example/custom/a" is already on line 2 of this file (node node-1)`},
		{reason: ReasonInvalidRow, msg: "is not a SPIFFE ID"},
		{reason: ReasonInvalidRow, msg: "is the default SPIFFE ID of node node-1, not of node-5"},
		{spiffeID: "spiffe://site.example/pact-agent/node-6"},
		{reason: ReasonInvalidRow, msg: "not a SPIFFE ID"},
		{reason: ReasonInvalidRow, msg: "names a trust domain only"},
	}
	if len(rows) != len(tests) {
		t.Fatalf("%d rows, want %d", len(rows), len(tests))
	}
	for i, tt := range tests {
		r := rows[i]
		switch {
		case tt.reason == "" && (r.Err != nil || r.SPIFFEID != tt.spiffeID):
			t.Errorf("line %d: %+v, want spiffe_id %q", r.Line, r, tt.spiffeID)
		case tt.reason != "" && (r.Err == nil || r.Err.Reason != tt.reason || !strings.Contains(r.Err.Error(), tt.msg)):
			t.Errorf("line %d: err %v, want %s saying %q", r.Line, r.Err, tt.reason, tt.msg)
		}
	}
}

// The journal keeps the SPIFFE ID it was given, only within the SPIRE
// trust domain it accepts SVIDs from (here its own, pact.local).
func TestEnrollSPIFFEID(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	alice := l.alice(t)
	suffix, mac := l.fresh()
	n1, n2, n3 := "node-1"+suffix, "node-2"+suffix, "node-3"+suffix
	td := "spiffe://pact.local/custom"

	code, stdout, stderr := runLive(t, l, alice, runOpts{}, "node", "enroll", n1, "--mac", liveMAC(mac+1), "--spiffe-id", td+"/n1"+suffix, "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, `"spiffe_id":`) || !strings.Contains(stdout, td+"/n1"+suffix) {
		t.Errorf("JSON output %s lacks the spiffe_id", stdout)
	}
	if got := l.node(t, n1).GetSpiffeId(); got != td+"/n1"+suffix {
		t.Errorf("registered spiffe_id %q", got)
	}
	// Another trust domain: the journal refuses it.
	code, _, stderr = runLive(t, l, alice, runOpts{}, "node", "enroll", "node-9"+suffix, "--mac", liveMAC(mac+9), "--spiffe-id", "spiffe://site.example/custom/n9")
	if code != ExitUsage || !strings.Contains(stderr, "not in the SPIRE trust domain pact.local") {
		t.Errorf("another trust domain: exit %d: %s", code, stderr)
	}

	path := filepath.Join(t.TempDir(), "n.csv")
	if err := os.WriteFile(path, []byte("node_id,mac,spiffe_id\n"+n2+","+liveMAC(mac+2)+","+td+"/n2"+suffix+"\n"+n3+","+liveMAC(mac+3)+",\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runLive(t, l, alice, runOpts{}, "node", "enroll", "--batch", path); code != ExitOK {
		t.Fatalf("batch exit %d: %s", code, stderr)
	}
	if a, b := l.node(t, n2).GetSpiffeId(), l.node(t, n3).GetSpiffeId(); a != td+"/n2"+suffix || b != "" {
		t.Errorf("batch registered spiffe_ids %q, %q", a, b)
	}

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"not a SPIFFE ID", []string{"node-9", "--mac", "52:54:00:00:00:09", "--spiffe-id", "site.example/x"}, []string{"--spiffe-id", "not a SPIFFE ID"}},
		{"another node's default", []string{"node-9", "--mac", "52:54:00:00:00:09", "--spiffe-id", "spiffe://site.example/pact-agent/node-1"}, []string{"default SPIFFE ID of node node-1"}},
		{"with --batch", []string{"--batch", path, "--spiffe-id", "spiffe://site.example/x"}, []string{"--spiffe-id cannot be combined with --batch", "spiffe_id column"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			code, _, stderr := runLive(t, l, alice, runOpts{rec: rec}, append([]string{"node", "enroll"}, tt.args...)...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d: %s", code, ExitUsage, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if rec.callCount() != 0 {
				t.Error("a refused command called the journal")
			}
		})
	}
}
