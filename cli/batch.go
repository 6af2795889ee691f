package cli

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/pact-hpc/pact/internal/hwid"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/tpmattest"
)

// The batch file format is specified in docs/batch.md; keep the two in step.

// Batch CSV column names, in the order the documentation lists them.
const (
	colNodeID   = "node_id"
	colMAC      = "mac"
	colBMC      = "bmc_serial"
	colEKHash   = "tpm_ek_hash"
	colVCluster = "vcluster"
	colSPIFFEID = "spiffe_id"
	colEKCert   = "tpm_ek_cert"
	// colRequireToken: yes/true/1 makes the node enroll only with a join
	// token (pact node token create); empty, no, false or 0 does not.
	colRequireToken = "require_token"
)

var batchColumns = []string{colNodeID, colMAC, colBMC, colEKHash, colVCluster, colSPIFFEID, colRequireToken, colEKCert}

// batchExampleHeader is the header the messages suggest: the usual columns
// (spiffe_id matters to SPIRE sites only).
var batchExampleHeader = strings.Join(batchColumns[:5], ",")

// RowReason is why the CLI itself rejected a row. Its reasons are never
// sent to the journal, so they never clash with a journal's reasons
// (apierr.Reason); a BatchResult's reason is one or the other.
type RowReason string

// Reasons of rows rejected by the CLI itself.
const (
	// ReasonInvalidRow: the row is malformed (CSV syntax, cell count,
	// spreadsheet formula) or holds an invalid value.
	ReasonInvalidRow RowReason = "INVALID_ROW"
	// ReasonDuplicateInFile: the row repeats a node id, MAC, BMC serial or
	// TPM EK hash of an earlier row of the same file.
	ReasonDuplicateInFile RowReason = "DUPLICATE_IN_FILE"
)

// macSeparator separates several MACs in one mac cell.
const macSeparator = ";"

// maxRecordBytes bounds one CSV record. A valid row is far smaller (64 MACs
// are about 1.2 KiB); the bound stops an unclosed quote from pulling the
// rest of a large file into memory as one cell.
const maxRecordBytes = 64 << 10

// formulaLeaders are the first characters that make a spreadsheet treat a
// cell as a formula (CSV injection). No valid value starts with one.
const formulaLeaders = "=+-@\t\r"

// BatchRow is one data row of a batch file: either validated and ready to
// register (Err nil), or rejected locally with the reason (Err set); a
// rejected row is never sent.
type BatchRow struct {
	// Line is the file line the row starts on (1 is the header).
	Line int
	// NodeID is the node_id cell, trimmed, when it is a valid node name;
	// otherwise empty (the row's error quotes the cell).
	NodeID string
	// Hardware is normalised: MACs lower-case colon form, sorted, unique.
	Hardware hwid.Identity
	VCluster string
	// SPIFFEID is the spiffe_id cell: the SPIFFE ID the node's SPIRE SVIDs
	// carry, empty for the default spiffe://{trust-domain}/pact-agent/NODE.
	SPIFFEID string
	// RequireToken is the require_token cell: the node enrolls only with
	// a join token.
	RequireToken bool
	Err          *RowError
}

// RowError is why a row was rejected locally: every problem of the row.
type RowError struct {
	Reason   RowReason
	Problems []string
}

func (e *RowError) Error() string { return strings.Join(e.Problems, "; ") }

// ErrBatchFile marks a problem that makes the rest of a batch file
// unreadable: no or a bad header, a record over the size bound, a file that
// is not UTF-8 text. Read errors of the underlying reader are passed through
// unchanged.
var ErrBatchFile = errors.New("batch file")

// BatchFileError is a fatal problem at a line of a batch file.
type BatchFileError struct {
	Line int // 0 when the file is empty
	Msg  string
}

