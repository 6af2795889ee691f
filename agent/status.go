package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is what the agent tells an operator about its identity. It holds
// public facts only: no key material ever reaches it.
type Status struct {
	// Source of the identity the active channel presents: spire, journal
	// or static; empty without a channel.
	Source   string    `json:"source"`
	NodeID   string    `json:"node_id"`
	VCluster string    `json:"vcluster"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after,omitzero"`
	SPIFFEID string    `json:"spiffe_id"`
	// NextRenewal is when the journal-signed certificate will be renewed
	// (zero unless it is the active identity).
	NextRenewal time.Time `json:"next_renewal,omitzero"`
	// StandbySerial and StandbyNotAfter are the journal-signed standby the
	// agent holds while it streams on a SPIRE SVID (empty otherwise): what
	// it swaps to when SPIRE stops serving it.
	StandbySerial   string    `json:"standby_serial,omitempty"`
	StandbyNotAfter time.Time `json:"standby_not_after,omitzero"`
	// LastRotation is when the active channel went live.
	LastRotation      time.Time `json:"last_rotation,omitzero"`
	LastFailureReason string    `json:"last_failure_reason"`
	LastFailure       string    `json:"last_failure"`
	LastFailureOp     string    `json:"last_failure_op"`
	LastFailureAt     time.Time `json:"last_failure_at,omitzero"`
	StreamConnected   bool      `json:"stream_connected"`
	// ActiveInDomain names the federated domain that holds this node's
	// hardware Active, when its latest enrollment was refused for it
	// (active_in_another_domain): the agent waits and enrolls once that
	// domain's claim ends (docs/domains.md). Empty otherwise.
	ActiveInDomain string `json:"active_in_domain,omitempty"`
	// LastAttestation is the latest boot attestation a journal asked for
	// between renewals (docs/tpm.md, "Attestation between renewals"):
	// absent until one is asked.
	LastAttestation *AttestationStatus `json:"last_attestation,omitempty"`
	// Sources are the agent's identity sources, best first: what each
	// offers now, or why it offers nothing, and the last identity it gave
	// up, when and why.
	Sources []SourceStatus `json:"sources,omitempty"`
	// Journal is the address of the journal the channel is to, JournalID
	// its name.
	Journal   string `json:"journal"`
	JournalID string `json:"journal_id"`
	// Ready is what /readyz answers: an unexpired identity and an open
	// stream.
	Ready bool `json:"ready"`
	// Now is the agent's clock.
	Now time.Time `json:"now"`
}

// AttestationStatus is how a boot attestation between renewals ended:
// the journal's verdict (matches the boot policy or not), or why the
// agent could not answer.
type AttestationStatus struct {
	At        time.Time `json:"at"`
	JournalID string    `json:"journal_id"`
	Matches   bool      `json:"matches"`
	Error     string    `json:"error,omitempty"`
}

// handler serves /status (and, when metrics is true, /metrics), /healthz
// and /readyz.
func (a *Agent) handler(metrics bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Status())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if st := a.Status(); !st.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			reason := "no unexpired identity with an open stream"
			if st.LastFailureReason != "" {
				reason += "; last failure: " + st.LastFailureReason
			}
			_, _ = io.WriteString(w, reason+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	if metrics {
		mux.Handle("GET /metrics", promhttp.HandlerFor(a.metrics.registry(), promhttp.HandlerOpts{}))
	}
	return mux
}

