package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

// Record is one call of the workload: what was asked of which journal, when
// it was called and when it returned (nanoseconds since the run began),
// and what came back.
type Record struct {
	ID      int
	Client  int
	Journal string // the journal the call was sent to
	In      Input
	Out     Output
	Call    int64
	Return  int64
	// Err is the error message, if any.
	Err string
	// Issuer is the serial of the intermediate that signed the certificate
	// received (Enroll, RenewCert); CertProblem says what is wrong with it
	// (does not verify, not for the client's key ...), if anything.
	Issuer      string
	CertProblem string
	// Final marks the reads made after the run, once the quorum converged.
	Final bool
	// Probe marks a call made right after a leader loss to elicit a read
	// or a final refusal (Workload.Probe).
	Probe bool `json:",omitempty"`
}

func (r *Record) String() string {
	ret := fmt.Sprintf("%8.3fs", float64(r.Return)/1e9)
	if r.Out.Result == ResultUnknown {
		ret = fmt.Sprintf("%8.3fs?", float64(r.Return)/1e9)
	}
	s := fmt.Sprintf("#%-5d c%-2d %-3s [%8.3fs %s] %s %s", r.ID, r.Client, r.Journal, float64(r.Call)/1e9, ret, r.In.Node, DescribeOp(r.In, r.Out))
	if r.Probe {
		s += " (probe)"
	}
	if r.Out.Result != ResultOK && r.Err != "" {
		msg := r.Err
		if len(msg) > 140 {
			msg = msg[:140] + "..."
		}
		s += "  // " + msg
	}
	return s
}

// IsWrite reports whether the operation may change the registry.
func (r *Record) IsWrite() bool { return r.In.Kind != OpRead }

// History is the shared, append-only log of every call of a run.
type History struct {
	start time.Time
	mu    sync.Mutex
	recs  []*Record
}

// NewHistory starts a history; times are measured from now.
func NewHistory() *History { return &History{start: time.Now()} }

// Start is when the history began.
func (h *History) Start() time.Time { return h.start }

// Now is the time since the history began, in nanoseconds.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// At converts a wall-clock instant to history time.
func (h *History) At(t time.Time) int64 { return int64(t.Sub(h.start)) }

// Begin records a call that is about to be made.
func (h *History) Begin(client int, journal string, in Input) *Record {
	r := &Record{Client: client, Journal: journal, In: in}
	h.mu.Lock()
	r.ID = len(h.recs)
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	r.Call = h.Now()
	return r
}

// End records the answer of a call.
func (h *History) End(r *Record, out Output, err error) {
	now := h.Now()
	h.mu.Lock()
	r.Return = now
	r.Out = out
	if err != nil {
		r.Err = err.Error()
	}
	h.mu.Unlock()
}

// Records returns a snapshot of every finished call, by call time.
func (h *History) Records() []*Record {
	h.mu.Lock()
	out := make([]*Record, 0, len(h.recs))
	for _, r := range h.recs {
		if r.Out.Result != "" {
			out = append(out, r)
		}
	}
	h.mu.Unlock()
	sort.SliceStable(out, func(a, b int) bool { return out[a].Call < out[b].Call })
	return out
}

// ByNode groups records per node, each in call order.
func ByNode(recs []*Record) map[string][]*Record {
	out := map[string][]*Record{}
	for _, r := range recs {
		out[r.In.Node] = append(out[r.In.Node], r)
	}
	return out
}

// savedHistory is the first line of a history file.
type savedHistory struct {
	Settled int64 `json:"settled"`
}

// WriteHistory saves records as JSON lines (the first line says when the
// run settled), for Recheck.
func WriteHistory(path string, recs []*Record, settled int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	err = enc.Encode(savedHistory{Settled: settled})
	for _, r := range recs {
		if err == nil {
			err = enc.Encode(r)
		}
	}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadHistory loads a history saved by WriteHistory.
func ReadHistory(path string) ([]*Record, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReader(f))
	var head savedHistory
	if err := dec.Decode(&head); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	var recs []*Record
	for dec.More() {
		r := &Record{}
		if err := dec.Decode(r); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", path, err)
		}
		recs = append(recs, r)
	}
	sort.SliceStable(recs, func(a, b int) bool { return recs[a].Call < recs[b].Call })
	return recs, head.Settled, nil
}