func (e *BatchFileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Is makes errors.Is(err, ErrBatchFile) true.
func (e *BatchFileError) Is(target error) bool { return target == ErrBatchFile }

// ReadBatchIn reads a batch CSV from r one record at a time and yields
// every data row in file order, validated or with its per-row error. Blank rows
// (empty, or every cell empty) are skipped silently, as is a UTF-8 byte
// order mark at the start. A problem that leaves the rest of the file
// unreadable is yielded once as the error (a *BatchFileError, or the
// reader's own error), and the sequence ends.
//
// Memory is bounded by one record plus, for the duplicate checks, the
// identifiers seen so far (a few dozen bytes per row), never by the size of
// the file. A relative path in the tpm_ek_cert column is read from dir
// ("" is the current directory).
func ReadBatchIn(r io.Reader, dir string) iter.Seq2[BatchRow, error] {
	return func(yield func(BatchRow, error) bool) {
		br, err := newBatchReader(r)
		if br != nil {
			br.dir = dir
		}
		if err != nil {
			yield(BatchRow{}, err)
			return
		}
		for {
			row, err := br.next()
			if err == io.EOF {
				return
			}
			if !yield(row, err) || err != nil {
				return
			}
		}
	}
}

// firstSeen is where an identifier first appeared in the file.
type firstSeen struct {
	line int
	node string
}

type batchReader struct {
	csv     *csv.Reader
	limit   *recordLimiter
	col     map[string]int // column name -> index
	ncols   int
	nodes   map[string]firstSeen
	macs    map[string]firstSeen
	bmcs    map[string]firstSeen
	ekHashs map[string]firstSeen
	spiffes map[string]firstSeen
	dir     string // where relative tpm_ek_cert paths are
}

func newBatchReader(r io.Reader) (*batchReader, error) {
	buf := bufio.NewReader(r)
	head, err := buf.Peek(3)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return nil, err
	}
	switch {
	case bytes.HasPrefix(head, []byte("\xef\xbb\xbf")):
		_, _ = buf.Discard(3) // a UTF-8 BOM, as spreadsheets write: fine
	case bytes.HasPrefix(head, []byte("\xff\xfe")), bytes.HasPrefix(head, []byte("\xfe\xff")):
		return nil, &BatchFileError{Line: 1, Msg: "the file is UTF-16 text; save it as \"CSV UTF-8\" (or CSV) and retry"}
	}
	lim := &recordLimiter{r: buf}
	c := csv.NewReader(lim)
	c.FieldsPerRecord = -1 // a wrong cell count is a per-row error, not the end
	c.ReuseRecord = true
	br := &batchReader{
		csv:     c,
		limit:   lim,
		nodes:   map[string]firstSeen{},
		macs:    map[string]firstSeen{},
		bmcs:    map[string]firstSeen{},
		ekHashs: map[string]firstSeen{},
		spiffes: map[string]firstSeen{},
	}
	if err := br.readHeader(); err != nil {
		return nil, err
	}
	return br, nil
}

func (br *batchReader) readHeader() error {
	for {
		rec, err := br.csv.Read()
		br.limit.mark(br.csv.InputOffset())
		if err == io.EOF {
			return &BatchFileError{Msg: "the file is empty: it needs a header line naming the columns, e.g. " + batchExampleHeader}
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return &BatchFileError{Line: pe.StartLine, Msg: "the header is not valid CSV: " + pe.Err.Error()}
		}
		if err != nil {
			return br.readError(err, 1)
		}
		if blank(rec) {
			continue
		}
		line, _ := br.csv.FieldPos(0)
		return br.parseHeader(rec, line)
	}
}

