package raftfsm_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

// certUnder is a certificate of node-1's signed by the intermediate with
// serial issuer.
func certUnder(serial, spki, issuer string) *pactv1.CertificateInfo {
	c := cert(serial, spki)
	c.IssuerSerial = issuer
	return c
}

// A node whose current certificate the registry's own records already
// refuse everywhere — its issuer intermediate revoked (at once or at the
// end of a retirement), the issuer's journal CA revoked, or its serial
// revoked — enrolls again with a new key at once, without the takeover
// window, and the activation is audited as a takeover saying why. Anything
// short of that, as of the command's own time, still waits for the window.
func TestTakeoverOfAWithdrawnCertificate(t *testing.T) {
	enrolledAt := t0 + 10 // journalCARegistry publishes at t0..t0+2
	for _, tt := range []struct {
		name   string
		issuer string
		// withdraw is applied after node-1 enrolled with certificate 0a
		// under issuer, at enrolledAt.
		withdraw *pactv1.Command
		retakeAt int64 // the new key's activation, no takeover cutoff
		detail   string
	}{
		{"issuer revoked", "i-1", at(enrolledAt+5).RetireIntermediate(0, "i-1"), enrolledAt + 6, "its issuer i-1 (journal journal-1's intermediate) was revoked"},
		{"issuer revoked, activation at the same time", "i-1", at(enrolledAt+5).RetireIntermediate(0, "i-1"), enrolledAt + 5, "its issuer i-1 (journal journal-1's intermediate) was revoked"},
		{"issuer retired, past its revoke time", "i-3", at(enrolledAt+5).RetireIntermediate((enrolledAt+60)*1e9, "i-3"), enrolledAt + 60, "its issuer i-3 (journal journal-3's intermediate) was revoked"},
		{"issuer's journal CA revoked", "i-1", at(enrolledAt+5).RevokeJournalCA("host stolen", "ca-1"), enrolledAt + 6, "its issuer i-1 was revoked with journal journal-1's journal CA ca-1"},
		{"a root-signed issuer revoked", "i-0", at(enrolledAt+5).RetireIntermediate(0, "i-0"), enrolledAt + 6, "its issuer i-0 (journal journal-2's intermediate) was revoked"},

		{"issuer live", "i-1", nil, enrolledAt + 6, ""},
		{"another intermediate revoked", "i-1", at(enrolledAt+5).RetireIntermediate(0, "i-3"), enrolledAt + 6, ""},
		{"another journal's journal CA revoked", "i-1", at(enrolledAt+5).RevokeJournalCA("x", "ca-3"), enrolledAt + 6, ""},
		{"issuer retiring, before its revoke time", "i-3", at(enrolledAt+5).RetireIntermediate((enrolledAt+60)*1e9, "i-3"), enrolledAt + 59, ""},
		// As of the command's own time: a proposer whose clock is behind
		// the revocation's does not see it yet.
		{"issuer revoked after the command's time", "i-1", at(enrolledAt+50).RetireIntermediate(0, "i-1"), enrolledAt + 49, ""},
		{"journal CA revoked after the command's time", "i-1", at(enrolledAt+50).RevokeJournalCA("x", "ca-1"), enrolledAt + 49, ""},
		// An issuer the registry does not hold proves nothing.
		{"issuer not recorded", "i-9", nil, enrolledAt + 6, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, a := journalCARegistry(t)
			mustApply(t, a, admin.RegisterNode("node-1", "vc-a", hw1()))
			mustApply(t, a, at(enrolledAt).Activate("node-1", hw1(), certUnder("0a", "spki-a", tt.issuer)))
			if tt.withdraw != nil {
				mustApply(t, a, tt.withdraw)
			}
			old, _ := f.Node("node-1")
			retake := at(tt.retakeAt)
			if got := f.CertWithdrawn(old.GetCert(), retake.AtUnixNano); got != tt.detail {
				t.Errorf("CertWithdrawn = %q, want %q", got, tt.detail)
			}
			// The new certificate comes from a live intermediate.
			next := "i-2"
			if tt.withdraw.GetRevokeJournalCa() != nil {
				next = "i-3"
			}
			cmd := retake.Activate("node-1", hw1(), certUnder("0b", "spki-b", next))
			if tt.detail == "" {
				applyFails(t, a, cmd, raftfsm.ErrAlreadyActive)
				return
			}
			e := applyRecords(t, a, cmd, "takeover", "node-1")
			if want := "replaces serial 0a: " + tt.detail; e.GetSerial() != "0b" || e.GetDetail() != want {
				t.Errorf("audit entry %v, want serial 0b, detail %q", e, want)
			}
			n, _ := f.Node("node-1")
			if n.GetState() != pactv1.NodeState_NODE_STATE_ACTIVE || n.GetCert().GetSerial() != "0b" || n.GetActivatedAtUnixNano() != retake.AtUnixNano {
				t.Errorf("node = %v, want active with certificate 0b since %d", n, retake.AtUnixNano)
			}
			if ls := f.LastSeen("node-1"); ls != retake.AtUnixNano {
				t.Errorf("LastSeen = %d, want the takeover's time %d", ls, retake.AtUnixNano)
			}
			// The new certificate is live: the next new key waits again,
			// and a retry with the new key is the same certificate.
			if res := applyUnchanged(t, a, at(tt.retakeAt+1).Activate("node-1", hw1(), certUnder("0c", "spki-b", next))); !res.Idempotent || res.Node.GetCert().GetSerial() != "0b" {
				t.Errorf("retry with the new key: %+v, want idempotent with 0b", res)
			}
			applyFails(t, a, at(tt.retakeAt+1).Activate("node-1", hw1(), certUnder("0d", "spki-d", next)), raftfsm.ErrAlreadyActive)
		})
	}
}

