package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/tlsalert"
	"github.com/pact-hpc/pact/internal/transport"
)

// UsageError reports everything wrong with a command line, found before
// anything was sent. Problems are listed together so one run shows them all.
type UsageError struct {
	// Command is the command path whose help explains the usage,
	// e.g. "pact node enroll".
	Command  string
	Problems []error
}

func (e *UsageError) Error() string {
	var b strings.Builder
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0].Error())
	} else {
		fmt.Fprintf(&b, "%d problems with the command line:", len(e.Problems))
		for _, p := range e.Problems {
			b.WriteString("\n  - ")
			b.WriteString(p.Error())
		}
	}
	if e.Command != "" {
		fmt.Fprintf(&b, "\nsee: %s --help", e.Command)
	}
	return b.String()
}

// Unwrap lets errors.Is find the sentinel behind each problem.
func (e *UsageError) Unwrap() []error { return e.Problems }

// newUsage builds a UsageError from problems, flattening errors.Join
// results so each problem gets its own line. It returns nil for none.
func newUsage(command string, problems ...error) error {
	var flat []error
	for _, p := range problems {
		flat = append(flat, flatten(p)...)
	}
	if len(flat) == 0 {
		return nil
	}
	return &UsageError{Command: command, Problems: flat}
}

func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// Attempt is one journal address tried and the reason it could not serve
// the call.
type Attempt struct {
	Addr string
	Err  *apierr.Error
	// Handshake is the TLS handshake error seen on that address, if any: it
	// says more than the transport's status message.
	Handshake error
	// Alert is the error that carried the TLS alert the journal sent on
	// that address's latest connection, in the handshake or on the first
	// read after it (tlsalert.Received finds it); nil if it sent none.
	Alert error
	// Uncertain is set when a write may have reached the journal before
	// the failure, so it may have taken effect there.
	Uncertain bool
	// Connected: a TCP connection to the address was made. Stalled: the
	// journal took the connection but had not answered the TLS handshake
	// when the time ran out (a journal serves nothing until it has a
	// leader and its registry is loaded).
	Connected, Stalled bool
}

func (a Attempt) reason() string {
	var busy *transport.BusyError
	if errors.As(a.Handshake, &busy) {
		return fmt.Sprintf("busy (boot storm?); it asked to retry after %s", seconds(busy.RetryAfter))
	}
	if a.Handshake != nil {
		return "TLS handshake: " + a.Handshake.Error()
	}
	if a.Stalled {
		return "took the connection, but did not answer the TLS handshake in time: it is not serving (yet)"
	}
	if a.Err.Reason != "" {
		return string(a.Err.Reason) + ": " + a.Err.Message
	}
	return a.Err.Message
}

// UnreachableError means no journal address could serve the call: each
// refused the connection, failed the handshake, timed out before
// connecting, or answered Unavailable (e.g. NO_LEADER).
type UnreachableError struct {
	Attempts []Attempt
}

func (e *UnreachableError) addrs() string {
	a := make([]string, len(e.Attempts))
	for i, at := range e.Attempts {
		a[i] = at.Addr
	}
	return strings.Join(a, ", ")
}

func (e *UnreachableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cannot reach any journal at %s:", e.addrs())
	for i, at := range e.Attempts {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " %s: %s", at.Addr, at.reason())
	}
	return b.String()
}

// Busy is the shortest retry-after when every journal answered busy (a
// boot storm saturating their TLS handshakes), nil otherwise.
func (e *UnreachableError) Busy() *transport.BusyError {
	var soonest *transport.BusyError
	for _, at := range e.Attempts {
		var busy *transport.BusyError
		if !errors.As(at.Handshake, &busy) {
			return nil
		}
		if soonest == nil || busy.RetryAfter < soonest.RetryAfter {
			soonest = busy
		}
	}
	return soonest
}

// seconds renders a retry-after for a person: tenths of a second.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// Unwrap exposes each address's error.
func (e *UnreachableError) Unwrap() []error {
	out := make([]error, 0, len(e.Attempts))
	for _, at := range e.Attempts {
		out = append(out, at.Err)
	}
	return out
}

