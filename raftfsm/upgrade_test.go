package raftfsm_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pact-hpc/pact/internal/snapfile"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// futureCommand is what a newer journal proposes: field 139 stands for an
// operation this version does not know (it decodes as an unknown field and
// leaves the oneof empty).
func futureCommand(t *testing.T, ignorable bool) []byte {
	t.Helper()
	data, err := raftfsm.Encode(&pactv1.Command{AtUnixNano: 1, Actor: "journal/j9", Ignorable: ignorable})
	if err != nil {
		t.Fatal(err)
	}
	return protowire.AppendBytes(protowire.AppendTag(data, 139, protowire.BytesType), []byte{0x0a, 0x01, 'x'})
}

// An unknown operation marked ignorable is skipped: the entries after it
// are applied, and the state is what it would be without it.
func TestUnknownIgnorableCommandIsSkipped(t *testing.T) {
	f := raftfsm.New()
	if res := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: futureCommand(t, true)}).(*raftfsm.Result); res.Err != nil {
		t.Fatalf("ignorable unknown command: %v", res.Err)
	}
	reg, err := raftfsm.Encode(admin.RegisterNode("node-1", "", hw1()))
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: reg}).(*raftfsm.Result); res.Err != nil {
		t.Fatalf("register after it: %v", res.Err)
	}
	if _, ok := f.Node("node-1"); !ok || f.AppliedIndex() != 2 || f.Halted() != "" {
		t.Fatalf("after skipping: node-1 present %v, applied %d, halted %q", ok, f.AppliedIndex(), f.Halted())
	}
}

// An unknown operation not marked ignorable stops the FSM: the halt handler
// is told why, Apply blocks (so Raft applies nothing after it), no snapshot
// is taken, and after Release nothing more is applied.
func TestUnknownCommandHaltsTheFSM(t *testing.T) {
	for _, name := range []string{"unknown operation", "no operation"} {
		t.Run(name, func(t *testing.T) {
			data := futureCommand(t, false)
			if name == "no operation" {
				data, _ = raftfsm.Encode(&pactv1.Command{AtUnixNano: 1, Actor: "journal/j9"})
			}
			f := raftfsm.New()
			halted := make(chan string, 1)
			f.SetHaltHandler(func(index uint64, reason string) { halted <- reason })
			done := make(chan *raftfsm.Result, 1)
			go func() { done <- f.Apply(&raft.Log{Index: 5, Type: raft.LogCommand, Data: data}).(*raftfsm.Result) }()
			var reason string
			select {
			case reason = <-halted:
			case <-time.After(10 * time.Second):
				t.Fatal("no halt reported")
			}
			if !strings.Contains(reason, "log entry 5") || !strings.Contains(reason, "journal/j9") {
				t.Errorf("halt reason %q should name the entry and its proposer", reason)
			}
			select {
			case <-done:
				t.Fatal("Apply returned before Release: Raft would apply the next entries")
			default:
			}
			if _, err := f.Snapshot(); !errors.Is(err, raftfsm.ErrHalted) {
				t.Errorf("Snapshot of a halted FSM: %v, want ErrHalted", err)
			}
			f.Release()
			if res := <-done; !errors.Is(res.Err, raftfsm.ErrHalted) {
				t.Errorf("halted Apply result %v", res.Err)
			}
			reg, _ := raftfsm.Encode(admin.RegisterNode("node-1", "", hw1()))
			f.Apply(&raft.Log{Index: 6, Type: raft.LogCommand, Data: reg})
			if _, ok := f.Node("node-1"); ok || f.AppliedIndex() >= 5 {
				t.Errorf("a halted FSM applied more: node-1 %v, applied index %d", ok, f.AppliedIndex())
			}
		})
	}
}

// Every operation of Command says whether it is ignorable: a new one
// cannot be added without deciding.
func TestEveryOpDeclared(t *testing.T) {
	known := raftfsm.KnownOps()
	for _, op := range raftfsm.DeclaredOps() {
		if !slices.Contains(known, string(op)) {
			t.Errorf("Command op %s has no entry in raftfsm's table of operations (ops, upgrade.go): decide whether an older journal may skip it", op)
		}
	}
	// The proposer's stamp follows the table.
	if raftfsm.Ignorable(admin.RegisterNode("n", "", hw1())) {
		t.Error("register_node is marked ignorable; it decides registry rules")
	}
}

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
		label := raftfsm.OpLabel(cmd)
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
		if got := raftfsm.OpLabel(cmd); got != want {
			t.Errorf("%s labelled %q, want %q", op, got, want)
		}
	}
	if got := raftfsm.OpLabel(&pactv1.Command{}); got != "unknown" {
		t.Errorf("a command without an operation labelled %q", got)
	}
}

func snapshotFile(t *testing.T) []byte {
	t.Helper()
	f, _ := newRegistry(t)
	state, index, nodes, err := f.Consistent()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := snapfile.Write(&b, &pactv1.SnapshotHeader{Domain: "site.example", Index: index, Term: 3, Nodes: uint64(nodes)}, state); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A snapshot file round-trips, and a truncated, altered or newer one is
// refused with its own error.
func TestSnapshotFile(t *testing.T) {
	good := snapshotFile(t)
	h, state, nodes, err := snapfile.Read(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if h.GetDomain() != "site.example" || h.GetFormatVersion() != 2 || nodes == 0 || len(state) == 0 {
		t.Fatalf("header %v, %d nodes", h, nodes)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-3] ^= 0x40
	newer := bytes.Clone(good)
	// The format version is the header's first field (tag 0x08) right
	// after the magic and the length.
	if newer[12] != 0x08 {
		t.Fatalf("header layout changed: byte 12 is %#x", newer[12])
	}
	newer[13] = snapfile.Format + 1
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, snapfile.ErrFormat},
		{"not a snapshot", []byte("hello, this is not a pact snapshot"), snapfile.ErrFormat},
		{"truncated header", good[:15], snapfile.ErrTruncated},
		{"truncated state", good[:len(good)-10], snapfile.ErrTruncated},
		{"trailing bytes", append(bytes.Clone(good), 0), snapfile.ErrCorrupt},
		{"bit flipped", flipped, snapfile.ErrCorrupt},
		{"newer format", newer, snapfile.ErrNewer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := snapfile.Read(bytes.NewReader(tt.data))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

var _ = raftfsmtest.Hardware
