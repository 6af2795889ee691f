package raftfsm

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// ErrHalted is the result of every entry handed to an FSM that has stopped
// applying the log (it met a command it does not know and may not skip).
var ErrHalted = errors.New("raftfsm: stopped applying the log")

// opSpec is what the journals need to know of an operation besides how to
// apply it.
type opSpec struct {
	// ignorable: a journal of an older version that does not know the
	// operation may skip it without its registry diverging from the
	// others' (Consul's "ignore unknown type" flag). An operation is
	// ignorable only if nothing another command or a later decision
	// depends on changes with it. Every operation so far but the quorum
	// id feeds a registry rule or the liveness that decides Inactive.
	ignorable bool
	// label names the operation in pact_journal_raft_apply_seconds{op}
	// when it is not the oneof case's name (a label dashboards already
	// read).
	label string
}

// ops is the one table of the operations this version knows, by their
// case of the Command oneof: whether each is ignorable (the proposer
// stamps it, Ignorable) and its metric label (OpLabel). A new operation is
// added here with its answers; TestEveryOpDeclared fails until it is.
var ops = map[protoreflect.Name]opSpec{
	"register_node":        {ignorable: false, label: "register"},
	"activate":             {ignorable: false},
	"publish_intermediate": {ignorable: false},
	"renew":                {ignorable: false},
	"decommission":         {ignorable: false},
	"assign":               {ignorable: false},
	"liveness_digest":      {ignorable: false},
	"mark_inactive":        {ignorable: false},
	"svid_seen":            {ignorable: false},
	"standby_issued":       {ignorable: false},
	"standby_activated":    {ignorable: false},
	"release":              {ignorable: false},
	"update_node":          {ignorable: false},
	// Join tokens and fencing decide whether a node may enroll; operator
	// records whether a credential authenticates; a retired intermediate
	// leaves the trust bundle. A journal skipping any of them would accept
	// what the others refuse.
	"create_join_token":   {ignorable: false},
	"revoke_join_tokens":  {ignorable: false},
	"fence":               {ignorable: false},
	"record_operator":     {ignorable: false},
	"revoke_operator":     {ignorable: false},
	"retire_intermediate": {ignorable: false},
	// A revoked journal CA and its intermediates leave the trust bundle: a
	// journal skipping the revocation would go on trusting them.
	"revoke_journal_ca": {ignorable: false},
	// The journal CA a journal id is bound to decides who is a peer.
	"record_journal_ca": {ignorable: false},
	// The quorum id is checked by the journals, never by another command:
	// a journal that does not know it loses nothing by skipping it.
	"set_quorum_id": {ignorable: true},
	// Apply decides by the quorum's level: a journal that skipped raising
	// it would go on applying the rules of the level below, and diverge.
	"set_quorum_level": {ignorable: false},
	// Federation (level 3): the federated bundles decide whose journals
	// may call the cross-domain claim feed, and the policy decides an
	// enrollment; a journal skipping them would decide otherwise.
	"federate_domain":         {ignorable: false},
	"remove_federated_domain": {ignorable: false},
	"update_federated_bundle": {ignorable: false},
	// Boot policies (level 3) decide enrollments and renewals of TPM
	// nodes: a journal skipping them would decide otherwise.
	"set_boot_policy":    {ignorable: false},
	"remove_boot_policy": {ignorable: false},
	// A batch carries commands none of which may be skipped.
	"batch": {ignorable: false},
}

// opOf returns the name of cmd's case of the Command oneof, "" if it has
// none.
func opOf(cmd *pactv1.Command) protoreflect.Name {
	m := cmd.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("op"))
	if fd == nil {
		return ""
	}
	return fd.Name()
}

// Ignorable reports whether a journal that does not know cmd's operation
// may skip it. The proposer copies it into Command.ignorable.
func Ignorable(cmd *pactv1.Command) bool { return ops[opOf(cmd)].ignorable }

// OpLabel names cmd's operation for metrics
// (pact_journal_raft_apply_seconds{op}): its case of the Command oneof, or
// the label the table keeps for it; "unknown" for a command without one.
func OpLabel(cmd *pactv1.Command) string {
	op := opOf(cmd)
	switch {
	case op == "":
		return "unknown"
	case ops[op].label != "":
		return ops[op].label
	}
	return string(op)
}

// HasUnknownOp reports whether cmd, or a command of its batch, names an
// operation this version does not know and is not marked ignorable: Apply
// would stop at its entry.
func HasUnknownOp(cmd *pactv1.Command) bool { return unknownIn(cmd) != nil }

// unknownOp describes an entry whose operation this version does not know.
func unknownOp(cmd *pactv1.Command, index uint64) string {
	var fields []string
	raw := cmd.ProtoReflect().GetUnknown()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			break
		}
		fields = append(fields, fmt.Sprint(num))
		m := protowire.ConsumeFieldValue(num, typ, raw[n:])
		if m < 0 {
			break
		}
		raw = raw[n+m:]
	}
	what := "an entry with no operation"
	if len(fields) > 0 {
		what = "an operation this version does not know (field " + strings.Join(fields, ",") + ")"
	}
	return fmt.Sprintf("log entry %d (from %s) carries %s and is not marked ignorable", index, cmd.GetActor(), what)
}