func (br *batchReader) parseHeader(rec []string, line int) error {
	br.col = make(map[string]int, len(rec))
	br.ncols = len(rec)
	var problems []string
	known := 0
	for i, raw := range rec {
		name := strings.ToLower(strings.TrimSpace(raw))
		switch {
		case name == "":
			problems = append(problems, fmt.Sprintf("column %d has no name (a trailing comma?)", i+1))
		case !isBatchColumn(name):
			problems = append(problems, fmt.Sprintf("unknown column %s", quoteCell(raw)))
		default:
			known++
			if _, dup := br.col[name]; dup {
				problems = append(problems, fmt.Sprintf("column %s appears twice", name))
			}
			br.col[name] = i
		}
	}
	if known == 0 {
		return &BatchFileError{Line: line, Msg: fmt.Sprintf("not a header (%s is not a column name): the first line must name the columns, e.g. %s", quoteCell(rec[0]), batchExampleHeader)}
	}
	for _, need := range []string{colNodeID, colMAC} {
		if _, ok := br.col[need]; !ok {
			problems = append(problems, "column "+need+" is missing")
		}
	}
	if len(problems) > 0 {
		return &BatchFileError{Line: line, Msg: "bad header: " + strings.Join(problems, "; ") + "; the columns are " + strings.Join(batchColumns, ", ") + " (node_id and mac required, any order)"}
	}
	return nil
}

func isBatchColumn(name string) bool {
	for _, c := range batchColumns {
		if c == name {
			return true
		}
	}
	return false
}

// next returns the next non-blank data row, io.EOF at the end, or a fatal
// error.
func (br *batchReader) next() (BatchRow, error) {
	for {
		rec, err := br.csv.Read()
		br.limit.mark(br.csv.InputOffset())
		if err == io.EOF {
			return BatchRow{}, io.EOF
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return BatchRow{Line: pe.StartLine, Err: &RowError{Reason: ReasonInvalidRow, Problems: []string{
				fmt.Sprintf("malformed CSV at line %d, column %d: %v; put the whole cell in double quotes and double any quote inside it", pe.Line, pe.Column, pe.Err),
			}}}, nil
		}
		if err != nil {
			line, _ := br.csv.FieldPos(0)
			return BatchRow{}, br.readError(err, line)
		}
		if blank(rec) {
			continue
		}
		line, _ := br.csv.FieldPos(0)
		return br.row(rec, line), nil
	}
}

func (br *batchReader) readError(err error, line int) error {
	if errors.Is(err, errRecordTooLong) {
		return &BatchFileError{Line: line, Msg: fmt.Sprintf("a record longer than %d KiB: probably a quote that is never closed; check the quotes from this line on", maxRecordBytes>>10)}
	}
	return err
}