// JournalError is a journal's answer to a call that reached it.
type JournalError struct {
	Addr string
	Err  *apierr.Error
	// Earlier are the addresses tried before this one. A write that failed
	// over may have taken effect on one of them.
	Earlier []Attempt
}

func (e *JournalError) Error() string { return "journal " + e.Addr + ": " + e.Err.Error() }

// Unwrap lets apierr.FromError and errors.Is see the pact error.
func (e *JournalError) Unwrap() error { return e.Err }

// hintError is the message an operator reads: what went wrong and what to
// do next. It wraps the error it explains, so ExitCode still sees it.
type hintError struct {
	msg string
	err error
}

func (e *hintError) Error() string { return e.msg }
func (e *hintError) Unwrap() error { return e.err }

// action describes what a command was doing, so that an error can say what
// to do next.
type action struct {
	// verb is what the caller may or may not do, e.g. "register nodes".
	verb string
	// node is the node the command names, if any.
	node string
	// write is set for calls that change the registry.
	write bool
	// help is the command whose --help explains its arguments.
	help string
	// denied, when set, replaces the advice given on PermissionDenied
	// (which role may do this).
	denied string
	// precondition, when set, is added to the advice given on
	// FailedPrecondition (which command fits the node's state).
	precondition string
	// notFound, when set, replaces the advice given on NotFound.
	notFound string
}

