package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/backoff"
	"github.com/pact-hpc/pact/internal/transport"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

const (
	// batchChunk is the most rows (sent or rejected locally) held at once;
	// the journal accepts up to 1000 per RegisterNodes call.
	batchChunk = 500
	// batchAttempts bounds how often a chunk is sent while the journal
	// answers that it is overloaded or has no leader.
	batchAttempts = 5
	// batchBackoff and batchMaxBackoff bound the wait between attempts
	// (internal/backoff, the agents' policy: exponential with full jitter,
	// at least a retry-after the journal asks for).
	batchBackoff    = 250 * time.Millisecond
	batchMaxBackoff = 4 * time.Second
	// batchBusyRounds bounds how often a chunk waits out every journal's
	// busy answer (a boot storm saturating their handshakes). Such a wait
	// is the journal's own retry-after and does not use up batchAttempts:
	// nothing was refused.
	batchBusyRounds = 20
	// progressEvery is the least time between two progress lines.
	progressEvery = 200 * time.Millisecond
)

// Row results (Result).
const (
	resultOK     Result = "ok"
	resultExists Result = "exists"
	resultError  Result = "error"
)

// BatchResult is one row's outcome, printed as one JSON line by
// "pact node enroll --batch FILE -o json". Field names are a contract.
type BatchResult struct {
	Line    int    `json:"line"`
	NodeID  string `json:"node_id"`
	Result  Result `json:"result"` // ok, exists or error
	Reason  string `json:"reason"` // for error: a journal reason, INVALID_ROW or DUPLICATE_IN_FILE
	Message string `json:"message"`
}

// BatchSummary ends the output of a batch; as JSON it is the last line,
// {"summary": {...}}.
type BatchSummary struct {
	Rows   int `json:"rows"`
	OK     int `json:"ok"`
	Exists int `json:"exists"`
	Errors int `json:"errors"`
	// Complete is false when the run stopped before the end of the file.
	Complete bool `json:"complete"`
	// LastLine is the last line whose result was printed; 0 if none.
	LastLine int `json:"last_line"`
}

func (s BatchSummary) String() string {
	return fmt.Sprintf("%d %s: %d ok, %d exists, %d %s",
		s.Rows, plural(s.Rows, "row", "rows"), s.OK, s.Exists, s.Errors, plural(s.Errors, "error", "errors"))
}

// enrollBatch registers every row of a CSV file (docs/batch.md), streamed:
// rows are read, checked and sent in chunks, and each chunk's results are
// printed as they come back.
func (a *app) enrollBatch(cmd *cobra.Command, args []string, o enrollOptions) error {
	var problems []error
	if len(args) > 0 {
		problems = append(problems, fmt.Errorf("--batch reads every node from the file; drop the NODE argument %q", args[0]))
	}
	for _, f := range []struct{ flag, column string }{{"mac", colMAC}, {"bmc-serial", colBMC}, {"tpm-ek-hash", colEKHash}, {"tpm-ek-cert", colEKCert}, {"vcluster", colVCluster}, {"spiffe-id", colSPIFFEID}} {
		if cmd.Flags().Changed(f.flag) {
			problems = append(problems, fmt.Errorf("--%s cannot be combined with --batch: put it in the file's %s column", f.flag, f.column))
		}
	}
	name := o.batch
	var in io.Reader
	switch {
	case o.batch == "":
		problems = append(problems, errors.New("--batch needs a FILE, or - for stdin"))
	case o.batch == "-":
		name, in = "stdin", a.env.Stdin
	default:
		f, err := os.Open(o.batch)
		if err != nil {
			problems = append(problems, fmt.Errorf("--batch: %w", err))
			break
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			problems = append(problems, fmt.Errorf("--batch %s is a directory; name a CSV file, or - for stdin", o.batch))
		}
		in = f
	}
	s, err := a.connect(cmd, problems)
	if err != nil {
		return err
	}
	defer s.close()

	r := &batchRun{
		a:    a,
		s:    s,
		ctx:  cmd.Context(),
		cmd:  cmd.CommandPath(),
		name: name,
		out:  bufio.NewWriterSize(a.env.Stdout, 64<<10),
		dir:  batchDir(o.batch),
		json: s.cfg.Output == outputJSON,
		prog: &progress{
			w:          a.env.Stderr,
			now:        a.env.Now,
			enabled:    a.env.IsTerminal(a.env.Stderr),
			clearFirst: a.env.IsTerminal(a.env.Stdout),
			last:       a.env.Now(),
		},
	}
	return r.run(in)
}

