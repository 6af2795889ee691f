package raftnode

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
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
