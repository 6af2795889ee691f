package raftnode

import (
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Every operation of the Command oneof is stamped by the one stamp every
// proposal passes (Propose, ProposeBatched, a batch's envelope): this
// journal's time, whatever the command carried, and the ignorable marker
// of raftfsm's table (TestEveryOpDeclared keeps it complete).
func TestEveryOpIsStamped(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	n := &Node{cfg: Config{Clock: fakeclock.New(now)}}
	oneof := (&pactv1.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("op")
	ignorable := 0
	for i := 0; i < oneof.Fields().Len(); i++ {
		fd := oneof.Fields().Get(i)
		for _, marked := range []bool{false, true} {
			cmd := &pactv1.Command{AtUnixNano: 1, Ignorable: marked}
			m := cmd.ProtoReflect()
			m.Set(fd, m.NewField(fd))
			n.stamp(cmd)
			if cmd.GetAtUnixNano() != now.UnixNano() {
				t.Errorf("%s stamped at %d, want the journal's clock %d", fd.Name(), cmd.GetAtUnixNano(), now.UnixNano())
			}
			if want := raftfsm.Ignorable(cmd); cmd.GetIgnorable() != want {
				t.Errorf("%s stamped ignorable=%v, the table says %v", fd.Name(), cmd.GetIgnorable(), want)
			}
			if marked && cmd.GetIgnorable() {
				ignorable++
			}
		}
	}
	if ignorable != 1 {
		t.Errorf("%d operations stamped ignorable, want 1 (set_quorum_id)", ignorable)
	}
	if cmd := n.stamp(&pactv1.Command{Ignorable: true}); cmd.GetIgnorable() {
		t.Error("a command without an operation is stamped ignorable")
	}
}
