package raftfsm_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
	"github.com/pact-hpc/pact/raftfsm"
	"github.com/pact-hpc/pact/raftfsm/raftfsmtest"
)

func federated(name string) *pactv1.FederatedDomain {
	return &pactv1.FederatedDomain{
		Name:            name,
		Endpoints:       []string{"https://" + name + ":8443/"},
		X509Authorities: [][]byte{[]byte("root of " + name)},
		Policy:          raftfsm.PolicyWarn,
	}
}

// Federation is a level-3 feature: below it every federation command is
// refused QUORUM_VERSION and changes nothing, so a quorum still running a
// release before it never sees one applied on some journals only.
func TestFederationNeedsLevel3(t *testing.T) {
	f := raftfsm.New()
	a := &raftfsmtest.Applier{FSM: f}
	mustApply(t, a, at(t0).SetQuorumLevel(2))
	for _, cmd := range []*pactv1.Command{
		admin.FederateDomain(federated("b.example")),
		admin.RemoveFederatedDomain("b.example"),
		journal.UpdateFederatedBundle(&pactv1.UpdateFederatedBundleOp{Name: "b.example", X509Authorities: [][]byte{[]byte("x")}, FetchedAtUnixNano: 5}),
	} {
		res := applyFails(t, a, cmd, raftfsm.ErrQuorumVersion)
		var qv *raftfsm.QuorumVersionError
		if !errors.As(res.Err, &qv) || qv.Need != 3 || qv.Have != 2 {
			t.Errorf("%v: err %v, want a QuorumVersionError needing 3 at 2", cmd.GetOp(), res.Err)
		}
	}
}

func TestFederateListRemove(t *testing.T) {
	f, a := raftfsmtest.AtFeatureLevel()
	mustApply(t, a, admin.FederateDomain(federated("b.example")))
	ds := f.FederatedDomains()
	if len(ds) != 1 || ds[0].GetName() != "b.example" || ds[0].GetAddedBy() != admin.Actor || ds[0].GetFetchedAtUnixNano() != admin.AtUnixNano || ds[0].GetAddedAtIndex() != a.Index {
		t.Fatalf("federated domains %v", ds)
	}
	for _, bad := range []*pactv1.FederatedDomain{
		func() *pactv1.FederatedDomain { d := federated("B example"); return d }(),
		func() *pactv1.FederatedDomain {
			d := federated("c.example")
			d.Endpoints = []string{"http://c.example/"}
			return d
		}(),
		func() *pactv1.FederatedDomain { d := federated("c.example"); d.Endpoints = nil; return d }(),
		func() *pactv1.FederatedDomain { d := federated("c.example"); d.Policy = "ignore"; return d }(),
		func() *pactv1.FederatedDomain { d := federated("c.example"); d.X509Authorities = nil; return d }(),
		func() *pactv1.FederatedDomain {
			d := federated("c.example")
			d.X509Authorities = [][]byte{make([]byte, raftfsm.MaxAuthorityBytes+1)}
			return d
		}(),
		func() *pactv1.FederatedDomain {
			d := federated("c.example")
			d.EndpointSpiffeId = "spiffe://b.example/pact-journal/j1"
			return d
		}(),
	} {
		applyFails(t, a, admin.FederateDomain(bad), raftfsm.ErrInvalidCommand)
	}
	applyFails(t, a, admin.RemoveFederatedDomain("c.example"), raftfsm.ErrNotFound)
	mustApply(t, a, admin.RemoveFederatedDomain("b.example"))
	if ds := f.FederatedDomains(); len(ds) != 0 {
		t.Fatalf("after remove: %v", ds)
	}
	var actions []string
	for _, e := range f.Audit("", 0, 100) {
		actions = append(actions, e.GetAction())
	}
	if fmt.Sprint(actions[len(actions)-2:]) != "[domain-federate domain-remove]" {
		t.Errorf("audit actions %v", actions)
	}
}

// The state is bounded: MaxFederatedDomains, then refused until one goes.
func TestFederatedDomainsBounded(t *testing.T) {
	_, a := raftfsmtest.AtFeatureLevel()
	for i := 0; i < raftfsm.MaxFederatedDomains; i++ {
		mustApply(t, a, admin.FederateDomain(federated(fmt.Sprintf("d%d.example", i))))
	}
	applyFails(t, a, admin.FederateDomain(federated("one-more.example")), raftfsm.ErrInvalidCommand)
	// Replacing one already federated is no new domain.
	mustApply(t, a, admin.FederateDomain(federated("d0.example")))
}