// explain turns a command's error into one actionable message. Unknown
// errors pass through with a generic hint; nil stays nil.
func (s *session) explain(a action, err error) error {
	if err == nil {
		return nil
	}
	var unreachable *UnreachableError
	if errors.As(err, &unreachable) {
		if untrusted := untrustedServer(unreachable, s.cfg.CAFile); untrusted != nil {
			return untrusted
		}
		return &hintError{msg: s.explainUnreachable(unreachable), err: err}
	}
	var je *JournalError
	addr := ""
	var earlier []Attempt
	if errors.As(err, &je) {
		addr, earlier = je.Addr, je.Earlier
	}
	e := apierr.FromError(err)
	detail := e.Message
	if e.Reason != "" {
		detail = string(e.Reason) + ": " + e.Message
	}
	said := ""
	if detail != "" {
		said = " (journal: " + detail + ")"
	}
	inspect := ""
	if a.node != "" {
		inspect = "pact node inspect " + a.node
	}

	var msg string
	switch e.Code {
	case codes.NotFound:
		if a.notFound != "" {
			msg = a.notFound + said
			break
		}
		if a.node != "" {
			msg = fmt.Sprintf("no node %s in the registry%s; list nodes with: pact node list", a.node, said)
		} else {
			msg = fmt.Sprintf("not found%s; list nodes with: pact node list", said)
		}
	case codes.AlreadyExists, codes.Aborted:
		switch e.Reason {
		case apierr.HardwareIdentityConflict:
			// The reason alone does not say which identifier conflicts;
			// the journal's message does (a MAC, the BMC serial, the TPM
			// EK hash or the SPIFFE ID, and its owner), so this names none
			// itself unless the journal said nothing.
			what := "an identifier given for " + a.node
			if e.Message == "" {
				what += " (a MAC, the BMC serial, the TPM EK hash or the SPIFFE ID)"
			}
			msg = fmt.Sprintf("%s is already registered to another node%s; find its owner with: pact node list -o json", what, said)
		default:
			msg = fmt.Sprintf("node %s is already registered%s; see it with: %s", a.node, said, inspect)
		}
		for _, at := range earlier {
			if a.write && at.Uncertain {
				msg += fmt.Sprintf(" (an earlier attempt at %s failed mid-request and may have made this change)", at.Addr)
				break
			}
		}
	case codes.PermissionDenied:
		if e.Reason == apierr.OperatorRevoked {
			// The journal's message says what to do.
			msg = fmt.Sprintf("your credential (%s) was revoked%s", s.cred, said)
			break
		}
		if e.Reason == apierr.NodeRevoked && a.node != "" {
			msg = fmt.Sprintf("node %s is revoked%s; re-enrolling it needs a new registration", a.node, said)
			break
		}
		advice := "use a credential with role platform-admin"
		if a.denied != "" {
			advice = a.denied
		}
		msg = fmt.Sprintf("your credential (%s) may not %s%s; %s", s.cred, a.verb, said, advice)
	case codes.Unauthenticated:
		msg = fmt.Sprintf("the journal did not accept your credential (%s)%s; check --cert/--key (or %s/%s) are a current admin credential of this domain", s.cred, said, EnvCert, EnvKey)
	case codes.FailedPrecondition:
		switch {
		case e.Reason == apierr.AlreadyActive && a.node != "":
			msg = fmt.Sprintf("node %s is already active%s; see it with: %s", a.node, said, inspect)
		case e.Reason == apierr.NodeStreaming && a.node != "":
			// The journal's own text says the same; this one names the command.
			msg = fmt.Sprintf("node %s has an open stream to a journal (it is running); decommissioning cuts it off. Re-run with --force to proceed: pact node decommission %s --force", a.node, a.node)
		case e.Reason == apierr.RevokesOwnCredential:
			// The journal's message names the chain and where to renew.
			msg = "refused, to keep you from cutting off your own credential" + said
		case e.Reason == apierr.QuorumVersion:
			// The journal's message names the level, the release and the
			// journals still to upgrade.
			msg = fmt.Sprintf("cannot %s until every journal is upgraded%s; pact journal status shows each journal's release and level", a.verb, said)
		case e.Reason == apierr.VClusterChanged && a.node != "":
			msg = fmt.Sprintf("node %s is not in the vCluster this change expects%s: it is in another one, or it was moved while this command ran; check where it is now with: %s", a.node, said, inspect)
		default:
			msg = fmt.Sprintf("cannot %s in the node's current state%s", a.verb, said)
			if inspect != "" {
				msg += "; check its state with: " + inspect
			}
		}
		if a.precondition != "" {
			msg += "; " + a.precondition
		}
	case codes.ResourceExhausted:
		if tooLarge(e) {
			// gRPC's own size limit, on either side: no rate limit, and
			// waiting will not help.
			msg = fmt.Sprintf("the answer to %s is larger than one message may be%s; narrow it (pact node list --state, --vcluster) or upgrade the journals and pact to versions that page their answers", a.verb, said)
			break
		}
		retry := "retry in a few seconds"
		if e.RetryAfter > 0 {
			retry = "retry in " + e.RetryAfter.Round(time.Millisecond).String()
		}
		msg = fmt.Sprintf("the journal is rate limiting requests%s; %s", said, retry)
	case codes.InvalidArgument, codes.OutOfRange:
		msg = fmt.Sprintf("the journal rejected the request%s; see: %s --help", said, a.help)
	case codes.DeadlineExceeded, codes.Unavailable:
		msg = fmt.Sprintf("journal %s did not answer within %s%s; ", orUnknown(addr), s.cfg.Timeout, said)
		if e.Reason == apierr.OutcomeUnknown {
			// The journal answered in time: it could not tell whether the
			// write committed (the leader stopped answering, or this
			// journal could not apply it yet).
			msg = fmt.Sprintf("journal %s could not tell whether the change was made%s; ", orUnknown(addr), said)
		}
		if a.write {
			msg += "the change may or may not have been made: check with "
			if inspect != "" {
				msg += inspect
			} else {
				msg += "pact node list"
			}
			msg += " before retrying"
		} else {
			msg += "retry, or raise --timeout if the journal is busy"
		}
	case codes.Unimplemented:
		msg = fmt.Sprintf("journal %s does not know this call%s: it runs an older release than this CLI (pact version lists each journal's). During an upgrade, send it to an upgraded journal (--journal ADDR; docs/upgrade.md); otherwise use a pact CLI of the journal's release", orUnknown(addr), said)
	case codes.Canceled:
		msg = "interrupted"
	default:
		msg = fmt.Sprintf("could not %s: %s%s; this is a journal fault: check the journal's log", a.verb, e.Code, said)
	}
	return &hintError{msg: msg, err: err}
}