// row validates one record. Every problem of the row is reported at once.
func (br *batchReader) row(rec []string, line int) BatchRow {
	out := BatchRow{Line: line}
	if len(rec) != br.ncols {
		// Name the node if its cell is there and reads as one: the cells
		// are most often missing or extra at the end.
		if i := br.col[colNodeID]; i < len(rec) && pki.ValidateName("node", strings.TrimSpace(rec[i])) == nil {
			out.NodeID = strings.Clone(strings.TrimSpace(rec[i]))
		}
		out.Err = &RowError{Reason: ReasonInvalidRow, Problems: []string{
			fmt.Sprintf("%d cells, but the header has %d columns; quote a cell that contains a comma", len(rec), br.ncols),
		}}
		return out
	}
	var problems []string
	// formula holds the columns whose cell was refused as a spreadsheet
	// formula: their "is empty" problem would only repeat it.
	formula := map[string]bool{}
	cell := func(name string) string {
		i, ok := br.col[name]
		if !ok {
			return ""
		}
		raw := rec[i]
		if c := strings.TrimLeft(raw, " "); c != "" && strings.IndexByte(formulaLeaders, c[0]) >= 0 {
			problems = append(problems, fmt.Sprintf("%s %s looks like a spreadsheet formula; remove the leading character", name, quoteCell(raw)))
			formula[name] = true
			return ""
		}
		return strings.TrimSpace(raw)
	}
	node := cell(colNodeID)
	macCell := cell(colMAC)
	bmc := cell(colBMC)
	ek := cell(colEKHash)
	vcluster := cell(colVCluster)
	spiffeID := cell(colSPIFFEID)
	requireToken, tokErr := parseYesNo(cell(colRequireToken))
	if tokErr != nil {
		problems = append(problems, tokErr.Error())
	}
	if certPath := cell(colEKCert); certPath != "" {
		if !filepath.IsAbs(certPath) && br.dir != "" {
			certPath = filepath.Join(br.dir, certPath)
		}
		switch h, err := ekHashFromCert(certPath); {
		case err != nil:
			problems = append(problems, "tpm_ek_cert: "+err.Error())
		case ek != "" && !strings.EqualFold(ek, h):
			problems = append(problems, fmt.Sprintf("tpm_ek_hash %s is not the hash of the key in tpm_ek_cert (%s); give one of them", shorten(ek, 16), shorten(h, 16)))
		default:
			ek = h
		}
	}

	nodeOK := false
	switch {
	case node == "":
		if !formula[colNodeID] {
			problems = append(problems, "node_id is empty: every row needs one")
		}
	case pki.ValidateName("node", node) != nil:
		// The message quotes it; NodeID stays empty, so an invalid name
		// (an invisible or bidi character, say) is never printed raw.
		problems = append(problems, fmt.Sprintf("node_id %s is not a valid node name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", quoteCell(node)))
	default:
		nodeOK = true
		out.NodeID = strings.Clone(node)
	}

	var macs []string
	for _, m := range strings.Split(macCell, macSeparator) {
		if m = strings.TrimSpace(m); m != "" {
			macs = append(macs, m)
		}
	}
	hw, err := hwid.Normalize(macs, bmc, ek)
	err = errors.Join(err, hwid.CheckUnicast(hw.MACs))
	for _, e := range flatten(err) {
		switch {
		case errors.Is(e, hwid.ErrEmpty):
			if !formula[colMAC] {
				problems = append(problems, "mac is empty: give at least one MAC, e.g. 52:54:00:12:34:56 (several separated by ';')")
			}
		case errors.Is(e, hwid.ErrInvalidMAC) && strings.ContainsAny(macCell, ", \t"):
			problems = append(problems, plainMessage(e.Error())+"; separate several MACs in one cell with ';'")
		default:
			problems = append(problems, plainMessage(e.Error()))
		}
	}
	if vcluster != "" && pki.ValidateName("vcluster", vcluster) != nil {
		problems = append(problems, fmt.Sprintf("vcluster %s is not a valid vCluster name: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", quoteCell(vcluster)))
	}
	if spiffeID != "" && nodeOK {
		if err := validateSPIFFEID(out.NodeID, spiffeID); err != nil {
			problems = append(problems, err.Error())
		}
	}
	invalid := len(problems) > 0
	if err == nil {
		hw.BMCSerial = strings.Clone(hw.BMCSerial)
		hw.EKHash = strings.Clone(hw.EKHash)
		out.Hardware = hw
	}

	// Duplicates: the first row that names an identifier owns it, whether
	// or not that row is valid otherwise; later rows are rejected.
	owner := out.NodeID
	if nodeOK {
		problems = append(problems, br.claim(br.nodes, out.NodeID, line, owner, "node "+out.NodeID, "each node may appear once")...)
	}
	if err == nil {
		for _, m := range hw.MACs {
			problems = append(problems, br.claim(br.macs, m, line, owner, "MAC "+m, "a MAC belongs to one node")...)
		}
		if hw.BMCSerial != "" {
			problems = append(problems, br.claim(br.bmcs, hw.BMCSerial, line, owner, "BMC serial "+quoteCell(hw.BMCSerial), "a BMC serial belongs to one node")...)
		}
		if hw.EKHash != "" {
			problems = append(problems, br.claim(br.ekHashs, hw.EKHash, line, owner, "TPM EK hash "+shorten(hw.EKHash, 16), "an EK hash belongs to one node")...)
		}
	}
	if spiffeID != "" {
		problems = append(problems, br.claim(br.spiffes, spiffeID, line, owner, "SPIFFE ID "+quoteCell(spiffeID), "a SPIFFE ID belongs to one node")...)
	}
	if len(problems) > 0 {
		reason := ReasonDuplicateInFile
		if invalid {
			reason = ReasonInvalidRow
		}
		out.Err = &RowError{Reason: reason, Problems: problems}
		return out
	}
	out.VCluster = strings.Clone(vcluster)
	out.SPIFFEID = strings.Clone(spiffeID)
	out.RequireToken = requireToken
	return out
}