// pendingRow is a row read but not yet printed.
type pendingRow struct {
	line int
	req  *pactv1.RegisterNodeRequest // nil when rejected locally
	res  BatchResult
	done bool
}

// batchRun is one run of a batch file.
type batchRun struct {
	a    *app
	s    *session
	ctx  context.Context
	cmd  string
	name string
	// dir is where relative tpm_ek_cert paths of the file are read from.
	dir  string
	out  *bufio.Writer
	json bool
	prog *progress

	pending []pendingRow
	sum     BatchSummary
	exit    int
	failed  []int
}

func (r *batchRun) run(in io.Reader) error {
	var fatal error
	started := false
	for row, err := range ReadBatchIn(in, r.dir) {
		if err != nil {
			fatal = err
			break
		}
		started = true
		r.add(row)
		if len(r.pending) >= batchChunk {
			if err := r.flush(); err != nil {
				return r.stop(err)
			}
		}
	}
	if fatal != nil && !started {
		// Nothing was read, nothing sent: a plain usage or read error.
		if errors.Is(fatal, ErrBatchFile) {
			return &UsageError{Command: r.cmd, Problems: []error{fmt.Errorf("--batch %s: %w", r.name, fatal)}}
		}
		return fmt.Errorf("reading --batch %s: %w", r.name, fatal)
	}
	if err := r.flush(); err != nil {
		return r.stop(err)
	}
	if fatal != nil {
		if errors.Is(fatal, ErrBatchFile) {
			fatal = &UsageError{Problems: []error{fmt.Errorf("--batch %s: %w", r.name, fatal)}}
		} else {
			fatal = fmt.Errorf("reading --batch %s: %w", r.name, fatal)
		}
		return r.stop(fatal)
	}
	r.sum.Complete = true
	if err := r.finish(); err != nil {
		return err
	}
	if r.sum.Rows == 0 {
		fmt.Fprintf(r.a.env.Stderr, "--batch %s has a header but no rows: nothing to register\n", r.name)
	}
	if r.sum.Errors > 0 {
		return &BatchError{Rows: r.sum.Rows, Failed: r.sum.Errors, Lines: r.failed, Code: r.exit}
	}
	return nil
}

func (r *batchRun) add(row BatchRow) {
	p := pendingRow{line: row.Line, res: BatchResult{Line: row.Line, NodeID: row.NodeID}}
	if row.Err != nil {
		p.res.Result, p.res.Reason, p.res.Message = resultError, string(row.Err.Reason), row.Err.Error()
		p.done = true
	} else {
		hw := row.Hardware
		p.req = &pactv1.RegisterNodeRequest{
			NodeId:   row.NodeID,
			Hardware: &pactv1.HardwareIdentity{Macs: hw.MACs, BmcSerial: hw.BMCSerial, TpmEkHash: hw.EKHash},
			Vcluster: row.VCluster,
			SpiffeId: row.SPIFFEID,
		}
		if row.RequireToken {
			p.req.Credentials = &pactv1.CredentialPolicy{RequireJoinToken: true}
		}
	}
	r.pending = append(r.pending, p)
}

// flush sends the pending rows and prints every result that is final, in
// file order. On an error the rows up to the first unresolved one are
// printed and the rest stay pending.
func (r *batchRun) flush() error {
	if len(r.pending) == 0 {
		return nil
	}
	err := r.ctx.Err()
	if err == nil {
		err = r.send()
	}
	n := 0
	for n < len(r.pending) && r.pending[n].done {
		n++
	}
	if werr := r.emit(r.pending[:n]); werr != nil && err == nil {
		err = werr
	}
	r.pending = append(r.pending[:0], r.pending[n:]...)
	return err
}

