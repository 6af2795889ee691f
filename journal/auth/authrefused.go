package auth

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc/peer"

	"github.com/pact-hpc/pact/internal/logkey"
	"github.com/pact-hpc/pact/internal/pki"
)

// authRefusedLogEvery is how often one kind of refused authentication (the
// same reason, certificate and source host) is logged as a warning; the
// repeats in between are logged at debug level and counted in the next
// warning. A misconfigured node retries every few seconds: its refusals
// must not drown the journal's log.
const authRefusedLogEvery = time.Minute

// authRefusedKeys bounds the memory of the rate limiter.
const authRefusedKeys = 4096

// authRefusals rate-limits the log of refused authentications.
type authRefusals struct {
	mu   sync.Mutex
	seen map[string]*refusalLog
}

type refusalLog struct {
	warned     time.Time
	suppressed int
}

// note returns whether the refusal under key is logged as a warning now,
// and how many were suppressed since the last warning.
func (r *authRefusals) note(key string, now time.Time) (warn bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]*refusalLog{}
	}
	e, ok := r.seen[key]
	if ok && now.Sub(e.warned) < authRefusedLogEvery && !now.Before(e.warned) {
		e.suppressed++
		return false, 0
	}
	if !ok && len(r.seen) >= authRefusedKeys {
		for k, old := range r.seen {
			if now.Sub(old.warned) >= authRefusedLogEvery {
				delete(r.seen, k)
			}
		}
		if len(r.seen) >= authRefusedKeys {
			// Flooded with distinct callers: the metric still counts them.
			return false, 0
		}
	}
	if !ok {
		e = &refusalLog{}
		r.seen[key] = e
	}
	suppressed, e.warned, e.suppressed = e.suppressed, now, 0
	return true, suppressed
}

// refused counts and logs a refused authentication: by reason in
// pact_journal_auth_refused_total, and in the log with what identifies the
// caller's certificate (SPIFFE ID, serial, pact identity) and its address,
// never anything of its key.
func (a *Authenticator) refused(ctx context.Context, method string, err error) {
	// The wire reason as it is, like pact_journal_enroll_failures_total.
	label := a.cfg.Reason(err)
	a.cfg.Refused(label)

	source := peerAddr(ctx)
	attrs := []any{logkey.Reason, label, logkey.Method, shortMethod(method), logkey.Source, source}
	subject := ""
	if pr, ok := peer.FromContext(ctx); ok {
		if ti, _, ok := tlsInfoOf(pr.AuthInfo); ok && len(ti.State.PeerCertificates) > 0 {
			leaf := ti.State.PeerCertificates[0]
			serial := pki.SerialHex(leaf.SerialNumber)
			attrs = append(attrs, logkey.Serial, serial)
			subject = serial
			if sid, err := x509svid.IDFromCert(leaf); err == nil {
				attrs = append(attrs, logkey.SPIFFEID, sid.String())
			}
		}
	}
	host := source
	if i := strings.LastIndex(source, ":"); i > 0 {
		host = source[:i] // one key per host: the port changes with every connection
	}
	warn, suppressed := a.refusals.note(label+"|"+subject+"|"+host, a.cfg.Clock.Now())
	attrs = append(attrs, logkey.Err, err)
	if !warn {
		a.log.Debug("authentication refused", attrs...)
		return
	}
	if suppressed > 0 {
		attrs = append(attrs, logkey.Suppressed, suppressed, logkey.SuppressedWithin, authRefusedLogEvery)
	}
	a.log.Warn("authentication refused", attrs...)
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