func (s *session) explainUnreachable(e *UnreachableError) string {
	var b strings.Builder
	if busy := e.Busy(); busy != nil {
		// Not an outage and not a configuration error: the journals are
		// up and turned the connection away before any cryptography.
		word := "journal " + e.addrs() + " is"
		if len(e.Attempts) > 1 {
			word = "journals " + e.addrs() + " are"
		}
		fmt.Fprintf(&b, "%s busy (boot storm?); retry after %s", word, seconds(busy.RetryAfter))
		return b.String()
	}
	fmt.Fprintf(&b, "cannot reach any journal at %s:", e.addrs())
	for _, at := range e.Attempts {
		fmt.Fprintf(&b, "\n  %s: %s", at.Addr, at.reason())
	}
	if credentialRefused(e) {
		// The journals are up and answered: they refused the credential.
		fmt.Fprintf(&b, "\nthe journals are up and refused your credential (%s) in the TLS handshake: it is not from this domain's root, or the intermediate or journal CA that signed it was revoked (pact journal retire-intermediate, revoke-ca), or its root left the journals' --root-cert (a root rollover). Get a new one from another platform-admin (pact admin issue) or from the ceremony (pact ca issue-admin)", s.cred)
		return b.String()
	}
	b.WriteString(s.unreachableAdvice(e.Attempts))
	for _, at := range e.Attempts {
		if at.Err.Reason == apierr.NoLeader {
			b.WriteString("; a journal without a leader cannot serve: check that a majority of the quorum is up")
			break
		}
	}
	for _, at := range e.Attempts {
		if at.Handshake == nil {
			continue
		}
		var nj *pki.NotJournalError
		switch {
		case errors.As(at.Handshake, &nj):
			fmt.Fprintf(&b, "; %s answered with a certificate of the domain that is not a journal's: check that --journal (or %s) names journals, not nodes", at.Addr, EnvJournal)
		case isVerifyError(at.Handshake):
			fmt.Fprintf(&b, "; the journal's certificate did not verify against --ca %s: use this domain's root (ca.pem; both roots during a rollover)", s.cfg.CAFile)
		default:
			b.WriteString("; the TLS handshake failed: check --ca, --cert and --key belong to this domain")
		}
		break
	}
	return b.String()
}

// devAddrs are the addresses the development layouts serve on, and what
// starts them: make run's journal, make cluster's three.
var devAddrs = map[string]string{
	"127.0.0.1:7443": "make run",
	"127.0.0.1:7451": "make cluster", "127.0.0.1:7452": "make cluster", "127.0.0.1:7453": "make cluster",
}

// unreachableAdvice says, from what each address did, what is true and
// what to do: an address that took no connection has no journal
// listening (or a firewall between); one that took it and never answered
// the handshake has a journal that does not serve yet. The development
// layouts' commands are named only for their own addresses.
func (s *session) unreachableAdvice(attempts []Attempt) string {
	var down, stalled, dev []string
	for _, at := range attempts {
		switch {
		case at.Handshake != nil || at.Err.Reason != "":
			continue // the handshake's or the journal's own answer says it
		case at.Stalled:
			stalled = append(stalled, at.Addr)
		case !at.Connected:
			down = append(down, at.Addr)
			if cmd, ok := devAddrs[at.Addr]; ok && !slices.Contains(dev, cmd) {
				dev = append(dev, cmd)
			}
		}
	}
	var b strings.Builder
	if len(down) > 0 {
		fmt.Fprintf(&b, "\nno journal took a connection at %s: check that pact-journal runs there (systemctl status pact-journal on that host; its log says why it stopped) and that --journal (or %s) names the address it listens on (its --listen)", strings.Join(down, ", "), EnvJournal)
		if len(dev) > 0 {
			fmt.Fprintf(&b, "; the development journals start with %s", strings.Join(dev, " or "))
		}
	}
	if len(stalled) > 0 {
		fmt.Fprintf(&b, "\n%s took the connection but did not answer within %s: a journal serves nothing until it has a leader and has loaded the registry, so it is starting, waiting to be added (--join), or its quorum has no majority up; its log says what it waits for (journalctl -u pact-journal), and pact journal status against another journal lists the voters. A journal that is only busy answers with a retry-after instead; raise --timeout if it is loaded", strings.Join(stalled, ", "), s.cfg.Timeout)
	}
	if b.Len() == 0 {
		fmt.Fprintf(&b, "\ncheck --journal (or %s) names running journals", EnvJournal)
	}
	return b.String()
}