// send registers the pending rows that passed the local checks. Rows the
// journal could not decide for a passing reason (no leader, overloaded) are
// sent again, alone: re-sending is safe, and a row that did get registered
// answers "exists".
func (r *batchRun) send() error {
	var todo []int
	for i, p := range r.pending {
		if !p.done {
			todo = append(todo, i)
		}
	}
	policy := backoff.Policy{Min: batchBackoff, Max: batchMaxBackoff, Rand: r.a.env.Jitter}
	busyRounds := 0
	for attempt := 1; len(todo) > 0; attempt++ {
		reqs := make([]*pactv1.RegisterNodeRequest, len(todo))
		for k, i := range todo {
			reqs[k] = r.pending[i].req
		}
		resp, err := r.s.client.RegisterNodes(r.ctx, &pactv1.RegisterNodesRequest{Nodes: reqs})
		if err != nil {
			var unreachable *UnreachableError
			if errors.As(err, &unreachable) && unreachable.Busy() != nil && busyRounds < batchBusyRounds {
				// Back at the time the journal named, plus a little
				// jitter; the backoff does not grow.
				busyRounds++
				attempt--
				ra := min(unreachable.Busy().RetryAfter, transport.MaxBusyRetryAfter)
				draw := backoff.Jitter(r.a.env.Jitter)
				if err := r.a.env.Sleep(r.ctx, ra+draw.Draw(max(ra/20, 20*time.Millisecond))); err != nil {
					return err
				}
				if rd, ok := r.s.closer.(interface{ RedialBusy() error }); ok {
					if err := rd.RedialBusy(); err != nil {
						return err
					}
				}
				continue
			}
			e := apierr.FromError(err)
			if e.Code != codes.ResourceExhausted || attempt >= batchAttempts {
				return err
			}
			if err := r.a.env.Sleep(r.ctx, policy.Delay(attempt-1, e.RetryAfter)); err != nil {
				return err
			}
			continue
		}
		results := resp.GetResults()
		if len(results) != len(todo) {
			return journalFault(fmt.Sprintf("the journal answered %d results for %d rows", len(results), len(todo)))
		}
		var again []int
		var transient *apierr.Error
		for k, i := range todo {
			res, p := results[k], &r.pending[i]
			if id := res.GetNodeId(); id != "" && id != p.req.GetNodeId() {
				return journalFault(fmt.Sprintf("the journal answered for node %q where line %d holds %s", id, p.line, p.req.GetNodeId()))
			}
			switch res.GetOutcome() {
			case pactv1.RegisterOutcome_REGISTER_OUTCOME_OK:
				p.res.Result = resultOK
			case pactv1.RegisterOutcome_REGISTER_OUTCOME_EXISTS:
				p.res.Result = resultExists
			case pactv1.RegisterOutcome_REGISTER_OUTCOME_ERROR:
				reason := apierr.Reason(res.GetReason())
				if c := reason.Code(); c == codes.Unavailable || c == codes.ResourceExhausted {
					again = append(again, i)
					if transient == nil {
						transient = &apierr.Error{Code: c, Reason: reason, Message: res.GetMessage()}
					}
					continue
				}
				p.res.Result, p.res.Reason, p.res.Message = resultError, res.GetReason(), plainMessage(res.GetMessage())
			default:
				p.res.Result, p.res.Message = resultError, "the journal gave no outcome for this row; check it with: pact node inspect "+p.req.GetNodeId()
			}
			p.done = true
		}
		todo = again
		if len(todo) == 0 {
			break
		}
		if attempt >= batchAttempts {
			return &transientError{line: r.pending[todo[0]].line, attempts: attempt, err: transient}
		}
		if err := r.a.env.Sleep(r.ctx, policy.Delay(attempt-1, transient.RetryAfter)); err != nil {
			return err
		}
	}
	return nil
}

// transientError: the journal kept answering NO_LEADER or RATE_LIMITED for
// a row.
type transientError struct {
	line     int
	attempts int
	err      *apierr.Error
}

func (e *transientError) Error() string {
	return fmt.Sprintf("the journal answered %s for line %d %d times in a row (%s)", e.err.Reason, e.line, e.attempts, e.err.Message)
}
func (e *transientError) Unwrap() error { return e.err }

func journalFault(msg string) error {
	msg += "; this is a journal fault: check the journal's log"
	return &hintError{msg: msg, err: &apierr.Error{Code: codes.Internal, Message: msg}}
}

// emit prints rows' results and counts them.
func (r *batchRun) emit(rows []pendingRow) error {
	if len(rows) == 0 {
		return nil
	}
	if r.prog.clearFirst {
		r.prog.clear()
	}
	for _, p := range rows {
		res := p.res
		r.sum.Rows++
		r.sum.LastLine = p.line
		switch res.Result {
		case resultOK:
			r.sum.OK++
		case resultExists:
			r.sum.Exists++
		default:
			r.sum.Errors++
			r.exit = worseExit(r.exit, rowExit(res.Reason))
			if len(r.failed) < maxFailedLines {
				r.failed = append(r.failed, p.line)
			}
		}
		if r.json {
			_ = writeJSONLine(r.out, res)
			continue
		}
		r.out.WriteString(resultText(res))
	}
	if err := r.out.Flush(); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	r.prog.update(r.sum)
	return nil
}