// listenStatus opens the status socket: its directory is created if
// missing, a stale socket from an earlier run is replaced, and the socket is
// made 0600 (root-only) before it is given its final name, so no one else
// can ever connect.
func listenStatus(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	made := ""
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		made = dir // removed again on close, if empty: an agent run by hand leaves no /run/pact behind
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: --status-socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("agent: --status-socket %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("agent: --status-socket %s: another agent is serving it", path)
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", filepath.Base(path), os.Getpid()))
	_ = os.Remove(tmp)
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("agent: --status-socket: %w", err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		_ = lis.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("agent: --status-socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = lis.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("agent: --status-socket: %w", err)
	}
	return &removingListener{Listener: lis, path: path, dir: made}, nil
}

// removingListener removes the socket file when closed, and the directory
// listenStatus made for it if nothing else is in it.
type removingListener struct {
	net.Listener
	path string
	dir  string
}

func (l *removingListener) Close() error {
	err := l.Listener.Close()
	_ = os.Remove(l.path)
	if l.dir != "" {
		_ = os.Remove(l.dir) // fails, harmlessly, if not empty
	}
	return err
}

// serve runs an HTTP server on lis until the returned function stops it.
func serve(lis net.Listener, h http.Handler) func() {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = lis.Close()
		<-done
	}
}

// ReadStatus asks the agent serving the status socket at path.
func ReadStatus(ctx context.Context, path string) (Status, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://pact-agent/status", nil)
	if err != nil {
		return Status{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Status{}, fmt.Errorf("agent: no agent answers on %s (is pact-agent running, with this --status-socket, and are you root or its user?): %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("agent: %s answered %s", path, resp.Status)
	}
	var st Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return Status{}, fmt.Errorf("agent: unreadable status from %s: %w", path, err)
	}
	return st, nil
}

// PrintStatus writes st for a person (pact-agent status).
func PrintStatus(w io.Writer, st Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		d := t.Sub(st.Now).Round(time.Second)
		switch {
		case st.Now.IsZero():
			return t.UTC().Format(time.RFC3339)
		case d == 0:
			return fmt.Sprintf("%s (now)", t.UTC().Format(time.RFC3339))
		case d > 0:
			return fmt.Sprintf("%s (in %s)", t.UTC().Format(time.RFC3339), d)
		default:
			return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339), -d)
		}
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	ready := "no"
	if st.Ready {
		ready = "yes"
	}
	stream := "closed"
	if st.StreamConnected {
		stream = "open"
	}
	journal := dash(st.Journal)
	if st.JournalID != "" {
		journal += " (" + st.JournalID + ")"
	}
	row("ready:", ready)
	row("source:", dash(st.Source))
	row("node:", dash(st.NodeID))
	if st.NodeID != "" {
		row("vcluster:", vclusterLabel(st.VCluster))
	}
	row("spiffe id:", dash(st.SPIFFEID))
	row("serial:", dash(st.Serial))
	row("not after:", at(st.NotAfter))
	row("next renewal:", at(st.NextRenewal))
	if st.StandbySerial != "" {
		row("standby:", fmt.Sprintf("%s, not after %s", st.StandbySerial, at(st.StandbyNotAfter)))
	}
	row("last rotation:", at(st.LastRotation))
	row("stream:", stream)
	row("journal:", journal)
	if st.LastFailureReason == "" {
		row("last failure:", "-")
	} else {
		row("last failure:", fmt.Sprintf("%s during %s, %s", st.LastFailureReason, dash(st.LastFailureOp), at(st.LastFailureAt)))
		row("", st.LastFailure)
	}
	if st.ActiveInDomain != "" {
		row("waiting:", fmt.Sprintf("the hardware is active in domain %s: enrolls here once %s releases it", st.ActiveInDomain, st.ActiveInDomain))
	}
	if la := st.LastAttestation; la != nil {
		verdict := "matches the boot policy"
		switch {
		case la.Error != "":
			verdict = "not answered: " + la.Error
		case !la.Matches:
			verdict = "does NOT match the boot policy (pact boot-policy show)"
		}
		row("last attestation:", fmt.Sprintf("%s, asked by %s: %s", at(la.At), dash(la.JournalID), verdict))
	}
	for _, src := range st.Sources {
		now := "-"
		switch {
		case src.Serial != "":
			now = fmt.Sprintf("%s, not after %s", src.Serial, at(src.NotAfter))
		case src.Unavailable != "":
			now = "none: " + src.Unavailable
		}
		row("source "+src.Source+":", now)
		switch {
		case src.LastFailure == "":
		case src.LastFailure == src.Unavailable:
			row("", fmt.Sprintf("gave up %s %s", src.LastFailureSerial, at(src.LastFailureAt)))
		default:
			row("", fmt.Sprintf("gave up %s %s: %s", src.LastFailureSerial, at(src.LastFailureAt), src.LastFailure))
		}
	}
	return tw.Flush()
}