// What else an activation checks still holds for a withdrawn certificate:
// the hardware, a fence, a key that is another node's, a join token the
// node's policy requires.
func TestTakeoverOfAWithdrawnCertificateStillChecks(t *testing.T) {
	setup := func(t *testing.T) (*raftfsm.FSM, *raftfsmtest.Applier) {
		f, a := journalCARegistry(t)
		mustApply(t, a, admin.RegisterNode("node-1", "vc-a", hw1()))
		mustApply(t, a, admin.RegisterNode("node-3", "vc-b", hw3()))
		mustApply(t, a, at(t0+10).Activate("node-1", hw1(), certUnder("0a", "spki-a", "i-1")))
		mustApply(t, a, at(t0+10).Activate("node-3", hw3(), certUnder("03", "spki-3", "i-3")))
		mustApply(t, a, at(t0+11).RevokeJournalCA("host stolen", "ca-1"))
		return f, a
	}
	retake := at(t0 + 12)
	t.Run("hardware", func(t *testing.T) {
		_, a := setup(t)
		applyFails(t, a, retake.Activate("node-1", raftfsmtest.Hardware("S9", mac1), certUnder("0b", "spki-b", "i-3")), raftfsm.ErrNodeNotEnrolled)
	})
	t.Run("another node's key", func(t *testing.T) {
		_, a := setup(t)
		applyFails(t, a, retake.Activate("node-1", hw1(), certUnder("0b", "spki-3", "i-3")), raftfsm.ErrKeyInUse)
	})
	t.Run("fenced", func(t *testing.T) {
		_, a := setup(t)
		mustApply(t, a, admin.Fence("node-1", "under investigation"))
		applyFails(t, a, retake.Activate("node-1", hw1(), certUnder("0b", "spki-b", "i-3")), raftfsm.ErrNodeFenced)
	})
	t.Run("the replicas agree", func(t *testing.T) {
		f, a := setup(t)
		g, b := setup(t)
		mustApply(t, a, retake.Activate("node-1", hw1(), certUnder("0b", "spki-b", "i-3")))
		mustApply(t, b, retake.Activate("node-1", hw1(), certUnder("0b", "spki-b", "i-3")))
		if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, g)) {
			t.Error("the replicas differ")
		}
	})
}

// A node whose current serial is in the revocation set (a restored state
// can hold one Active) is not held by the window either.
func TestTakeoverOfARevokedSerial(t *testing.T) {
	f := raftfsm.New()
	old := certUnder("0a", "spki-a", "i-1")
	restoreNodes(t, f, &pactv1.Snapshot{
		Nodes:       []*pactv1.Node{node("node-1", pactv1.NodeState_NODE_STATE_ACTIVE, hw1(), old)},
		Revoked:     []*pactv1.RevokedSerial{{Serial: "0a", NotAfterUnix: old.GetNotAfterUnix()}},
		QuorumLevel: &pactv1.QuorumLevel{Level: raftfsm.FeatureLevel},
	})
	a := &raftfsmtest.Applier{FSM: f}
	e := applyRecords(t, a, journal.Activate("node-1", hw1(), certUnder("0b", "spki-b", "i-1")), "takeover", "node-1")
	if want := "replaces serial 0a: that serial is revoked"; e.GetDetail() != want {
		t.Errorf("audit detail %q, want %q", e.GetDetail(), want)
	}
	n, _ := f.Node("node-1")
	if !proto.Equal(n.GetCert(), certUnder("0b", "spki-b", "i-1")) {
		t.Errorf("node = %v", n)
	}
}
