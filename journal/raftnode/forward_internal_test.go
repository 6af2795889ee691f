package raftnode

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// ruleSentinels are the rule errors a forwarded result is checked against.
var ruleSentinels = []error{
	raftfsm.ErrNodeNotEnrolled, raftfsm.ErrNodeAlreadyEnrolled, raftfsm.ErrHardwareIdentityConflict,
	raftfsm.ErrNodeRevoked, raftfsm.ErrAlreadyActive, raftfsm.ErrStaleCertificate, raftfsm.ErrInvalidCommand,
	raftfsm.ErrVClusterChanged, raftfsm.ErrNodeFenced, raftfsm.ErrJoinTokenRequired, raftfsm.ErrJoinTokenInvalid,
	raftfsm.ErrKeyInUse, raftfsm.ErrOperatorRevoked, raftfsm.ErrNotFound, raftfsm.ErrQuorumVersion,
	raftfsm.ErrJournalCARevoked, raftfsm.ErrJournalCANotBound,
}

// previousReleaseError is how a journal of release 0.1.0 reads a
// forwarded result (its raftfsm.ErrorFromCode, commit 74e1bd4): its codes,
// and ErrJournalCARevoked told by the start of the message. nil is an
// unknown code, which it answers as an internal error.
func previousReleaseError(code, msg string) error {
	codes := map[string]error{
		"NODE_NOT_ENROLLED": raftfsm.ErrNodeNotEnrolled, "NODE_ALREADY_ENROLLED": raftfsm.ErrNodeAlreadyEnrolled,
		"HARDWARE_IDENTITY_CONFLICT": raftfsm.ErrHardwareIdentityConflict, "NODE_REVOKED": raftfsm.ErrNodeRevoked,
		"ALREADY_ACTIVE": raftfsm.ErrAlreadyActive, "STALE_CERTIFICATE": raftfsm.ErrStaleCertificate,
		"INVALID_ARGUMENT": raftfsm.ErrInvalidCommand, "VCLUSTER_CHANGED": raftfsm.ErrVClusterChanged,
		"NODE_FENCED": raftfsm.ErrNodeFenced, "JOIN_TOKEN_REQUIRED": raftfsm.ErrJoinTokenRequired,
		"JOIN_TOKEN_INVALID": raftfsm.ErrJoinTokenInvalid, "KEY_IN_USE": raftfsm.ErrKeyInUse,
		"OPERATOR_REVOKED": raftfsm.ErrOperatorRevoked, "NOT_FOUND": raftfsm.ErrNotFound,
	}
	e, ok := codes[code]
	if !ok {
		return nil
	}
	r := raftfsm.ErrJournalCARevoked
	//lint:ignore SA1032 0.1.0's decoding, as that release has it: is the refinement a kind of the code's sentinel
	if rest, ok := strings.CutPrefix(msg, r.Error()+": "); ok && errors.Is(r, e) {
		return fmt.Errorf("%w: %s", r, rest)
	}
	return fmt.Errorf("%w: %s", e, msg)
}

// overTheWire is a leader's answer as the forwarding journal decodes it.
func overTheWire(t *testing.T, resp *pactv1.ProposeResponse) *pactv1.ProposeResponse {
	t.Helper()
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	out := &pactv1.ProposeResponse{}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// A rule error the leader applied reaches the journal that forwarded the
// command as that error: errors.Is holds for what it held for on the
// leader (a refinement is the error it refines too) and the message is the
// leader's, from the codes alone. A journal of the previous release reads
// error_code alone, and gets what it got before the refinements had codes
// of their own: ErrJournalCARevoked (JOURNAL_CA_REVOKED) by its text, and
// ErrJournalCANotBound as ErrInvalidCommand (INVALID_ARGUMENT).
func TestForwardedRuleErrors(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w: node-1", raftfsm.ErrNodeRevoked),
		fmt.Errorf("%w: no journal CA", raftfsm.ErrInvalidCommand),
		fmt.Errorf("%w: journal CA 0a01 of journal j1 was revoked (stolen); this journal needs a new journal CA", raftfsm.ErrJournalCARevoked),
		fmt.Errorf("%w: journal CA 0a02 of journal j1 was superseded by journal CA 0a03", raftfsm.ErrJournalCANotBound),
		&raftfsm.QuorumVersionError{Feature: "recording a journal CA", Need: 2, Have: 1},
	} {
		t.Run(raftfsm.ErrorCode(err), func(t *testing.T) {
			resp := overTheWire(t, proposeResponse(7, &raftfsm.Result{Batch: []*raftfsm.Result{{}, {Err: err}}, Err: err}))
			for i, got := range []error{resultOf(resp).Err, resultOf(resp.GetBatch()[1]).Err} {
				if got == nil || got.Error() != err.Error() {
					t.Errorf("%d: forwarded %q, want %q", i, got, err)
				}
				for _, s := range ruleSentinels {
					if errors.Is(got, s) != errors.Is(err, s) {
						t.Errorf("%d: errors.Is(forwarded, %v) = %v, want %v", i, s, errors.Is(got, s), errors.Is(err, s))
					}
				}
			}
			if resultOf(resp.GetBatch()[0]).Err != nil {
				t.Error("a batch's command that succeeded came back failed")
			}
			if errors.Is(err, raftfsm.ErrQuorumVersion) {
				return // no command of release 0.1.0 meets it
			}
			old := previousReleaseError(resp.GetErrorCode(), resp.GetErrorMessage())
			if old == nil {
				t.Fatalf("release 0.1.0 does not know the code %q", resp.GetErrorCode())
			}
			for _, s := range ruleSentinels {
				want := errors.Is(err, s)
				if s == raftfsm.ErrJournalCANotBound {
					want = false // 0.1.0 has no such error
				}
				if errors.Is(old, s) != want {
					t.Errorf("release 0.1.0 reads %v: errors.Is(_, %v) = %v, want %v", old, s, !want, want)
				}
			}
		})
	}
}

