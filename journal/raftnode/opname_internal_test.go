package raftnode

import (
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pact-hpc/pact/internal/clock/fakeclock"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// Every operation of the Command oneof has a label of its own in
// pact_journal_raft_apply_seconds{op}, and the labels dashboards already
// read keep their names.
func TestEveryOpHasItsOwnLabel(t *testing.T) {
	oneof := (&pactv1.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("op")
	seen := map[string]protoreflect.Name{}
	for i := 0; i < oneof.Fields().Len(); i++ {
		fd := oneof.Fields().Get(i)
		cmd := &pactv1.Command{}
		m := cmd.ProtoReflect()
		m.Set(fd, m.NewField(fd))
		label := opName(cmd)
		if label == "unknown" || label == "" {
			t.Errorf("%s is labelled %q", fd.Name(), label)
		}
		if other, dup := seen[label]; dup {
			t.Errorf("%s and %s share the label %q", fd.Name(), other, label)
		}
		seen[label] = fd.Name()
	}
	for op, want := range map[string]string{"register_node": "register", "activate": "activate", "batch": "batch", "set_quorum_level": "set_quorum_level"} {
		fd := oneof.Fields().ByName(protoreflect.Name(op))
		cmd := &pactv1.Command{}
		cmd.ProtoReflect().Set(fd, cmd.ProtoReflect().NewField(fd))
		if got := opName(cmd); got != want {
			t.Errorf("%s labelled %q, want %q", op, got, want)
		}
	}
	if got := opName(&pactv1.Command{}); got != "unknown" {
		t.Errorf("a command without an operation labelled %q", got)
	}
}

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
