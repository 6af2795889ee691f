package raftfsm

import (
	"errors"
	"fmt"
	"testing"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// wireError is one rule error of the tables: its code, and the code of
// the error of errorCodes it is a kind of (its own for one of errorCodes).
type wireError struct {
	err            error
	code, baseCode string
}

func wireErrors(t *testing.T) []wireError {
	var out []wireError
	for _, e := range errorCodes {
		out = append(out, wireError{e.err, e.code, e.code})
	}
	for _, r := range refinements {
		var bases []string
		w := wireError{err: r.err, code: r.code}
		for _, e := range errorCodes {
			if errors.Is(r.err, e.err) {
				bases = append(bases, e.code)
				w.baseCode = e.code
			}
		}
		if len(bases) != 1 {
			t.Fatalf("refinement %v is a kind of %v, want exactly one rule error of errorCodes", r.err, bases)
		}
		out = append(out, w)
	}
	return out
}

// Every rule error and every refinement crosses the wire by its code
// alone: ErrorCode names it, ErrorFromCode rebuilds it with errors.Is
// intact (a refinement is still the error it refines) and the message as
// it was, and BaseCode gives a journal that does not know a refinement the
// code of the error it refines. The codes are ApplyError's names, one each.
func TestErrorCodesRoundTrip(t *testing.T) {
	all := wireErrors(t)
	seen := map[string]error{}
	for _, w := range all {
		t.Run(w.code, func(t *testing.T) {
			orig := fmt.Errorf("%w: node-1 broke a rule", w.err)
			if got := ErrorCode(orig); got != w.code {
				t.Fatalf("ErrorCode(%v) = %q, want %q", orig, got, w.code)
			}
			if _, ok := pactv1.ApplyError_value["APPLY_ERROR_"+w.code]; !ok {
				t.Errorf("code %s has no ApplyError value", w.code)
			}
			if got := BaseCode(w.code); got != w.baseCode {
				t.Errorf("BaseCode(%s) = %q, want %q", w.code, got, w.baseCode)
			}
			back := ErrorFromCode(w.code, orig.Error())
			if back == nil {
				t.Fatalf("ErrorFromCode(%s) = nil", w.code)
			}
			if back.Error() != orig.Error() {
				t.Errorf("forwarded text = %q, want %q", back.Error(), orig.Error())
			}
			if got := ErrorCode(back); got != w.code {
				t.Errorf("forwarded again as %q, want %q", got, w.code)
			}
			// errors.Is holds for exactly what it held for before the wire.
			for _, other := range all {
				if want, got := errors.Is(orig, other.err), errors.Is(back, other.err); got != want {
					t.Errorf("errors.Is(forwarded, %v) = %v, want %v", other.err, got, want)
				}
			}
			if !errors.Is(back, w.err) {
				t.Errorf("forwarded %v is not %v", back, w.err)
			}
			// The previous release's path gives the same for the new code.
			if old := ErrorFromPreviousRelease(w.code, orig.Error()); !errors.Is(old, w.err) {
				t.Errorf("ErrorFromPreviousRelease(%s) = %v, not %v", w.code, old, w.err)
			}
		})
		if other, dup := seen[w.code]; dup {
			t.Errorf("%v and %v share the code %s", w.err, other, w.code)
		}
		seen[w.code] = w.err
	}
	if len(seen) != len(pactv1.ApplyError_value)-1 {
		t.Errorf("%d codes for %d ApplyError values (besides UNSPECIFIED)", len(seen), len(pactv1.ApplyError_value)-1)
	}
	for _, c := range []string{"", "UNSPECIFIED", "NO_SUCH_CODE", "journal ca revoked"} {
		if err := ErrorFromCode(c, "raftfsm: invalid command: journal CA revoked: x"); err != nil {
			t.Errorf("ErrorFromCode(%q) = %v, want nil", c, err)
		}
		if err := ErrorFromPreviousRelease(c, "raftfsm: invalid command: journal CA revoked: x"); err != nil {
			t.Errorf("ErrorFromPreviousRelease(%q) = %v, want nil", c, err)
		}
		if got := BaseCode(c); got != c {
			t.Errorf("BaseCode(%q) = %q", c, got)
		}
	}
}

// The codes release 0.1.0 reads name the same rule errors: a journal of
// either release understands the other's error_code.
func TestErrorCodesOfThePreviousRelease(t *testing.T) {
	for code, err := range map[string]error{
		"NODE_NOT_ENROLLED":          ErrNodeNotEnrolled,
		"NODE_ALREADY_ENROLLED":      ErrNodeAlreadyEnrolled,
		"HARDWARE_IDENTITY_CONFLICT": ErrHardwareIdentityConflict,
		"NODE_REVOKED":               ErrNodeRevoked,
		"ALREADY_ACTIVE":             ErrAlreadyActive,
		"STALE_CERTIFICATE":          ErrStaleCertificate,
		"INVALID_ARGUMENT":           ErrInvalidCommand,
		"VCLUSTER_CHANGED":           ErrVClusterChanged,
		"NODE_FENCED":                ErrNodeFenced,
		"JOIN_TOKEN_REQUIRED":        ErrJoinTokenRequired,
		"JOIN_TOKEN_INVALID":         ErrJoinTokenInvalid,
		"KEY_IN_USE":                 ErrKeyInUse,
		"OPERATOR_REVOKED":           ErrOperatorRevoked,
		"NOT_FOUND":                  ErrNotFound,
	} {
		if got := ErrorCode(err); got != code {
			t.Errorf("ErrorCode(%v) = %q, 0.1.0 reads %q", err, got, code)
		}
		if got := BaseCode(ErrorCode(err)); got != code {
			t.Errorf("BaseCode of %v = %q, 0.1.0 reads %q", err, got, code)
		}
	}
	// Each refinement goes to 0.1.0 as INVALID_ARGUMENT, which it maps as
	// it did before the refinement had a code; ErrJournalCARevoked with
	// its text first, which 0.1.0 tells it by.
	for _, r := range []error{ErrJournalCARevoked, ErrJournalCANotBound} {
		if got := BaseCode(ErrorCode(r)); got != "INVALID_ARGUMENT" {
			t.Errorf("%v goes to 0.1.0 as %q", r, got)
		}
	}
}

// No refinement is told by its text: a message that starts with a
// refinement's text under any other code is the error that code names.
// Only ErrorFromPreviousRelease reads it, for release 0.1.0's one
// refinement under 0.1.0's code for it.
func TestNoRefinementByText(t *testing.T) {
	all := wireErrors(t)
	for _, r := range refinements {
		msg := fmt.Errorf("%w: journal CA 0a01 of journal j1", r.err).Error()
		for _, w := range all {
			if w.code == r.code {
				continue
			}
			back := ErrorFromCode(w.code, msg)
			if errors.Is(back, r.err) {
				t.Errorf("ErrorFromCode(%s, %q) is %v", w.code, msg, r.err)
			}
			if !errors.Is(back, w.err) || back.Error() != msg {
				t.Errorf("ErrorFromCode(%s, %q) = %v, want %v with the message as it was", w.code, msg, back, w.err)
			}
			old := ErrorFromPreviousRelease(w.code, msg)
			legacy := r.err == ErrJournalCARevoked && w.code == "INVALID_ARGUMENT"
			if errors.Is(old, r.err) != legacy {
				t.Errorf("ErrorFromPreviousRelease(%s, %q) = %v: errors.Is(_, %v) = %v, want %v", w.code, msg, old, r.err, !legacy, legacy)
			}
			if !errors.Is(old, w.err) || old.Error() != msg {
				t.Errorf("ErrorFromPreviousRelease(%s, %q) = %v, want %v with the message as it was", w.code, msg, old, w.err)
			}
		}
	}
	// The refinement's text alone, or inside the message, is not it.
	for _, msg := range []string{
		ErrJournalCARevoked.Error(),
		"journal: " + ErrJournalCARevoked.Error() + ": x",
		"raftfsm: invalid command: no journal CA",
	} {
		if err := ErrorFromPreviousRelease("INVALID_ARGUMENT", msg); errors.Is(err, ErrJournalCARevoked) || !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("ErrorFromPreviousRelease(INVALID_ARGUMENT, %q) = %v", msg, err)
		}
	}
}
