package journal

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/pact-hpc/pact/internal/logkey"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// auditExporter writes committed audit entries as JSON lines (for Loki and
// friends). It is fed from the FSM observer, which must never block: when
// the writer falls behind, entries are dropped from the export (they stay in
// the registry's audit ring and in `pact audit`) and counted.
type auditExporter struct {
	ch      chan []*pactv1.AuditEntry
	w       io.Writer
	closer  io.Closer
	after   uint64 // entries at or below this index were exported by an earlier run
	dropped atomic.Uint64
	log     *slog.Logger
	done    chan struct{}
}

// auditLine is the exported form of an entry.
type auditLine struct {
	Time          string `json:"time"`
	Index         uint64 `json:"index"`
	Action        string `json:"action"`
	NodeID        string `json:"node_id,omitempty"`
	Actor         string `json:"actor"`
	Via           string `json:"via,omitempty"`
	Source        string `json:"source,omitempty"`
	Serial        string `json:"serial,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
	Detail        string `json:"detail,omitempty"`
}

func newAuditExporter(path string, after uint64, log *slog.Logger) (*auditExporter, error) {
	e := &auditExporter{ch: make(chan []*pactv1.AuditEntry, 4096), after: after, log: log, done: make(chan struct{})}
	if path == "-" {
		e.w = os.Stdout
	} else {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return nil, fmt.Errorf("journal: audit log: %w", err)
		}
		e.w, e.closer = f, f
	}
	go e.run()
	return e, nil
}

func (e *auditExporter) offer(entries []*pactv1.AuditEntry) {
	select {
	case e.ch <- entries:
	default:
		if e.dropped.Add(uint64(len(entries))) == uint64(len(entries)) {
			e.log.Warn("audit export is falling behind; dropping entries from the export (they remain in pact audit)")
		}
	}
}

func (e *auditExporter) run() {
	defer close(e.done)
	bw := bufio.NewWriter(e.w)
	enc := json.NewEncoder(bw)
	for batch := range e.ch {
		for _, a := range batch {
			// Entries replayed from the log on restart were exported before.
			if a.GetIndex() <= e.after {
				continue
			}
			_ = enc.Encode(auditLine{
				Time:          time.Unix(0, a.GetAtUnixNano()).UTC().Format(time.RFC3339Nano),
				Index:         a.GetIndex(),
				Action:        a.GetAction(),
				NodeID:        a.GetNodeId(),
				Actor:         a.GetActor(),
				Via:           a.GetVia(),
				Source:        a.GetSource(),
				Serial:        a.GetSerial(),
				CorrelationID: a.GetCorrelationId(),
				Detail:        a.GetDetail(),
			})
		}
		if len(e.ch) == 0 {
			if err := bw.Flush(); err != nil {
				e.log.Error("writing the audit log failed", logkey.Err, err)
			}
		}
	}
	_ = bw.Flush()
}

func (e *auditExporter) close() {
	close(e.ch)
	<-e.done
	if e.closer != nil {
		_ = e.closer.Close()
	}
}
