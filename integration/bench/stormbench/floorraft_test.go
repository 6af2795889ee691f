package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/polltest"
	"github.com/pact-hpc/pact/journal/ca"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The replicating floor commits what pact commits: three stubs elect a
// leader over mutual TLS, and an entry proposed at a follower (forwarded
// with JournalPeerService.Propose over the stubs' mTLS) and one at the
// leader are each applied on every stub, as one log entry each. Real TLS,
// gRPC, hashicorp/raft and raft-boltdb, in one process.
func TestReplicatingFloorCommitsOnEveryStub(t *testing.T) {
	dir := t.TempDir()
	if _, err := ca.InitDev(dir, "floor.test", time.Now()); err != nil {
		t.Fatal(err)
	}
	up, err := ca.LoadKeyFileAuthority(filepath.Join(dir, ca.RootCertFile), filepath.Join(dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := freeAddrs(6)
	if err != nil {
		t.Fatal(err)
	}
	var peers []floorPeer
	var cas []*ca.CA
	for i := range 3 {
		id := fmt.Sprintf("floor-%d", i+1)
		peers = append(peers, floorPeer{id: id, grpc: addrs[2*i], raft: addrs[2*i+1]})
		c, err := newStubCA(up, id)
		if err != nil {
			t.Fatal(err)
		}
		cas = append(cas, c)
		if err := os.WriteFile(filepath.Join(dir, "floor-inter-"+id+".der"), c.ServerCertificate().Certificate[1], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stubs []*floorRaft
	for i, p := range peers {
		fr, err := startFloorRaft(dir, p.id, p.raft, peers, cas[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(fr.close)
		// Each stub's peer service on its gRPC address, behind the
		// handshake check the stubs make of every client.
		fj := &floorJournal{id: p.id, ca: cas[i], dir: dir}
		lis, err := net.Listen("tcp", p.grpc)
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer(grpc.Creds(credentials.NewTLS(stubServerTLS(cas[i], fj))))
		pactv1.RegisterJournalPeerServiceServer(s, fr)
		go func() { _ = s.Serve(lis) }()
		t.Cleanup(s.Stop)
		stubs = append(stubs, fr)
	}
	polltest.Until(t, 30*time.Second, 20*time.Millisecond, func() bool {
		for _, s := range stubs {
			if !s.ready() {
				return false
			}
		}
		return true
	}, "no leader known to every stub")
	var leader, follower *floorRaft
	for _, s := range stubs {
		if s.r.State() == raft.Leader {
			leader = s
		} else {
			follower = s
		}
	}
	if leader == nil || follower == nil {
		t.Fatal("no leader and follower among the stubs")
	}
	iss := issueFor(t, cas[0], "n1")
	before := leader.fsm.applied.Load()
	ctx := context.Background()
	if err := follower.commit(ctx, activateEntry("n1", &pactv1.HardwareIdentity{BmcSerial: "SN1"}, iss)); err != nil {
		t.Fatalf("a follower's entry: %v", err)
	}
	if err := leader.commit(ctx, renewEntry("n1", iss.Cert, issueFor(t, cas[0], "n1"))); err != nil {
		t.Fatalf("the leader's entry: %v", err)
	}
	polltest.Until(t, 30*time.Second, 20*time.Millisecond, func() bool {
		for _, s := range stubs {
			if s.fsm.applied.Load() != before+2 {
				return false
			}
		}
		return true
	}, "the two entries not applied on every stub")
}

func issueFor(t *testing.T, c *ca.CA, node string) *ca.Issued {
	t.Helper()
	_, csrDER, err := newAgentKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ca.ParseCSR(csrDER)
	if err != nil {
		t.Fatal(err)
	}
	iss, err := c.SignAgent(csr, node)
	if err != nil {
		t.Fatal(err)
	}
	return iss
}
