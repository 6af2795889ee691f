package journal

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// Whether a journal's own journal CA is revoked: through the intermediate
// it signs with, or, while that one is not in the registry (a re-key not
// published, or refused), through every journal CA recorded for it.
func TestRevokedJournalCAOf(t *testing.T) {
	const t0 = int64(1_800_000_000)
	const day = int64(86400)
	at := func(s int64) raftfsmtest.Proposer {
		return raftfsmtest.Proposer{Actor: "journal/j1", AtUnixNano: s * 1e9}
	}
	build := func(t *testing.T, cmds ...*pactv1.Command) *raftfsm.FSM {
		f := raftfsm.New()
		a := &raftfsmtest.Applier{FSM: f}
		for _, c := range cmds {
			if res := a.Apply(c); res.Err != nil {
				t.Fatalf("apply %v: %v", c, res.Err)
			}
		}
		return f
	}
	inter := raftfsmtest.Intermediate
	ca := raftfsmtest.JournalCA
	pubRoot := at(t0).PublishIntermediate(inter("j1", "i-0", t0+day))
	pub1 := at(t0).PublishIntermediateUnder(inter("j1", "i-1", t0+day), ca("j1", "ca-1", t0+365*day), "ca-1")
	pub2 := at(t0+10).PublishIntermediateUnder(inter("j1", "i-2", t0+day), ca("j1", "ca-2", t0+365*day), "ca-2")
	pubOther := at(t0).PublishIntermediateUnder(inter("j2", "i-9", t0+day), ca("j2", "ca-9", t0+365*day), "ca-9")
	revoke := func(serials ...string) *pactv1.Command {
		return raftfsmtest.Proposer{Actor: "admin/alice", AtUnixNano: (t0 + 100) * 1e9}.RevokeJournalCA("stolen", serials...)
	}
	later := func(c *pactv1.Command) *pactv1.Command { c.AtUnixNano += 100e9; return c }
	for _, tt := range []struct {
		name string
		cmds []*pactv1.Command
		own  string
		want string // the revoked journal CA's serial, "" for none
	}{
		{"an empty registry", nil, "i-1", ""},
		{"signed by the root", []*pactv1.Command{pubRoot, pubOther, revoke("ca-9")}, "i-0", ""},
		{"a live journal CA", []*pactv1.Command{pub1, pubOther, revoke("ca-9")}, "i-1", ""},
		{"its journal CA revoked", []*pactv1.Command{pub1, revoke("ca-1")}, "i-1", "ca-1"},
		{"an older journal CA revoked, its current one live", []*pactv1.Command{pub1, pub2, revoke("ca-1")}, "i-2", ""},
		{"its current journal CA revoked, an older one live", []*pactv1.Command{pub1, pub2, revoke("ca-2")}, "i-2", "ca-2"},
		{"unpublished, its journal CA revoked", []*pactv1.Command{pub1, revoke("ca-1")}, "i-5", "ca-1"},
		{"unpublished, every journal CA of it revoked: the last named", []*pactv1.Command{pub1, pub2, revoke("ca-2"), later(revoke("ca-1"))}, "i-5", "ca-1"},
		{"unpublished, one journal CA of it live", []*pactv1.Command{pub1, pub2, revoke("ca-1")}, "i-5", ""},
		{"unpublished, another journal's revoked", []*pactv1.Command{pubRoot, pubOther, revoke("ca-9")}, "i-5", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := revokedJournalCAOf(build(t, tt.cmds...), "j1", tt.own)
			if got.GetSerial() != tt.want {
				t.Errorf("revoked journal CA = %q, want %q", got.GetSerial(), tt.want)
			}
		})
	}
}

// A journal whose journal CA is revoked answers UNAVAILABLE
// (JOURNAL_CA_REVOKED): the agent goes to another journal. The registry's
// refusal of a publication under it maps the same way, here or forwarded
// from the leader.
func TestJournalCARevokedStatus(t *testing.T) {
	fsmErr := fmt.Errorf("%w: journal CA 0a01 of journal j1 was revoked (stolen)", raftfsm.ErrJournalCARevoked)
	forwarded := raftfsm.ErrorFromCode(raftfsm.ErrorCode(fsmErr), fsmErr.Error())
	for name, err := range map[string]error{
		"signing refused":     fmt.Errorf("%w (serial 0a01): journal j1 signs nothing until it has a new journal CA", ErrJournalCARevoked),
		"publish refused":     fsmErr,
		"publish, forwarded":  forwarded,
		"publish, by the log": fmt.Errorf("journal: publish intermediate: %w", forwarded),
	} {
		pe := apierr.FromError(toStatus(err))
		if pe.Code != codes.Unavailable || pe.Reason != apierr.JournalCARevoked || pe.Final() {
			t.Errorf("%s: %v (code %s, reason %s, final %v)", name, pe, pe.Code, pe.Reason, pe.Final())
		}
	}
	if pe := apierr.FromError(toStatus(fmt.Errorf("%w: other", raftfsm.ErrInvalidCommand))); pe.Reason != apierr.InvalidArgument {
		t.Errorf("another invalid command: %v", pe)
	}
}