// credentialRefused reports whether every journal tried refused the
// client certificate in the TLS handshake (the bad_certificate alert): the
// journals are up, and the credential's chain is not in their trust bundle.
func credentialRefused(e *UnreachableError) bool {
	if len(e.Attempts) == 0 {
		return false
	}
	for _, at := range e.Attempts {
		// The alert reaches the client as the handshake's error, or (TLS
		// 1.3: the server checks the client's certificate after the
		// client's side of the handshake is done) on the first read.
		if a, ok := tlsalert.Received(at.Alert); !ok || a != tlsalert.BadCertificate {
			return false
		}
	}
	return true
}

// UntrustedServerError means every journal answered, but with a
// certificate --ca does not trust: the journals are up and the CLI holds
// the wrong root. It is a local configuration error (exit 2), not an
// outage (exit 7).
type UntrustedServerError struct {
	CAFile   string
	Attempts []Attempt
}

func (e *UntrustedServerError) Error() string {
	addrs := make([]string, len(e.Attempts))
	for i, at := range e.Attempts {
		addrs[i] = at.Addr
	}
	return fmt.Sprintf("the journal's server certificate is not trusted: %s answered with a certificate that no root in --ca %s signed (%s); "+
		"pass this domain's root certificate (or both, during a root rollover) with --ca or %s: the ca.pem that pact ca init (or pact-journal --dev) wrote",
		strings.Join(addrs, ", "), e.CAFile, e.Attempts[0].Handshake, EnvCA)
}

// Unwrap exposes each address's handshake error.
func (e *UntrustedServerError) Unwrap() []error {
	out := make([]error, 0, len(e.Attempts))
	for _, at := range e.Attempts {
		out = append(out, at.Handshake)
	}
	return out
}

// untrustedServer is an UntrustedServerError when every attempt failed
// because the server's certificate chains to an unknown authority, and nil
// otherwise (some journal is down, or the name did not match: the other
// explanations say more).
func untrustedServer(e *UnreachableError, caFile string) error {
	if len(e.Attempts) == 0 {
		return nil
	}
	for _, at := range e.Attempts {
		var ua x509.UnknownAuthorityError
		if at.Handshake == nil || !errors.As(at.Handshake, &ua) {
			return nil
		}
	}
	return &UntrustedServerError{CAFile: caFile, Attempts: e.Attempts}
}

// isVerifyError reports whether a handshake failed because the server's
// certificate did not verify against our roots or its name.
func isVerifyError(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
	)
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}

// internalPrefixes are the package prefixes Go errors carry ("hwid:
// invalid MAC address"); an operator reading a message needs none of them.
var internalPrefixes = strings.NewReplacer("hwid: ", "", "pki: ", "", "raftfsm: ", "", "ceremony: ", "", "keystore: ", "", "caprofile: ", "")

// plainMessage is an error text as the operator sees it: without pact's
// internal package prefixes, the journal's included.
func plainMessage(s string) string { return internalPrefixes.Replace(s) }

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// BatchError reports a batch that read its whole file but had rows that
// failed, locally or at the journal. Each row's own result says why; Code
// is the exit code of the worst failure class (see batchExit).
type BatchError struct {
	Rows   int
	Failed int
	// Lines are the first failed lines (at most maxFailedLines).
	Lines []int
	Code  int
}

const maxFailedLines = 10

func (e *BatchError) Error() string {
	lines := make([]string, len(e.Lines))
	for i, l := range e.Lines {
		lines[i] = fmt.Sprint(l)
	}
	list := strings.Join(lines, ", ")
	if e.Failed > len(e.Lines) {
		list += ", ..."
	}
	return fmt.Sprintf("%d of %d %s failed (%s %s; each has its reason in the results above); fix those rows and re-run the same file: rows already registered report \"exists\"",
		e.Failed, e.Rows, plural(e.Rows, "row", "rows"), plural(e.Failed, "line", "lines"), list)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
