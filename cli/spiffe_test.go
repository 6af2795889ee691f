package cli

import (
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
		reason   string
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

func TestEnrollSPIFFEID(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	fake := newFakeAdmin()
	addr := startJournal(t, p, fake)

	code, stdout, stderr := runCLI(t, p, append([]string{"node", "enroll", "node-1", "--mac", "52:54:00:00:00:01", "--spiffe-id", "spiffe://site.example/custom/n1", "-o", "json"}, p.flags(addr)...)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, `"spiffe_id":`) || !strings.Contains(stdout, "spiffe://site.example/custom/n1") {
		t.Errorf("JSON output %s lacks the spiffe_id", stdout)
	}
	if got := fake.node("node-1").GetSpiffeId(); got != "spiffe://site.example/custom/n1" {
		t.Errorf("registered spiffe_id %q", got)
	}

	path := p.write("n.csv", []byte("node_id,mac,spiffe_id\nnode-2,52:54:00:00:00:02,spiffe://site.example/custom/n2\nnode-3,52:54:00:00:00:03,\n"))
	if code, _, stderr := runCLI(t, p, append([]string{"node", "enroll", "--batch", path}, p.flags(addr)...)...); code != ExitOK {
		t.Fatalf("batch exit %d: %s", code, stderr)
	}
	if a, b := fake.node("node-2").GetSpiffeId(), fake.node("node-3").GetSpiffeId(); a != "spiffe://site.example/custom/n2" || b != "" {
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
			calls := fake.callCount()
			code, _, stderr := runCLI(t, p, append(append([]string{"node", "enroll"}, tt.args...), p.flags(addr)...)...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d: %s", code, ExitUsage, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if fake.callCount() != calls {
				t.Error("a refused command called the journal")
			}
		})
	}
}