// parseYesNo reads a require_token cell.
func parseYesNo(c string) (bool, error) {
	switch strings.ToLower(c) {
	case "", "no", "false", "0":
		return false, nil
	case "yes", "true", "1":
		return true, nil
	}
	return false, fmt.Errorf("require_token %s is not yes or no (also true/false, 1/0, or empty for no)", quoteCell(c))
}

// claim records key for this line, or explains which earlier line has it.
func (br *batchReader) claim(seen map[string]firstSeen, key string, line int, node, what, rule string) []string {
	if first, ok := seen[key]; ok {
		of := ""
		if first.node != "" && !strings.HasPrefix(what, "node ") {
			of = " (node " + first.node + ")"
		}
		return []string{fmt.Sprintf("%s is already on line %d of this file%s; %s", what, first.line, of, rule)}
	}
	seen[key] = firstSeen{line: line, node: node}
	return nil
}

// blank reports whether every cell of a record is empty or spaces: an
// empty line, or a spreadsheet's row of commas.
func blank(rec []string) bool {
	for _, c := range rec {
		if strings.TrimSpace(c) != "" {
			return false
		}
	}
	return true
}

// quoteCell quotes a cell for a message: Go-escaped, so no control
// character reaches the terminal, and shortened.
func quoteCell(s string) string { return fmt.Sprintf("%q", shortCell(s)) }

func shortCell(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xc0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}

var errRecordTooLong = errors.New("record too long")

// recordLimiter fails a read once more than maxRecordBytes have been read
// past the end of the last record the CSV reader returned.
type recordLimiter struct {
	r      io.Reader
	read   int64
	marked int64
	err    error
}

func (l *recordLimiter) mark(offset int64) { l.marked = offset }

func (l *recordLimiter) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	if l.read-l.marked > maxRecordBytes {
		l.err = errRecordTooLong
		return 0, l.err
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
}

// validateSPIFFEID checks a SPIFFE ID override for node as the journal
// does: a canonical spiffe:// URI with a path, not another node's default
// ID (spiffe://{trust-domain}/pact-agent/{node}). The journal also checks
// that it is in the SPIRE trust domain it accepts.
func validateSPIFFEID(node, id string) error {
	sid, err := spiffeid.FromString(id)
	switch {
	case len(id) > 2048:
		return fmt.Errorf("spiffe_id %s is longer than 2048 bytes", quoteCell(id))
	case err != nil:
		return fmt.Errorf("spiffe_id %s is not a SPIFFE ID: want spiffe://TRUST-DOMAIN/PATH, lower-case trust domain (%v)", quoteCell(id), err)
	case sid.String() != id:
		return fmt.Errorf("spiffe_id %s is not in canonical form; write %s", quoteCell(id), sid)
	case sid.Path() == "":
		return fmt.Errorf("spiffe_id %s names a trust domain only; give a path, e.g. %s/pact-agent/%s", quoteCell(id), id, node)
	}
	if other, ok := strings.CutPrefix(sid.Path(), "/"+pki.KindAgent+"/"); ok && other != node {
		return fmt.Errorf("spiffe_id %s is the default SPIFFE ID of node %s, not of %s", quoteCell(id), shortCell(other), node)
	}
	return nil
}

// ekHashFromCert reads a TPM EK certificate file (PEM or DER) and returns
// the EK hash of its public key (docs/tpm.md). It reads at most
// tpmattest.MaxEKCert bytes, and only from a regular file.
func ekHashFromCert(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, tpmattest.MaxEKCert+1))
	if err != nil {
		return "", err
	}
	h, err := tpmattest.ParseEKCertificate(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}
