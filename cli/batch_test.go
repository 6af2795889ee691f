package cli

import (
	"bufio"
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
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// wantRow is what a test expects of one yielded row.
type wantRow struct {
	line   int
	node   string
	macs   string    // comma-joined, for accepted rows
	reason RowReason // "" for an accepted row
	msg    []string
}

func readAll(t *testing.T, in string) ([]BatchRow, error) {
	t.Helper()
	var rows []BatchRow
	for row, err := range ReadBatchIn(strings.NewReader(in), "") {
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

const hdr = "node_id,mac,bmc_serial,tpm_ek_hash,vcluster\n"

func TestReadBatch(t *testing.T) {
	ek := strings.Repeat("AB", 32)
	tests := []struct {
		name  string
		in    string
		want  []wantRow
		fatal string // substring of the fatal error, if any
	}{
		{
			name: "every column, several MACs normalised and sorted",
			in:   hdr + "node-1,52-54-00-00-00-02;5254.0000.0001,SN1," + ek + ",ml\nnode-2,52:54:00:00:00:03,,,\n",
			want: []wantRow{
				{line: 2, node: "node-1", macs: "52:54:00:00:00:01,52:54:00:00:00:02"},
				{line: 3, node: "node-2", macs: "52:54:00:00:00:03"},
			},
		},
		{
			name: "BOM, CRLF, spaces around cells and a trailing ';'",
			in:   "\xef\xbb\xbf" + "node_id,mac\r\n node-1 , 52:54:00:00:00:01 ; \r\n",
			want: []wantRow{{line: 2, node: "node-1", macs: "52:54:00:00:00:01"}},
		},
		{
			name: "blank lines and rows of empty cells are skipped; line numbers stay true",
			in:   "\n" + hdr + "\n\nnode-1,52:54:00:00:00:01,,,\n,,,,\n  ,, ,,\nnode-2,52:54:00:00:00:02,,,\n\n",
			want: []wantRow{{line: 5, node: "node-1", macs: "52:54:00:00:00:01"}, {line: 8, node: "node-2", macs: "52:54:00:00:00:02"}},
		},
		{
			name: "columns in any order, optional ones absent, names in any case",
			in:   "MAC, Node_ID \n52:54:00:00:00:01,node-1\n",
			want: []wantRow{{line: 2, node: "node-1", macs: "52:54:00:00:00:01"}},
		},
		{
			name: "duplicates inside the file name the earlier line",
			in: hdr +
				"node-1,52:54:00:00:00:01,SN1,,\n" +
				"node-1,52:54:00:00:00:09,,,\n" + // same node
				"node-2,52-54-00-00-00-01,,,\n" + // same MAC, other spelling
				"node-3,52:54:00:00:00:03,SN1,,\n" + // same BMC serial
				"node-4,52:54:00:00:00:04,," + ek + ",\n" +
				"node-5,52:54:00:00:00:05,," + strings.ToLower(ek) + ",\n", // same EK hash
			want: []wantRow{
				{line: 2, node: "node-1", macs: "52:54:00:00:00:01"},
				{line: 3, node: "node-1", reason: ReasonDuplicateInFile, msg: []string{"node node-1 is already on line 2 of this file"}},
				{line: 4, node: "node-2", reason: ReasonDuplicateInFile, msg: []string{"MAC 52:54:00:00:00:01 is already on line 2 of this file (node node-1)"}},
				{line: 5, node: "node-3", reason: ReasonDuplicateInFile, msg: []string{`BMC serial "SN1" is already on line 2 of this file (node node-1)`}},
				{line: 6, node: "node-4", macs: "52:54:00:00:00:04"},
				{line: 7, node: "node-5", reason: ReasonDuplicateInFile, msg: []string{"TPM EK hash", "line 6", "(node node-4)"}},
			},
		},
		{
			name: "spreadsheet formulas are refused in every column",
			in: hdr +
				"\"=HYPERLINK(\"\"http://x\"\")\",52:54:00:00:00:01,,,\n" +
				"node-2,52:54:00:00:00:02,+SN,,\n" +
				"node-3,52:54:00:00:00:03,,,@SUM(A1)\n" +
				"-node-4,52:54:00:00:00:04,,,\n" +
				"\"\tnode-5\",52:54:00:00:00:05,,,\n" +
				"node-6,\"\r52:54:00:00:00:06\",,,\n" +
				"node-7, =1+2,,,\n",
			want: []wantRow{
				{line: 2, reason: ReasonInvalidRow, msg: []string{`node_id "=HYPERLINK(\"http://x\")" looks like a spreadsheet formula; remove the leading character`}},
				{line: 3, node: "node-2", reason: ReasonInvalidRow, msg: []string{`bmc_serial "+SN" looks like a spreadsheet formula`}},
				{line: 4, node: "node-3", reason: ReasonInvalidRow, msg: []string{`vcluster "@SUM(A1)" looks like a spreadsheet formula`}},
				{line: 5, reason: ReasonInvalidRow, msg: []string{`node_id "-node-4" looks like a spreadsheet formula`}},
				{line: 6, reason: ReasonInvalidRow, msg: []string{`node_id "\tnode-5" looks like a spreadsheet formula`}},
				{line: 7, node: "node-6", reason: ReasonInvalidRow, msg: []string{`mac "\r52:54:00:00:00:06" looks like a spreadsheet formula`}},
				{line: 8, node: "node-7", reason: ReasonInvalidRow, msg: []string{`mac " =1+2" looks like a spreadsheet formula`}},
			},
		},
		{
			name: "bad values: every problem of a row at once",
			in: hdr +
				"node 1,zz:54:00:00:00:01;ff:ff:ff:ff:ff:ff,,abc,a/b\n" +
				"node-2,,,,\n" +
				",52:54:00:00:00:03,,,\n" +
				"node-4,52:54:00:00:00:04\n" +
				"node-5,52:54:00:00:00:05,,,,extra\n",
			want: []wantRow{
				{line: 2, reason: ReasonInvalidRow, msg: []string{
					`node_id "node 1" is not a valid node name`, `"zz:54:00:00:00:01"`, `"ff:ff:ff:ff:ff:ff" is not a unicast`, "TPM EK hash", `vcluster "a/b"`,
				}},
				{line: 3, node: "node-2", reason: ReasonInvalidRow, msg: []string{"mac is empty: give at least one MAC"}},
				{line: 4, reason: ReasonInvalidRow, msg: []string{"node_id is empty"}},
				{line: 5, node: "node-4", reason: ReasonInvalidRow, msg: []string{"2 cells, but the header has 5 columns"}},
				{line: 6, node: "node-5", reason: ReasonInvalidRow, msg: []string{"6 cells, but the header has 5 columns"}},
			},
		},
		{
			name: "MACs separated by commas inside one cell get a hint",
			in:   hdr + "node-1,\"52:54:00:00:00:01, 52:54:00:00:00:02\",,,\n",
			want: []wantRow{{line: 2, node: "node-1", reason: ReasonInvalidRow, msg: []string{"separate several MACs in one cell with ';'"}}},
		},
		{
			name: "malformed CSV is a row error and reading goes on",
			in:   hdr + "node-1,52:54:00:00:00:01,S\"N,,\nnode-2,\"52:54:00:00:00:02\nstill\"x,,,\nnode-3,52:54:00:00:00:03,,,\n",
			want: []wantRow{
				{line: 2, reason: ReasonInvalidRow, msg: []string{"malformed CSV at line 2", `bare " in non-quoted-field`, "double quotes"}},
				{line: 3, reason: ReasonInvalidRow, msg: []string{"malformed CSV at line 4"}},
				{line: 5, node: "node-3", macs: "52:54:00:00:00:03"},
			},
		},
		{
			name: "a quoted cell may hold a comma; a newline in a MAC cell is invalid",
			in:   "node_id,mac,bmc_serial\nnode-1,52:54:00:00:00:01,\"SN,1\"\nnode-2,\"52:54:00:00:00:02\n\",x\n",
			want: []wantRow{
				{line: 2, node: "node-1", macs: "52:54:00:00:00:01"},
				{line: 3, node: "node-2", macs: "52:54:00:00:00:02"}, // TrimSpace drops the newline
			},
		},
		{name: "empty file", in: "", fatal: "the file is empty: it needs a header line"},
		{name: "only a BOM and blank lines", in: "\xef\xbb\xbf\n\n", fatal: "the file is empty"},
		{name: "no header", in: "node-1,52:54:00:00:00:01\n", fatal: `line 1: not a header ("node-1" is not a column name)`},
		{name: "unknown column", in: "node_id,mac,rack\n", fatal: `line 1: bad header: unknown column "rack"`},
		{name: "missing column", in: "node_id,bmc_serial\n", fatal: "column mac is missing"},
		{name: "twice the same column", in: "node_id,mac,MAC\n", fatal: "column mac appears twice"},
		{name: "trailing comma in the header", in: "node_id,mac,\n", fatal: "column 3 has no name (a trailing comma?)"},
		{name: "UTF-16", in: "\xff\xfen\x00o\x00", fatal: "UTF-16"},
		{name: "header not CSV", in: "node_id,\"mac\n", fatal: "the header is not valid CSV"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := readAll(t, tt.in)
			if tt.fatal != "" {
				if err == nil || !strings.Contains(err.Error(), tt.fatal) || !errors.Is(err, ErrBatchFile) {
					t.Fatalf("err %v, want %q", err, tt.fatal)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(tt.want) {
				t.Fatalf("%d rows, want %d: %+v", len(rows), len(tt.want), rows)
			}
			for i, w := range tt.want {
				r := rows[i]
				if r.Line != w.line || r.NodeID != w.node {
					t.Errorf("row %d: line %d node %q, want line %d node %q", i, r.Line, r.NodeID, w.line, w.node)
				}
				if w.reason == "" {
					if r.Err != nil {
						t.Errorf("row %d: unexpected error %v", i, r.Err)
					} else if got := strings.Join(r.Hardware.MACs, ","); got != w.macs {
						t.Errorf("row %d: macs %q, want %q", i, got, w.macs)
					}
					continue
				}
				if r.Err == nil || r.Err.Reason != w.reason {
					t.Errorf("row %d: err %v, want reason %s", i, r.Err, w.reason)
					continue
				}
				for _, m := range w.msg {
					if !strings.Contains(r.Err.Error(), m) {
						t.Errorf("row %d: %q lacks %q", i, r.Err.Error(), m)
					}
				}
			}
		})
	}
}

func TestReadBatchValues(t *testing.T) {
	rows, err := readAll(t, "vcluster,tpm_ek_hash,bmc_serial,mac,node_id\nml,"+strings.Repeat("AB", 32)+", SN-9 ,52:54:00:00:00:01,node-1\n")
	if err != nil || len(rows) != 1 || rows[0].Err != nil {
		t.Fatalf("rows %+v err %v", rows, err)
	}
	r := rows[0]
	if r.VCluster != "ml" || r.Hardware.BMCSerial != "SN-9" || r.Hardware.EKHash != strings.Repeat("ab", 32) {
		t.Errorf("row %+v", r)
	}
}

// TestReadBatchUnclosedQuote: an unclosed quote must not pull the rest of
// a large file into memory as one cell.
func TestReadBatchUnclosedQuote(t *testing.T) {
	var b strings.Builder
	b.WriteString(hdr + "node-0,52:54:00:00:00:01,,,\n")
	b.WriteString("node-1,\"52:54:00:00:00:02,,,\n")
	for i := range 10000 {
		fmt.Fprintf(&b, "node-%d,%s,,,\n", i+2, genMAC(i+2))
	}
	rows, err := readAll(t, b.String())
	if len(rows) != 1 || rows[0].Err != nil {
		t.Errorf("rows before the quote: %+v", rows)
	}
	if err == nil || !strings.Contains(err.Error(), "quote that is never closed") || !errors.Is(err, ErrBatchFile) {
		t.Errorf("err %v", err)
	}
}

func TestReadBatchReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	r := io.MultiReader(strings.NewReader(hdr+"node-1,52:54:00:00:00:01,,,\n"), iotestErrReader{boom})
	var rows []BatchRow
	var got error
	for row, err := range ReadBatchIn(r, "") {
		if err != nil {
			got = err
			break
		}
		rows = append(rows, row)
	}
	if len(rows) != 1 || !errors.Is(got, boom) {
		t.Errorf("rows %d err %v", len(rows), got)
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// genMAC is a distinct valid MAC for each i.
func genMAC(i int) string {
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
}

// batchFile is a valid file of n nodes, node-000000 onwards.
func batchFile(n int) string {
	var b strings.Builder
	b.WriteString(hdr)
	for i := range n {
		fmt.Fprintf(&b, "node-%06d,%s,BMC%06d,,\n", i, genMAC(i), i)
	}
	return b.String()
}

// batchCase is one batch run against a fresh fake.
type batchCase struct {
	name      string
	file      string
	args      []string // extra arguments
	cred      *credFiles
	setup     func(t *testing.T, l *liveJournal, names *strings.Replacer)
	rowReason map[string]apierr.Reason // answers forced on a fakeJournal
	wantCode  int
	wantOut   []string // lines of stdout, exact, when set
	wantErr   []string // substrings of stderr
	wantSent  int      // rows the journal received, -1: don't check
	wantCalls int      // RegisterNodes calls, -1: don't check
}

func TestEnrollBatch(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	viewer := p.issueAdmin("viewer", "bob", pki.RoleViewer, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	three := hdr + "node-1,52:54:00:00:00:01,SN1,,ml\nnode-2,52-54-00-00-00-02;52:54:00:00:00:12,SN2,,\nnode-3,52:54:00:00:00:03,,,\n"
	tests := []batchCase{
		{
			name: "registers every row", file: three, wantCode: ExitOK,
			wantOut:  []string{"line 2: node-1: ok", "line 3: node-2: ok", "line 4: node-3: ok", "3 rows: 3 ok, 0 exists, 0 errors"},
			wantSent: 3, wantCalls: 1,
		},
		{
			name: "re-run: identical rows exist, so it is safe", file: three, wantCode: ExitOK,
			setup: func(t *testing.T, l *liveJournal, names *strings.Replacer) {
				registerAs(t, l, names, &pactv1.RegisterNodeRequest{NodeId: "node-1", Vcluster: "ml",
					Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}, BmcSerial: "SN1"}})
				registerAs(t, l, names, &pactv1.RegisterNodeRequest{NodeId: "node-2",
					Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:02", "52:54:00:00:00:12"}, BmcSerial: "SN2"}})
			},
			wantOut:  []string{"line 2: node-1: exists", "line 3: node-2: exists", "line 4: node-3: ok", "3 rows: 1 ok, 2 exists, 0 errors"},
			wantSent: 3, wantCalls: 1,
		},
		{
			name: "a node registered differently is a conflict", file: three, wantCode: ExitConflict,
			setup: func(t *testing.T, l *liveJournal, names *strings.Replacer) {
				registerAs(t, l, names, &pactv1.RegisterNodeRequest{NodeId: "node-1", Vcluster: "hpc", Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:01"}, BmcSerial: "SN1"}})
				registerAs(t, l, names, &pactv1.RegisterNodeRequest{NodeId: "node-9", Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:03"}}})
			},
			wantOut: []string{
				"line 2: node-1: error NODE_ALREADY_ENROLLED: node-1 is registered",
				"line 3: node-2: ok",
				"line 4: node-3: error HARDWARE_IDENTITY_CONFLICT: MAC 52:54:00:00:00:03 is registered to node node-9",
				"3 rows: 1 ok, 0 exists, 2 errors",
			},
			wantErr:  []string{"2 of 3 rows failed (lines 2, 4;", "re-run the same file"},
			wantSent: 3, wantCalls: 1,
		},
		{
			name: "local errors are never sent; exit 2 outranks a conflict",
			file: hdr + "\xef\xbb\xbfnode-1,52:54:00:00:00:01,,,\nnode-2,52:54:00:00:00:02,,,\n=cmd,52:54:00:00:00:05,,,\nnode-4,52:54:00:00:00:04,,,\n",
			setup: func(t *testing.T, l *liveJournal, names *strings.Replacer) {
				registerAs(t, l, names, &pactv1.RegisterNodeRequest{NodeId: "node-9", Hardware: &pactv1.HardwareIdentity{Macs: []string{"52:54:00:00:00:04"}}})
			},
			wantCode: ExitUsage,
			wantOut: []string{
				`line 2: -: error INVALID_ROW: node_id "\ufeffnode-1" is not a valid node name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit`,
				"line 3: node-2: ok",
				`line 4: -: error INVALID_ROW: node_id "=cmd" looks like a spreadsheet formula; remove the leading character`,
				"line 5: node-4: error HARDWARE_IDENTITY_CONFLICT: MAC 52:54:00:00:00:04 is registered to node node-9",
				"4 rows: 1 ok, 0 exists, 3 errors",
			},
			wantSent: 2, wantCalls: 1,
		},
		{
			name:     "nothing valid: the journal is not called",
			file:     hdr + "node-1,zz,,,\nnode-1,52:54:00:00:00:01,,,\n",
			wantCode: ExitUsage,
			wantOut: []string{
				`line 2: node-1: error INVALID_ROW: invalid MAC address: "zz"`,
				"line 3: node-1: error DUPLICATE_IN_FILE: node node-1 is already on line 2 of this file; each node may appear once",
				"2 rows: 0 ok, 0 exists, 2 errors",
			},
			wantSent: 0, wantCalls: 0,
		},
		{
			name: "journal row errors keep their class", file: three, wantCode: ExitDenied,
			rowReason: map[string]apierr.Reason{"node-1": apierr.InvalidArgument, "node-2": apierr.NodeRevoked},
			wantOut: []string{
				"line 2: node-1: error INVALID_ARGUMENT: forced by the test", "line 3: node-2: error NODE_REVOKED: forced by the test",
				"line 4: node-3: ok", "3 rows: 1 ok, 0 exists, 2 errors",
			},
			wantSent: 3, wantCalls: 1,
		},
		{
			name: "an unknown journal reason is a journal fault", file: three, wantCode: ExitInternal,
			rowReason: map[string]apierr.Reason{"node-3": "SOMETHING_NEW"},
			wantSent:  3, wantCalls: 1,
		},
		{
			name: "a viewer may not register: nothing processed, re-run is safe", file: three, cred: &viewer, wantCode: ExitDenied,
			wantOut: []string{"0 rows: 0 ok, 0 exists, 0 errors (stopped: the last line processed is 0)"},
			wantErr: []string{"your credential (admin bob, role viewer) may not register nodes", "registering nodes needs a credential with role platform-admin",
				"stopped at line 2, before any row was processed", `re-running the same file is safe: rows already registered report "exists"`},
			wantSent: -1, wantCalls: 1,
		},
		{
			name: "a bad header stops everything before any call", file: "node_id,mac,rack\nnode-1,52:54:00:00:00:01,r1\n", wantCode: ExitUsage,
			wantErr:  []string{"line 1: bad header: unknown column \"rack\"", "node_id, mac, bmc_serial, tpm_ek_hash, vcluster", "see: pact node enroll --help"},
			wantSent: 0, wantCalls: 0,
		},
		{
			name: "a header alone", file: hdr, wantCode: ExitOK,
			wantOut: []string{"0 rows: 0 ok, 0 exists, 0 errors"}, wantErr: []string{"has a header but no rows"},
			wantSent: 0, wantCalls: 0,
		},
		{
			name: "--batch excludes NODE and the hardware flags", file: three, args: []string{"node-1", "--mac", "52:54:00:00:00:01", "--vcluster", "ml"}, wantCode: ExitUsage,
			wantErr: []string{"3 problems", `drop the NODE argument "node-1"`, "--mac cannot be combined with --batch: put it in the file's mac column",
				"--vcluster cannot be combined with --batch"},
			wantSent: 0, wantCalls: 0,
		},
	}
	l := sharedJournal(t)
	viewerLive := l.operator(t, "bob", pki.RoleViewer)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Fresh names for the case: node-N, the MACs' last bytes and the
			// serials SNn are its own on the shared journal.
			suffix, mac := l.fresh()
			n := 0x1000 + mac>>4
			names := strings.NewReplacer("node-", "node"+suffix+"-", "52:54:00:00:00:", fmt.Sprintf("52:54:00:%02x:%02x:", byte(n>>8), byte(n)),
				"52-54-00-00-00-", fmt.Sprintf("52-54-00-%02x-%02x-", byte(n>>8), byte(n)), "SN", "SN"+suffix+"x")
			var (
				sent, calls func() int
				flags       []string
				key         []byte
				rec         = &recorder{}
			)
			if tt.rowReason != nil {
				fake := newFakeJournal()
				for id, r := range tt.rowReason {
					fake.rowReason[names.Replace(id)] = r
				}
				flags, key = p.flags(startJournal(t, p, fake)), p.admin.keyPEM
				sent = func() int {
					n := 0
					for _, c := range fake.chunkSizes() {
						n += c
					}
					return n
				}
				calls = func() int { return fake.callsOf("RegisterNodes") }
			} else {
				if tt.setup != nil {
					tt.setup(t, l, names)
				}
				cred := l.alice(t)
				if tt.cred != nil {
					cred = viewerLive
				}
				flags, key = l.flags(cred), cred.keyPEM
				sent = func() int {
					n := 0
					for _, c := range rec.chunkSizes() {
						n += c
					}
					return n
				}
				calls = func() int { return rec.callsOf("RegisterNodes") }
			}
			path := p.write("nodes.csv", []byte(names.Replace(tt.file)))
			var args []string
			for _, a := range tt.args {
				args = append(args, names.Replace(a))
			}
			args = append(append([]string{"node", "enroll", "--batch", path}, args...), flags...)
			code, stdout, stderr := runEnv(t, nil, runOpts{rec: rec, key: key}, args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if tt.wantOut != nil {
				var want []string
				for _, w := range tt.wantOut {
					want = append(want, names.Replace(w))
				}
				if got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"); !slices.Equal(got, want) {
					t.Errorf("stdout:\n%s\nwant:\n%s", stdout, strings.Join(want, "\n"))
				}
			}
			for _, w := range tt.wantErr {
				if w := names.Replace(w); !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if tt.wantErr == nil && tt.wantCode == ExitOK && stderr != "" {
				t.Errorf("stderr %q on success", stderr)
			}
			if got := sent(); tt.wantSent >= 0 && got != tt.wantSent {
				t.Errorf("journal received %d rows, want %d", got, tt.wantSent)
			}
			if got := calls(); tt.wantCalls >= 0 && got != tt.wantCalls {
				t.Errorf("RegisterNodes called %d times, want %d", got, tt.wantCalls)
			}
		})
	}
}

// registerAs registers req, its names replaced, as alice.
func registerAs(t *testing.T, l *liveJournal, names *strings.Replacer, req *pactv1.RegisterNodeRequest) {
	t.Helper()
	req.NodeId = names.Replace(req.GetNodeId())
	for i, m := range req.GetHardware().GetMacs() {
		req.Hardware.Macs[i] = names.Replace(m)
	}
	req.Hardware.BmcSerial = names.Replace(req.GetHardware().GetBmcSerial())
	l.register(t, l.alice(t), req)
}

func TestEnrollBatchStoresNormalised(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	suffix, mac := l.fresh()
	node := "node-1" + suffix
	dotted := strings.ToUpper(strings.ReplaceAll(liveMAC(mac+10), ":", ""))
	dotted = dotted[:4] + "." + dotted[4:8] + "." + dotted[8:]
	sum := sha256.Sum256([]byte(node))
	ek := hex.EncodeToString(sum[:])
	path := filepath.Join(t.TempDir(), "n.csv")
	if err := os.WriteFile(path, []byte("mac,vcluster,node_id,tpm_ek_hash\n"+dotted+";"+liveMAC(mac+1)+",ml,"+node+","+strings.ToUpper(ek)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runLive(t, l, l.alice(t), runOpts{}, "node", "enroll", "--batch", path); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	n := l.node(t, node)
	if got := n.GetHardware().GetMacs(); !slices.Equal(got, []string{liveMAC(mac + 1), liveMAC(mac + 10)}) || n.GetVcluster() != "ml" ||
		n.GetHardware().GetTpmEkHash() != ek || n.GetRegisteredBy() != "admin/alice" {
		t.Errorf("stored %v", n)
	}
}

func TestEnrollBatchRerun(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	suffix, mac := l.fresh()
	path := filepath.Join(t.TempDir(), "n.csv")
	if err := os.WriteFile(path, []byte(liveBatchFile(1200, suffix, mac)), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{rec: rec}, "node", "enroll", "--batch", path)
	if code != ExitOK || !strings.HasSuffix(stdout, "\n1200 rows: 1200 ok, 0 exists, 0 errors\n") {
		t.Fatalf("first run: exit %d, stderr %s, tail %q", code, stderr, stdout[max(0, len(stdout)-100):])
	}
	code, stdout, stderr = runLive(t, l, l.alice(t), runOpts{rec: rec}, "node", "enroll", "--batch", path)
	if code != ExitOK || !strings.HasSuffix(stdout, "\n1200 rows: 0 ok, 1200 exists, 0 errors\n") || stderr != "" {
		t.Errorf("re-run: exit %d, stderr %s, tail %q", code, stderr, stdout[max(0, len(stdout)-100):])
	}
	if got := rec.chunkSizes(); !slices.Equal(got, []int{500, 500, 200, 500, 500, 200}) {
		t.Errorf("chunks %v", got)
	}
	if n := l.node(t, "node-001199"+suffix); n.GetHardware().GetBmcSerial() != "BMC001199"+suffix || n.GetHardware().GetMacs()[0] != liveBatchMAC(mac, 1199) {
		t.Errorf("the last row was stored as %v", n)
	}
}

func TestEnrollBatchJSONLines(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	suffix, mac := l.fresh()
	// node-000001 was registered by an earlier run, exactly as the file has it.
	l.register(t, l.alice(t), &pactv1.RegisterNodeRequest{NodeId: "node-000001" + suffix,
		Hardware: &pactv1.HardwareIdentity{Macs: []string{liveBatchMAC(mac, 1)}, BmcSerial: "BMC000001" + suffix}})
	file := liveBatchFile(3, suffix, mac) + "bad id,52:54:00:00:00:99,,,\n"
	code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{stdin: strings.NewReader(file)}, "node", "enroll", "--batch", "-", "-o", "json")
	if code != ExitUsage {
		t.Errorf("exit %d: %s", code, stderr)
	}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	var results []BatchResult
	var summary *BatchSummary
	for sc.Scan() {
		if summary != nil {
			t.Fatalf("a line after the summary: %s", sc.Text())
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &probe); err != nil {
			t.Fatalf("not JSON: %q: %v", sc.Text(), err)
		}
		if raw, ok := probe["summary"]; ok {
			summary = &BatchSummary{}
			if err := json.Unmarshal(raw, summary); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var keys []string
		for k := range probe {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"line", "message", "node_id", "reason", "result"}) {
			t.Errorf("keys %v", keys)
		}
		var r BatchResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	want := []BatchResult{
		{Line: 2, NodeID: "node-000000" + suffix, Result: "ok"},
		{Line: 3, NodeID: "node-000001" + suffix, Result: "exists"},
		{Line: 4, NodeID: "node-000002" + suffix, Result: "ok"},
		{Line: 5, NodeID: "", Result: "error", Reason: string(ReasonInvalidRow), Message: `node_id "bad id" is not a valid node name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit`},
	}
	if !slices.Equal(results, want) {
		t.Errorf("results\n%+v\nwant\n%+v", results, want)
	}
	if summary == nil || *summary != (BatchSummary{Rows: 4, OK: 2, Exists: 1, Errors: 1, Complete: true, LastLine: 5}) {
		t.Errorf("summary %+v", summary)
	}
}

// TestEnrollBatchStreams100k feeds 100,000 rows through a pipe. The
// journal must receive chunks of at most 500 rows, and the first one
// before the generator has written much more than a chunk: the file is
// streamed, never read whole.
func TestEnrollBatchStreams100k(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 rows")
	}
	clearEnv(t)
	const rows = 100_000
	p := newTestPKI(t)
	fake := newFakeJournal()
	var written, writtenAtFirstChunk atomic.Int64
	writtenAtFirstChunk.Store(-1)
	fake.onChunk = func(_ context.Context, n int) error {
		if n == 0 {
			writtenAtFirstChunk.Store(written.Load())
		}
		return nil
	}
	addr := startJournal(t, p, fake)
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 512)
		w.WriteString(hdr)
		for i := range rows {
			fmt.Fprintf(w, "node-%06d,%s,BMC%06d,,\n", i, genMAC(i), i)
			written.Add(1)
		}
		w.Flush()
		pw.Close()
	}()
	code, stdout, stderr := runEnv(t, p, runOpts{stdin: pr}, append([]string{"node", "enroll", "--batch", "-", "--timeout", "1m"}, p.flags(addr)...)...)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasSuffix(stdout, "\n100000 rows: 100000 ok, 0 exists, 0 errors\n") {
		t.Errorf("summary: %q", stdout[max(0, len(stdout)-200):])
	}
	if n := strings.Count(stdout, ": ok\n"); n != rows {
		t.Errorf("%d ok lines, want %d", n, rows)
	}
	chunks := fake.chunkSizes()
	total := 0
	for _, c := range chunks {
		if c > batchChunk || c == 0 {
			t.Errorf("a chunk of %d rows", c)
		}
		total += c
	}
	if total != rows || len(chunks) != rows/batchChunk {
		t.Errorf("journal received %d rows in %d chunks", total, len(chunks))
	}
	if at := writtenAtFirstChunk.Load(); at < 0 || at > 2*batchChunk {
		t.Errorf("the generator had written %d rows when the first chunk arrived: the file was not streamed", at)
	}
}

func TestEnrollBatchProgress(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	// A clock that moves a second per reading: every chunk may print.
	ticking := func() func() time.Time {
		var mu atomic.Int64
		start := time.Now()
		return func() time.Time { return start.Add(time.Duration(mu.Add(1)) * time.Second) }
	}
	frozen := func() time.Time { return time.Now() }
	_ = frozen
	tests := []struct {
		name     string
		terminal bool
		now      func() time.Time
		want     []string
		wantNone bool
	}{
		{
			name: "terminal", terminal: true, now: ticking(),
			want: []string{"\r500 rows: 500 ok, 0 exists, 0 errors", "\r1000 rows: 1000 ok, 0 exists, 0 errors", "\r1200 rows: 1200 ok, 0 exists, 0 errors"},
		},
		{name: "not a terminal", terminal: false, now: ticking(), wantNone: true},
		{name: "terminal, but a fast run prints nothing within 200ms", terminal: true, now: nil, wantNone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			suffix, mac := l.fresh()
			now := tt.now
			if now == nil {
				fixed := time.Now()
				now = func() time.Time { return fixed }
			}
			code, stdout, stderr := runLive(t, l, l.alice(t), runOpts{stdin: strings.NewReader(liveBatchFile(1200, suffix, mac)), terminal: tt.terminal, now: now},
				"node", "enroll", "--batch", "-")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if strings.Contains(stdout, "\r") {
				t.Error("progress reached stdout")
			}
			if tt.wantNone {
				if stderr != "" {
					t.Errorf("stderr %q, want nothing", stderr)
				}
				return
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q: %q", w, stderr)
				}
			}
			if clear := "\r" + strings.Repeat(" ", len("1200 rows: 1200 ok, 0 exists, 0 errors")) + "\r"; !strings.HasSuffix(stderr, clear) {
				t.Errorf("the progress line is not cleared at the end: %q", stderr[max(0, len(stderr)-80):])
			}
		})
	}
}

func TestEnrollBatchJournalLost(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	file := batchFile(1500)

	t.Run("unavailable after two chunks, then a re-run finishes", func(t *testing.T) {
		fake := newFakeJournal()
		fake.onChunk = func(_ context.Context, n int) error {
			if n >= 2 {
				return status.Error(codes.Unavailable, "connection reset by peer")
			}
			return nil
		}
		addr := startJournal(t, p, fake)
		path := p.write("n.csv", []byte(file))
		args := append([]string{"node", "enroll", "--batch", path}, p.flags(addr)...)
		code, stdout, stderr := runCLI(t, p, args...)
		if code != ExitUnavailable {
			t.Errorf("exit %d: %s", code, stderr)
		}
		for _, w := range []string{"cannot reach any journal at " + addr, "connection reset by peer",
			"stopped at line 1002; the last line processed is 1001 (1000 rows: 1000 ok, 0 exists, 0 errors)",
			`re-running the same file is safe: rows already registered report "exists"`} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if !strings.HasSuffix(stdout, "line 1001: node-000999: ok\n1000 rows: 1000 ok, 0 exists, 0 errors (stopped: the last line processed is 1001)\n") {
			t.Errorf("stdout tail %q", stdout[max(0, len(stdout)-200):])
		}
		fake.mu.Lock()
		fake.onChunk = nil
		fake.mu.Unlock()
		code, stdout, _ = runCLI(t, p, args...)
		if code != ExitOK || !strings.HasSuffix(stdout, "\n1500 rows: 500 ok, 1000 exists, 0 errors\n") {
			t.Errorf("re-run: exit %d, tail %q", code, stdout[max(0, len(stdout)-100):])
		}
	})

	t.Run("the connection drops mid-call", func(t *testing.T) {
		fake := newFakeJournal()
		srv, addr := startJournalServer(t, p, fake)
		release := make(chan struct{})
		fake.onChunk = func(_ context.Context, n int) error {
			if n == 1 {
				go srv.Stop()
				<-release
				return status.Error(codes.Unavailable, "stopping")
			}
			return nil
		}
		defer close(release)
		path := p.write("n.csv", []byte(file))
		code, _, stderr := runCLI(t, p, append([]string{"node", "enroll", "--batch", path}, p.flags(addr)...)...)
		if code != ExitUnavailable || !strings.Contains(stderr, "stopped at line 502; the last line processed is 501") || !strings.Contains(stderr, "re-running the same file is safe") {
			t.Errorf("exit %d stderr:\n%s", code, stderr)
		}
	})

	t.Run("interrupted", func(t *testing.T) {
		fake := newFakeJournal()
		addr := startJournal(t, p, fake)
		ctx, cancel := context.WithCancel(context.Background())
		fake.onChunk = func(callCtx context.Context, n int) error {
			if n == 1 {
				// The interrupt lands while the second chunk is in flight,
				// and its answer must never reach the CLI: the answer is
				// held until the CLI has abandoned the call (its
				// cancellation reaches this handler as the call's own
				// context ending). Answering at once would race the
				// cancellation: gRPC may hand the CLI the answer first, and
				// the run then stops one chunk later.
				cancel()
				<-callCtx.Done()
				return callCtx.Err()
			}
			return nil
		}
		var out, errb bytes.Buffer
		code := Run(ctx, append([]string{"node", "enroll", "--batch", "-"}, p.flags(addr)...), Env{Stdin: strings.NewReader(file), Stdout: &out, Stderr: &errb})
		if code != ExitInternal || !strings.Contains(errb.String(), "interrupted\nstopped at line 502; the last line processed is 501") {
			t.Errorf("exit %d stderr:\n%s", code, errb.String())
		}
	})
}

func TestEnrollBatchRetries(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	file := batchFile(5)
	var slept []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		slept = append(slept, d)
		return ctx.Err()
	}

	t.Run("a row without a leader is sent again, alone", func(t *testing.T) {
		slept = nil
		fake := newFakeJournal()
		fake.transient["node-000003"] = 2
		addr := startJournal(t, p, fake)
		code, stdout, stderr := runEnv(t, p, runOpts{stdin: strings.NewReader(file), sleep: sleep}, append([]string{"node", "enroll", "--batch", "-"}, p.flags(addr)...)...)
		if code != ExitOK || !strings.Contains(stdout, "line 5: node-000003: ok\n") || !strings.HasSuffix(stdout, "5 rows: 5 ok, 0 exists, 0 errors\n") {
			t.Errorf("exit %d stdout %s stderr %s", code, stdout, stderr)
		}
		if got := fake.chunkSizes(); !slices.Equal(got, []int{5, 1, 1}) {
			t.Errorf("chunks %v", got)
		}
		// The agents' policy (internal/backoff), every draw half its
		// range: Min/2 + Min/2, then Min/2 + Min.
		if !slices.Equal(slept, []time.Duration{batchBackoff, batchBackoff * 3 / 2}) {
			t.Errorf("slept %v", slept)
		}
	})

	t.Run("no leader for good: stop", func(t *testing.T) {
		slept = nil
		fake := newFakeJournal()
		fake.transient["node-000003"] = 100
		addr := startJournal(t, p, fake)
		code, stdout, stderr := runEnv(t, p, runOpts{stdin: strings.NewReader(file), sleep: sleep}, append([]string{"node", "enroll", "--batch", "-"}, p.flags(addr)...)...)
		if code != ExitUnavailable {
			t.Errorf("exit %d", code)
		}
		for _, w := range []string{"the journal answered NO_LEADER for line 5 5 times in a row (election in progress)", "majority of the quorum",
			"stopped at line 5; the last line processed is 4", "re-running the same file is safe"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if !strings.HasSuffix(stdout, "line 4: node-000002: ok\n3 rows: 3 ok, 0 exists, 0 errors (stopped: the last line processed is 4)\n") {
			t.Errorf("stdout %s", stdout)
		}
	})

	t.Run("a rate-limited call waits as told", func(t *testing.T) {
		slept = nil
		fake := newFakeJournal()
		fake.onChunk = func(_ context.Context, n int) error {
			if n == 0 {
				return apierr.Status(apierr.RateLimited, 3*time.Second, "busy").Err()
			}
			return nil
		}
		addr := startJournal(t, p, fake)
		code, _, stderr := runEnv(t, p, runOpts{stdin: strings.NewReader(file), sleep: sleep}, append([]string{"node", "enroll", "--batch", "-"}, p.flags(addr)...)...)
		if code != ExitOK || !slices.Equal(slept, []time.Duration{3*time.Second + 750*time.Millisecond}) || !slices.Equal(fake.chunkSizes(), []int{5, 5}) {
			t.Errorf("exit %d, slept %v, chunks %v: %s", code, slept, fake.chunkSizes(), stderr)
		}
	})
}

// malformedClient answers RegisterNodes with too few results.
type malformedClient struct{ pactv1.AdminServiceClient }

func (malformedClient) RegisterNodes(context.Context, *pactv1.RegisterNodesRequest, ...grpc.CallOption) (*pactv1.RegisterNodesResponse, error) {
	return &pactv1.RegisterNodesResponse{Results: []*pactv1.RegisterNodeResult{{Outcome: pactv1.RegisterOutcome_REGISTER_OUTCOME_OK}}}, nil
}

func TestEnrollBatchJournalFault(t *testing.T) {
	clearEnv(t)
	p := newTestPKI(t)
	var out, errb bytes.Buffer
	a := &app{env: Env{Stdin: strings.NewReader(batchFile(3)), Stdout: &out, Stderr: &errb}.withDefaults()}
	a.newClient = func(Config, *credential) (pactv1.AdminServiceClient, io.Closer, error) {
		return malformedClient{}, nil, nil
	}
	code := a.run(context.Background(), append([]string{"node", "enroll", "--batch", "-"}, p.flags("127.0.0.1:1")...))
	if code != ExitInternal || !strings.Contains(errb.String(), "the journal answered 1 results for 3 rows; this is a journal fault") {
		t.Errorf("exit %d stderr %s", code, errb.String())
	}
}

func TestEnrollBatchFileErrors(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	alice := l.alice(t)
	dir := t.TempDir()
	rec := &recorder{}

	code, _, stderr := runLive(t, l, alice, runOpts{rec: rec}, "node", "enroll", "--batch", dir+"/missing.csv")
	if code != ExitUsage || !strings.Contains(stderr, "--batch: open "+dir+"/missing.csv: no such file or directory") {
		t.Errorf("missing file: exit %d stderr %s", code, stderr)
	}
	code, _, stderr = runLive(t, l, alice, runOpts{rec: rec}, "node", "enroll", "--batch", "")
	if code != ExitUsage || !strings.Contains(stderr, "--batch needs a FILE, or - for stdin") {
		t.Errorf("empty --batch: exit %d stderr %s", code, stderr)
	}
	code, _, stderr = runLive(t, l, alice, runOpts{rec: rec}, "node", "enroll", "--batch", dir)
	if code != ExitUsage || !strings.Contains(stderr, "is a directory") {
		t.Errorf("directory: exit %d stderr %s", code, stderr)
	}
	if calls := rec.callCount(); calls != 0 {
		t.Errorf("%d calls for files that cannot be read, want none", calls)
	}

	// A fatal problem mid-file: the rows before it are registered.
	suffix, mac := l.fresh()
	in := liveBatchFile(2, suffix, mac) + "node-x,\"" + strings.Repeat("x", maxRecordBytes+10)
	code, stdout, stderr := runLive(t, l, alice, runOpts{rec: rec, stdin: strings.NewReader(in)}, "node", "enroll", "--batch", "-")
	if code != ExitUsage || !strings.Contains(stderr, "--batch stdin: line 4: a record longer than 64 KiB") ||
		!strings.Contains(stderr, "stopped after line 3, the last line processed") || !strings.Contains(stdout, "2 rows: 2 ok, 0 exists, 0 errors (stopped") {
		t.Errorf("exit %d stdout %q stderr %s", code, stdout, stderr)
	}
	if calls := rec.callCount(); calls != 1 {
		t.Errorf("%d calls, want 1", calls)
	}
	for _, n := range []string{"node-000000" + suffix, "node-000001" + suffix} {
		if !l.exists(t, n) {
			t.Errorf("%s, before the fatal line, is not registered", n)
		}
	}
}

// TestBatchDocumented keeps docs/batch.md in step with the reader.
func TestBatchDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/batch.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, w := range append(append([]string{}, batchColumns...), string(ReasonInvalidRow), string(ReasonDuplicateInFile), batchExampleHeader,
		fmt.Sprintf("chunks of at most %d", batchChunk), fmt.Sprintf("%d KiB", maxRecordBytes>>10),
		fmt.Sprintf("%d ms", progressEvery.Milliseconds()), fmt.Sprintf("At most %d attempts", batchAttempts),
		fmt.Sprintf("about %d-%d ms the first time", batchBackoff.Milliseconds()/2, batchBackoff.Milliseconds()*3/2),
		fmt.Sprintf("up to %d s", batchMaxBackoff/time.Second), "`"+macSeparator+"`") {
		if !strings.Contains(doc, w) {
			t.Errorf("docs/batch.md does not mention %q", w)
		}
	}
	for _, c := range formulaLeaders {
		name := map[rune]string{'\t': "a tab", '\r': "a carriage return"}[c]
		if name == "" {
			name = "`" + string(c) + "`"
		}
		if !strings.Contains(doc, name) {
			t.Errorf("docs/batch.md does not list the formula character %s", name)
		}
	}
}

func TestBatchExitSeverity(t *testing.T) {
	tests := []struct {
		reasons []string
		want    int
	}{
		{nil, ExitOK},
		{[]string{string(apierr.HardwareIdentityConflict), string(apierr.NodeAlreadyEnrolled)}, ExitConflict},
		{[]string{string(apierr.HardwareIdentityConflict), string(ReasonDuplicateInFile)}, ExitUsage},
		{[]string{string(ReasonInvalidRow), string(apierr.InvalidArgument)}, ExitUsage},
		{[]string{string(ReasonInvalidRow), string(apierr.NodeRevoked)}, ExitDenied},
		{[]string{string(apierr.RateLimited), string(apierr.HardwareIdentityConflict)}, ExitRateLimited},
		{[]string{string(apierr.NodeRevoked), ""}, ExitInternal},
		{[]string{"SOMETHING_NEW"}, ExitInternal},
	}
	for _, tt := range tests {
		got := ExitOK
		for _, r := range tt.reasons {
			got = worseExit(got, rowExit(r))
		}
		if got != tt.want {
			t.Errorf("%v: exit %d, want %d", tt.reasons, got, tt.want)
		}
	}
	// Every exit code has a rank, so none can be lost in a batch.
	for _, c := range []int{ExitOK, ExitInternal, ExitUsage, ExitNotFound, ExitConflict, ExitDenied, ExitPrecondition, ExitUnavailable, ExitRateLimited} {
		if _, ok := severity[c]; !ok {
			t.Errorf("exit code %d has no severity", c)
		}
	}
}

// FuzzBatchCSV: whatever the bytes, the reader never panics, every
// accepted row is valid and normalised, no two accepted rows share an
// identifier, and line numbers strictly increase.
func FuzzBatchCSV(f *testing.F) {
	f.Add([]byte(batchFile(3)))
	f.Fuzz(func(t *testing.T, data []byte) {
		last := 0
		nodes, macs, bmcs := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for row, err := range ReadBatchIn(bytes.NewReader(data), "") {
			if err != nil {
				if !errors.Is(err, ErrBatchFile) {
					t.Fatalf("a fatal error that is not ErrBatchFile: %v", err)
				}
				break
			}
			if row.Line <= last {
				t.Fatalf("line %d after line %d", row.Line, last)
			}
			last = row.Line
			if row.Err != nil {
				if (row.Err.Reason != ReasonInvalidRow && row.Err.Reason != ReasonDuplicateInFile) || len(row.Err.Problems) == 0 {
					t.Fatalf("line %d: row error %+v", row.Line, row.Err)
				}
				continue
			}
			if err := pki.ValidateName("node", row.NodeID); err != nil {
				t.Fatalf("line %d: accepted %v", row.Line, err)
			}
			if row.VCluster != "" && pki.ValidateName("vcluster", row.VCluster) != nil {
				t.Fatalf("line %d: accepted vcluster %q", row.Line, row.VCluster)
			}
			if len(row.Hardware.MACs) == 0 || !slices.IsSorted(row.Hardware.MACs) {
				t.Fatalf("line %d: MACs %q", row.Line, row.Hardware.MACs)
			}
			for i, m := range row.Hardware.MACs {
				if n, err := hwid.NormalizeMAC(m); err != nil || n != m || (i > 0 && row.Hardware.MACs[i-1] == m) {
					t.Fatalf("line %d: MAC %q not normalised or repeated", row.Line, m)
				}
				if macs[m] {
					t.Fatalf("line %d: MAC %s accepted twice", row.Line, m)
				}
				macs[m] = true
			}
			if _, err := hwid.Normalize(row.Hardware.MACs, row.Hardware.BMCSerial, row.Hardware.EKHash); err != nil {
				t.Fatalf("line %d: accepted hardware %v", row.Line, err)
			}
			if nodes[row.NodeID] || (row.Hardware.BMCSerial != "" && bmcs[row.Hardware.BMCSerial]) {
				t.Fatalf("line %d: node or BMC serial accepted twice", row.Line)
			}
			nodes[row.NodeID], bmcs[row.Hardware.BMCSerial] = true, row.Hardware.BMCSerial != ""
			for _, c := range []string{row.NodeID, row.Hardware.BMCSerial, row.VCluster} {
				if c != "" && strings.IndexByte(formulaLeaders, c[0]) >= 0 {
					t.Fatalf("line %d: accepted a formula %q", row.Line, c)
				}
			}
		}
	})
}

// BenchmarkBatchParse measures the CSV reader alone, in rows per second.
func BenchmarkBatchParse(b *testing.B) {
	const rows = 10_000
	data := []byte(batchFile(rows))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for row, err := range ReadBatchIn(bytes.NewReader(data), "") {
			if err != nil || row.Err != nil {
				b.Fatal(err, row.Err)
			}
			n++
		}
		if n != rows {
			b.Fatalf("%d rows", n)
		}
	}
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

func TestReadBatchRequireToken(t *testing.T) {
	rows, err := readAll(t, "node_id,mac,require_token\n"+
		"n1,52:54:00:00:00:01,yes\n"+
		"n2,52:54:00:00:00:02,\n"+
		"n3,52:54:00:00:00:03,FALSE\n"+
		"n4,52:54:00:00:00:04,1\n"+
		"n5,52:54:00:00:00:05,maybe\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, true}
	for i, w := range want {
		if rows[i].Err != nil || rows[i].RequireToken != w {
			t.Errorf("row %d: require %v err %v, want %v", i+2, rows[i].RequireToken, rows[i].Err, w)
		}
	}
	if e := rows[4].Err; e == nil || e.Reason != ReasonInvalidRow || !strings.Contains(e.Error(), "require_token") {
		t.Errorf("row 6: %v, want INVALID_ROW naming require_token", e)
	}
}

// A cell refused as a spreadsheet formula is one problem: its column is
// not also reported empty.
func TestFormulaCellIsNotAlsoEmpty(t *testing.T) {
	rows, err := readAll(t, "node_id,mac,bmc_serial,tpm_ek_hash,vcluster\n=cmd,@mac,,,\n,,,,v1\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Err == nil || rows[1].Err == nil {
		t.Fatalf("rows %+v, want two rejected rows", rows)
	}
	got := rows[0].Err.Problems
	if len(got) != 2 || !strings.Contains(got[0], `node_id "=cmd" looks like a spreadsheet formula`) || !strings.Contains(got[1], `mac "@mac" looks like a spreadsheet formula`) {
		t.Errorf("problems %q, want the two formula cells alone", got)
	}
	// Empty cells that are no formulas are reported empty.
	got = rows[1].Err.Problems
	if len(got) != 2 || !strings.HasPrefix(got[0], "node_id is empty") || !strings.HasPrefix(got[1], "mac is empty") {
		t.Errorf("problems %q, want node_id and mac empty", got)
	}
}