// The answers that carry no exact code, or one this journal does not
// know, and the one place text is read: release 0.1.0's
// ErrJournalCARevoked.
func TestForwardedRuleErrorsOfOtherReleases(t *testing.T) {
	revoked := fmt.Errorf("%w: journal CA 0a01 of journal j1 was revoked (stolen)", raftfsm.ErrJournalCARevoked).Error()
	notBound := fmt.Errorf("%w: journal CA 0a02 of journal j1 was superseded", raftfsm.ErrJournalCANotBound).Error()
	for _, tt := range []struct {
		name        string
		resp        *pactv1.ProposeResponse
		is, isNot   error
		unknownCode bool
	}{
		{"0.1.0 leader, its journal CA revocation", &pactv1.ProposeResponse{ErrorCode: "INVALID_ARGUMENT", ErrorMessage: revoked},
			raftfsm.ErrJournalCARevoked, nil, false},
		{"0.1.0 leader, an invalid command", &pactv1.ProposeResponse{ErrorCode: "INVALID_ARGUMENT", ErrorMessage: "raftfsm: invalid command: no journal CA"},
			raftfsm.ErrInvalidCommand, raftfsm.ErrJournalCARevoked, false},
		{"0.1.0 leader, a text 0.1.0 never sent", &pactv1.ProposeResponse{ErrorCode: "INVALID_ARGUMENT", ErrorMessage: notBound},
			raftfsm.ErrInvalidCommand, raftfsm.ErrJournalCANotBound, false},
		{"0.1.0 leader, the text under another code", &pactv1.ProposeResponse{ErrorCode: "NOT_FOUND", ErrorMessage: revoked},
			raftfsm.ErrNotFound, raftfsm.ErrInvalidCommand, false},
		{"exact code: the text does not count", &pactv1.ProposeResponse{ErrorCode: "INVALID_ARGUMENT", ExactErrorCode: "INVALID_ARGUMENT", ErrorMessage: revoked},
			raftfsm.ErrInvalidCommand, raftfsm.ErrJournalCARevoked, false},
		{"a newer release's refinement", &pactv1.ProposeResponse{ErrorCode: "INVALID_ARGUMENT", ExactErrorCode: "SOMETHING_NEWER", ErrorMessage: "raftfsm: invalid command: something newer: x"},
			raftfsm.ErrInvalidCommand, raftfsm.ErrJournalCARevoked, false},
		{"an unknown code", &pactv1.ProposeResponse{ErrorCode: "SOMETHING_NEWER", ExactErrorCode: "SOMETHING_NEWER", ErrorMessage: revoked},
			nil, raftfsm.ErrInvalidCommand, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := resultOf(overTheWire(t, tt.resp)).Err
			if got == nil {
				t.Fatal("no error")
			}
			if tt.is != nil && (!errors.Is(got, tt.is) || got.Error() != tt.resp.GetErrorMessage()) {
				t.Errorf("%q is not %v with the leader's message", got, tt.is)
			}
			if tt.isNot != nil && errors.Is(got, tt.isNot) {
				t.Errorf("%q is %v", got, tt.isNot)
			}
			if unknown := raftfsm.ErrorCode(got) == ""; unknown != tt.unknownCode {
				t.Errorf("%q: no rule error %v, want %v", got, unknown, tt.unknownCode)
			}
		})
	}
}
