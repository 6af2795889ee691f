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

// ignorable says, for each operation this version knows, whether a journal
// of an older version that does not know it may skip it without its
// registry diverging from the others' (Consul's "ignore unknown type"
// flag). An operation is ignorable only if nothing another command or a
// later decision depends on changes with it. Every operation so far feeds
// a registry rule or the liveness that decides Inactive, so none is.
// A new operation is added here with its answer; TestEveryOpDeclared
// fails until it is.
var ignorable = map[protoreflect.Name]bool{
	"register_node":        false,
	"activate":             false,
	"publish_intermediate": false,
	"renew":                false,
	"decommission":         false,
	"assign":               false,
	"liveness_digest":      false,
	"mark_inactive":        false,
	"svid_seen":            false,
	"standby_issued":       false,
	"standby_activated":    false,
	"release":              false,
	"update_node":          false,
	// Join tokens and fencing decide whether a node may enroll; operator
	// records whether a credential authenticates; a retired intermediate
	// leaves the trust bundle. A journal skipping any of them would accept
	// what the others refuse.
	"create_join_token":   false,
	"revoke_join_tokens":  false,
	"fence":               false,
	"record_operator":     false,
	"revoke_operator":     false,
	"retire_intermediate": false,
	// A revoked journal CA and its intermediates leave the trust bundle: a
	// journal skipping the revocation would go on trusting them.
	"revoke_journal_ca": false,
	// The journal CA a journal id is bound to decides who is a peer.
	"record_journal_ca": false,
	// The quorum id is checked by the journals, never by another command:
	// a journal that does not know it loses nothing by skipping it.
	"set_quorum_id": true,
	// Apply decides by the quorum's level: a journal that skipped raising
	// it would go on applying the rules of the level below, and diverge.
	"set_quorum_level": false,
	// Federation (level 3): the federated bundles decide whose journals
	// may call the cross-domain claim feed, and the policy decides an
	// enrollment; a journal skipping them would decide otherwise.
	"federate_domain":         false,
	"remove_federated_domain": false,
	"update_federated_bundle": false,
	// Boot policies (level 3) decide enrollments and renewals of TPM
	// nodes: a journal skipping them would decide otherwise.
	"set_boot_policy":    false,
	"remove_boot_policy": false,
	// A batch carries commands none of which may be skipped.
	"batch": false,
}

// Ignorable reports whether a journal that does not know cmd's operation
// may skip it. The proposer copies it into Command.ignorable.
func Ignorable(cmd *pactv1.Command) bool {
	fd := cmd.ProtoReflect().WhichOneof(cmd.ProtoReflect().Descriptor().Oneofs().ByName("op"))
	if fd == nil {
		return false
	}
	return ignorable[fd.Name()]
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