// A refresh records a newer fetch; a lower sequence is refused (the last
// good bundle is kept), and a refresh for a federation removed or made
// again since it began changes nothing.
func TestUpdateFederatedBundle(t *testing.T) {
	f, a := raftfsmtest.AtFeatureLevel()
	mustApply(t, a, admin.FederateDomain(federated("b.example")))
	d, _ := f.FederatedDomain("b.example")
	upd := func(seq uint64, fetched int64, expect uint64) *pactv1.Command {
		return journal.UpdateFederatedBundle(&pactv1.UpdateFederatedBundleOp{Name: "b.example", ExpectAddedAtIndex: expect,
			X509Authorities: [][]byte{[]byte(fmt.Sprint("root ", seq))}, Sequence: seq, RefreshHintSeconds: 300, FetchedAtUnixNano: fetched})
	}
	mustApply(t, a, upd(10, d.GetFetchedAtUnixNano()+1, d.GetAddedAtIndex()))
	got, _ := f.FederatedDomain("b.example")
	if got.GetSequence() != 10 || string(got.GetX509Authorities()[0]) != "root 10" || got.GetRefreshHintSeconds() != 300 {
		t.Fatalf("after refresh: %v", got)
	}
	applyFails(t, a, upd(9, d.GetFetchedAtUnixNano()+2, d.GetAddedAtIndex()), raftfsm.ErrInvalidCommand)
	if res := applyUnchanged(t, a, upd(11, d.GetFetchedAtUnixNano()+3, d.GetAddedAtIndex()+100)); !res.Idempotent || res.Err != nil {
		t.Errorf("a refresh of another federation: %+v", res)
	}
	if res := applyUnchanged(t, a, upd(11, d.GetFetchedAtUnixNano(), d.GetAddedAtIndex())); !res.Idempotent {
		t.Errorf("an older fetch applied: %+v", res)
	}
}

// Federated domains survive a snapshot and restore unchanged.
func TestFederatedDomainsInSnapshots(t *testing.T) {
	f, a := raftfsmtest.AtFeatureLevel()
	mustApply(t, a, admin.FederateDomain(federated("b.example")))
	mustApply(t, a, admin.FederateDomain(federated("a.example")))
	snap := snapshotBytes(t, f)
	g := raftfsm.New()
	if err := raftfsmtest.RestoreBytes(g, snap); err != nil {
		t.Fatal(err)
	}
	want, got := f.FederatedDomains(), g.FederatedDomains()
	if len(got) != 2 {
		t.Fatalf("restored %d federated domains, want 2", len(got))
	}
	for i := range want {
		if !proto.Equal(want[i], got[i]) {
			t.Errorf("restored %v, want %v", got[i], want[i])
		}
	}
}

// An activation keeps the claims the journal decided on (how old, and
// whether one named the hardware) in the node's record and its audit
// entry, at federation's level; below it the field is ignored, as a
// journal of an earlier release would ignore it.
func TestActivationKeepsTheClaimsItDecidedOn(t *testing.T) {
	const note = "a.example: read 40s ago (2026-12-02T11:00:00Z), none on this hardware"
	for _, tc := range []struct {
		name  string
		level uint32
		want  string
	}{{"at level 3", 3, note}, {"at level 2", 2, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			f := raftfsm.New()
			a := &raftfsmtest.Applier{FSM: f}
			mustApply(t, a, at(t0).SetQuorumLevel(tc.level))
			mustApply(t, a, admin.RegisterNode("node-1", "", hw1()))
			cmd := journal.Activate("node-1", hw1(), cert("01", "spki-1"))
			cmd.GetActivate().ClaimsChecked = note
			e := applyRecords(t, a, cmd, "enroll", "node-1")
			n, _ := f.Node("node-1")
			if n.GetClaimsChecked() != tc.want {
				t.Errorf("node's claims checked %q, want %q", n.GetClaimsChecked(), tc.want)
			}
			if got := strings.Contains(e.GetDetail(), "claims "+note); got != (tc.want != "") {
				t.Errorf("audit detail %q: claims named %v, want %v", e.GetDetail(), got, tc.want != "")
			}
		})
	}
	// Bounded: a proposer's note longer than the bound is cut.
	f, a := raftfsmtest.AtFeatureLevel()
	mustApply(t, a, admin.RegisterNode("node-1", "", hw1()))
	cmd := journal.Activate("node-1", hw1(), cert("01", "spki-1"))
	cmd.GetActivate().ClaimsChecked = strings.Repeat("é", 10000)
	mustApply(t, a, cmd)
	if n, _ := f.Node("node-1"); len(n.GetClaimsChecked()) > 4096 || !strings.HasSuffix(n.GetClaimsChecked(), "...") || !utf8.ValidString(n.GetClaimsChecked()) {
		t.Errorf("a long note kept as %d bytes (valid UTF-8 %v), want it cut to 4096 at a rune", len(n.GetClaimsChecked()), utf8.ValidString(n.GetClaimsChecked()))
	}
}