func resultText(res BatchResult) string {
	node := none
	if res.NodeID != "" {
		node = printable(res.NodeID)
	}
	switch {
	case res.Result != resultError:
		return fmt.Sprintf("line %d: %s: %s\n", res.Line, node, res.Result)
	case res.Reason != "":
		return fmt.Sprintf("line %d: %s: error %s: %s\n", res.Line, node, res.Reason, printable(res.Message))
	}
	return fmt.Sprintf("line %d: %s: error: %s\n", res.Line, node, printable(res.Message))
}

// finish clears the progress line and prints the summary.
func (r *batchRun) finish() error {
	r.prog.clear()
	if r.json {
		_ = writeJSONLine(r.out, struct {
			Summary BatchSummary `json:"summary"`
		}{r.sum})
	} else {
		line := r.sum.String()
		if !r.sum.Complete {
			line += fmt.Sprintf(" (stopped: the last line processed is %d)", r.sum.LastLine)
		}
		r.out.WriteString(line + "\n")
	}
	if err := r.out.Flush(); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	return nil
}

// stop ends a run that cannot go on: it prints what was done and explains
// the cause, the last line processed, and that re-running is safe.
func (r *batchRun) stop(cause error) error {
	at := 0
	if len(r.pending) > 0 {
		at = r.pending[0].line
	}
	var msg string
	var usage *UsageError
	var transient *transientError
	switch {
	case errors.Is(cause, context.Canceled) || r.ctx.Err() != nil:
		msg = "interrupted"
		cause = &apierr.Error{Code: codes.Canceled, Message: "interrupted"}
	case errors.As(cause, &usage):
		msg = strings.TrimSuffix(usage.Error(), "\n")
	case errors.As(cause, &transient):
		msg = transient.Error()
		if transient.err.Code == codes.Unavailable {
			msg += "; a journal without a leader cannot register nodes: check that a majority of the quorum is up"
		} else {
			msg += "; the journal is overloaded: retry later"
		}
		at = transient.line
	default:
		var hint *hintError
		if errors.As(cause, &hint) {
			msg = hint.msg
		} else {
			msg = r.s.explain(action{
				verb:   "register nodes",
				help:   r.cmd,
				denied: "registering nodes needs a credential with role platform-admin",
			}, cause).Error()
		}
	}
	r.sum.Complete = false
	_ = r.finish()
	switch {
	case at > 0 && r.sum.LastLine > 0:
		msg += fmt.Sprintf("\nstopped at line %d; the last line processed is %d (%s)", at, r.sum.LastLine, r.sum)
	case at > 0:
		msg += fmt.Sprintf("\nstopped at line %d, before any row was processed", at)
	case r.sum.LastLine > 0:
		msg += fmt.Sprintf("\nstopped after line %d, the last line processed (%s)", r.sum.LastLine, r.sum)
	}
	msg += "\nre-running the same file is safe: rows already registered report \"exists\""
	return &hintError{msg: msg, err: cause}
}

// progress is the "\r12000 rows: ..." line a long batch shows on a
// terminal, at most every progressEvery.
type progress struct {
	w       io.Writer
	now     func() time.Time
	enabled bool
	// clearFirst: results go to the same terminal, so the progress line is
	// cleared before they are printed.
	clearFirst bool
	last       time.Time
	shown      int // width of the line on screen; 0 when none
}

func (p *progress) update(s BatchSummary) {
	if !p.enabled {
		return
	}
	now := p.now()
	if now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	line := s.String()
	pad := max(p.shown-len(line), 0)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
	p.shown = len(line)
}

func (p *progress) clear() {
	if p.shown == 0 {
		return
	}
	fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.shown))
	p.shown = 0
}

// batchDir is the directory relative tpm_ek_cert paths of a batch file are
// read from: the file's own, or the current one for stdin.
func batchDir(batch string) string {
	if batch == "-" || batch == "" {
		return ""
	}
	return filepath.Dir(batch)
}
