package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/pact-hpc/pact/internal/chaintest"
	"github.com/pact-hpc/pact/internal/clock"
	"github.com/pact-hpc/pact/internal/pki"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
)

// opRegistry holds operator records by serial, as the FSM does.
type opRegistry struct {
	chainRegistry
	mu  sync.Mutex
	ops map[string]*pactv1.Operator
}

func (r *opRegistry) CheckOperator(_, serial string, _ int64) (raftfsm.OperatorStatus, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.ops[serial]; ok {
		return raftfsm.OperatorRecorded, ""
	}
	return raftfsm.OperatorUnrecorded, ""
}

func (r *opRegistry) Operator(serial string) (*pactv1.Operator, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o, ok := r.ops[serial]
	return o, ok
}

// opQuorum records what RecordOperator is asked, and answers a refusal
// sent for confirmation with noLeader when it is set (no leader to ask).
type opQuorum struct {
	chainQuorum
	reg       *opRegistry
	noLeader  error
	recorded  []*pactv1.Operator
	confirmed int
}

func (q *opQuorum) Confirm(_ context.Context, decide func() error, needs func(error) bool) error {
	err := decide()
	if err == nil || !needs(err) {
		return err
	}
	q.confirmed++
	if q.noLeader != nil {
		return q.noLeader
	}
	return decide()
}

func (q *opQuorum) RecordOperator(_ context.Context, _ string, op *pactv1.Operator) error {
	if q.noLeader != nil {
		return q.noLeader
	}
	q.recorded = append(q.recorded, op)
	q.reg.mu.Lock()
	q.reg.ops[op.GetSerial()] = op
	q.reg.mu.Unlock()
	return nil
}

// Which operator credentials are recorded at their first use, and which
// authenticate only as Raft recorded their issue: decided from the chain
// verified, on the real path (authenticate, verifyClient, checkOperator).
func TestOperatorAuthorityIsTheRecord(t *testing.T) {
	s := newChainSet()
	noLeader := errors.New("no leader")
	newAuth := func(t *testing.T, leaderless bool) (*Authenticator, *opRegistry, *opQuorum) {
		reg := &opRegistry{ops: map[string]*pactv1.Operator{}}
		q := &opQuorum{reg: reg}
		if leaderless {
			q.noLeader = noLeader
		}
		cfg := DefaultConfig()
		cfg.Domain, cfg.Roots, cfg.Clock = testDomain, []*x509.Certificate{s.root.Cert, s.root2.Cert}, clock.Real{}
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.Registry, cfg.Bundle, cfg.Quorum, cfg.Peers = reg, s.bundle, q, chainPeers{}
		cfg.PeerVerifier = chainPeerVerifier(t, cfg.Roots)
		cfg.Serving, cfg.Reason, cfg.Refused, cfg.NoLeader = serving, noReason, func(string) {}, noLeader
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a, reg, q
	}
	status := pactv1.AdminService_JournalStatus_FullMethodName
	register := pactv1.AdminService_RegisterNode_FullMethodName
	record := func(reg *opRegistry, l *chaintest.Leaf, issuedBy string, edit func(*pactv1.Operator)) {
		o := OperatorRecord(l.Cert, "bob", pki.RolePlatformAdmin, issuedBy)
		if edit != nil {
			edit(o)
		}
		reg.ops[o.GetSerial()] = o
	}

	t.Run("root-signed, unrecorded: recorded at its first use", func(t *testing.T) {
		for _, root := range []*chaintest.CA{s.root, s.root2} {
			a, _, q := newAuth(t, false)
			op := root.Operator("alice", pki.RolePlatformAdmin)
			if _, err := call(a, register, op.Chain); err != nil {
				t.Fatalf("refused: %v", err)
			}
			if len(q.recorded) != 1 || q.recorded[0].GetIssuedBy() != raftfsm.IssuedAtFirstUse || q.recorded[0].GetSerial() != pki.SerialHex(op.Cert.SerialNumber) {
				t.Fatalf("recorded %v, want the credential at its first use", q.recorded)
			}
		}
	})
	t.Run("root-signed, no leader: served JournalStatus only, unrecorded", func(t *testing.T) {
		a, _, q := newAuth(t, true)
		op := s.root.Operator("alice", pki.RoleViewer)
		if _, err := call(a, status, op.Chain); err != nil {
			t.Fatalf("status refused: %v", err)
		}
		if _, err := call(a, pactv1.AdminService_ListNodes_FullMethodName, op.Chain); !errors.Is(err, noLeader) {
			t.Fatalf("list nodes: %v, want %v", err, noLeader)
		}
		if len(q.recorded) != 0 {
			t.Fatalf("recorded %v", q.recorded)
		}
	})
	for _, tc := range []struct {
		name string
		sent func(*chaintest.Leaf) []*x509.Certificate
	}{
		{"chain sent whole", func(l *chaintest.Leaf) []*x509.Certificate { return l.Chain }},
		{"leaf alone, CAs from the bundle", func(l *chaintest.Leaf) []*x509.Certificate { return l.Chain[:1] }},
	} {
		t.Run("intermediate-signed, "+tc.name, func(t *testing.T) {
			for _, inter := range []*chaintest.CA{s.inter, s.inter2} {
				for _, m := range []string{register, status} {
					for _, leaderless := range []bool{false, true} {
						// Unrecorded: refused, never recorded; with no
						// leader to confirm the refusal, NO_LEADER.
						a, reg, q := newAuth(t, leaderless)
						op := inter.Operator("bob", pki.RolePlatformAdmin)
						_, err := call(a, m, tc.sent(op))
						want := ErrOperatorNotIssued
						if leaderless {
							want = noLeader
						}
						if !errors.Is(err, want) || (!leaderless && !errors.Is(err, ErrUnauthenticated)) {
							t.Fatalf("%s, leaderless %v: %v, want %v", shortMethod(m), leaderless, err, want)
						}
						if len(q.recorded) != 0 || q.confirmed != 1 {
							t.Fatalf("recorded %v, confirmed %d times: want nothing recorded, confirmed once", q.recorded, q.confirmed)
						}

						// Recorded as issued: accepted, leader or not.
						record(reg, op, "admin/admin", nil)
						if _, err := call(a, m, tc.sent(op)); err != nil {
							t.Fatalf("issued credential refused: %v", err)
						}
					}
				}
			}
		})
	}
	for _, tc := range []struct {
		name     string
		issuedBy string
		edit     func(*pactv1.Operator)
	}{
		{"recorded at first use (by a release before this rule)", raftfsm.IssuedAtFirstUse, nil},
		{"its serial recorded for another key", "admin/admin", func(o *pactv1.Operator) { o.SpkiSha256 = "00" }},
		{"its serial recorded for another name", "admin/admin", func(o *pactv1.Operator) { o.Name = "carol" }},
		{"its serial recorded for another role", "admin/admin", func(o *pactv1.Operator) { o.Role = pki.RoleViewer }},
		{"its serial recorded with another expiry", "admin/admin", func(o *pactv1.Operator) { o.NotAfterUnix-- }},
	} {
		t.Run("intermediate-signed, "+tc.name, func(t *testing.T) {
			a, reg, q := newAuth(t, false)
			op := s.inter.Operator("bob", pki.RolePlatformAdmin)
			record(reg, op, tc.issuedBy, tc.edit)
			if _, err := call(a, register, op.Chain); !errors.Is(err, ErrOperatorNotIssued) {
				t.Fatalf("%v, want %v", err, ErrOperatorNotIssued)
			}
			if len(q.recorded) != 0 {
				t.Fatalf("recorded %v", q.recorded)
			}
		})
	}
}
