package main

// The replicating floor (storm -floor, the default since issue 39): the
// stub journals of floor.go also commit one Raft entry per enrollment and
// per renewal, through hashicorp/raft with raft-boltdb on three nodes, over
// mutual TLS, with pact-journal's Raft settings, before they answer. The
// entry is the command pact itself writes (an ActivateOp or a RenewOp with
// the certificate's record), one per log entry: the only batching is
// Raft's own (BatchApplyCh), never a batcher of the stub's. A follower
// forwards its entry to the leader with one JournalPeerService.Propose
// call over the stubs' mTLS, as pact's followers do. The FSM decodes each
// entry and keeps a count: no registry, no checks.
//
// So the storm over this floor is what pact's own code costs (the
// authentication, the binding checks, the registry, audit, streams,
// admission, metrics), with the one replicated write per node the design
// requires counted on both sides. -floor-replicate=false keeps the old
// floor (nothing kept), to compare with the rounds before.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/transport"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/raftnode"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// floorApplyTimeout is pact-journal's ApplyTimeout (raftnode.DefaultConfig).
const floorApplyTimeout = 10 * time.Second

// floorPeer is one stub of the replicating floor: its Raft id, Raft
// address and gRPC address (where its JournalPeerService takes forwarded
// entries).
type floorPeer struct {
	id, raft, grpc string
}

// parseFloorPeers reads -peers: id=raft-addr=grpc-addr, comma-separated.
func parseFloorPeers(s string) ([]floorPeer, error) {
	var out []floorPeer
	for _, p := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(p), "=")
		if len(f) != 3 || f[0] == "" || f[1] == "" || f[2] == "" {
			return nil, fmt.Errorf("-peers: %q is not id=raft-addr=grpc-addr", p)
		}
		out = append(out, floorPeer{id: f[0], raft: f[1], grpc: f[2]})
	}
	return out, nil
}

func formatFloorPeers(peers []floorPeer) string {
	s := make([]string, len(peers))
	for i, p := range peers {
		s[i] = p.id + "=" + p.raft + "=" + p.grpc
	}
	return strings.Join(s, ",")
}

// floorRaft is one stub's Raft node and its way to the leader.
type floorRaft struct {
	pactv1.UnimplementedJournalPeerServiceServer
	r       *raft.Raft
	store   *raftboltdb.BoltStore
	trans   *raft.NetworkTransport
	fsm     *floorFSM
	grpcOf  map[raft.ServerAddress]string // a peer's gRPC address by its Raft address
	creds   credentials.TransportCredentials
	mu      sync.Mutex
	clients map[string]pactv1.JournalPeerServiceClient
	conns   []*grpc.ClientConn
}

// floorFSM decodes every entry, as a journal's FSM does, and counts them.
type floorFSM struct{ applied atomic.Uint64 }

func (f *floorFSM) Apply(l *raft.Log) any {
	var c pactv1.Command
	if err := proto.Unmarshal(l.Data, &c); err != nil {
		panic(fmt.Sprintf("floor FSM: entry %d: %v", l.Index, err))
	}
	f.applied.Add(1)
	return nil
}

func (f *floorFSM) Snapshot() (raft.FSMSnapshot, error) { return floorSnap(f.applied.Load()), nil }

func (f *floorFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	f.applied.Store(binary.BigEndian.Uint64(b[:]))
	return nil
}

type floorSnap uint64

func (s floorSnap) Persist(sink raft.SnapshotSink) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(s))
	if _, err := sink.Write(b[:]); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (floorSnap) Release() {}

// floorStream is Raft over mutual TLS: both sides present their stub's
// server certificate and accept only a peer whose certificate one of the
// stubs' intermediates signed (verifyLeafSignedBy, the check the stubs
// make of an agent). The handshake runs on Raft's connection goroutine, at
// its first read or write.
type floorStream struct {
	net.Listener
	server, client *tls.Config
}

func (s *floorStream) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, s.server), nil
}

func (s *floorStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, s.client)
	_ = tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = tc.SetDeadline(time.Time{})
	return tc, nil
}

// peerIssuers reads every stub's intermediate from dir each time: a peer
// may connect before this stub has read them all (they start one by one).
func peerIssuers(dir string) []*x509.Certificate {
	paths, _ := filepath.Glob(filepath.Join(dir, "floor-inter-*.der"))
	var out []*x509.Certificate
	for _, p := range paths {
		if der, err := os.ReadFile(p); err == nil {
			if c, err := x509.ParseCertificate(der); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// startFloorRaft starts this stub's Raft node on raftAddr, its state in
// dir/raft-ID, bootstrapped (when new) with peers as the voters.
func startFloorRaft(dir, id, raftAddr string, peers []floorPeer, authority *ca.CA) (*floorRaft, error) {
	server := authority.ServerCertificate()
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("floor: a Raft peer without a certificate")
		}
		return verifyLeafSignedBy(cs, peerIssuers(dir))
	}
	stream := &floorStream{
		server: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*server}, ClientAuth: tls.RequireAnyClientCert, VerifyConnection: verify},
		// Raft addresses are bare IPs: the peer is identified by its
		// certificate's issuer, as pact's are by their chain and SPIFFE ID.
		client: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*server}, InsecureSkipVerify: true, VerifyConnection: verify},
	}
	lis, err := net.Listen("tcp", raftAddr)
	if err != nil {
		return nil, fmt.Errorf("raft listen on %s: %w", raftAddr, err)
	}
	stream.Listener = lis
	data := filepath.Join(dir, "raft-"+id)
	if err := os.MkdirAll(data, 0o700); err != nil {
		lis.Close()
		return nil, err
	}
	// pact-journal's store: raft-boltdb with etcd's bbolt options, file
	// snapshots, a log cache of 1024 (raftnode.openStores, startRaft).
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(data, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		lis.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStore(data, 2, io.Discard)
	if err != nil {
		store.Close()
		lis.Close()
		return nil, err
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: 3, Timeout: 10 * time.Second})
	// pact-journal's Raft configuration (raftnode.startRaft, DefaultConfig).
	rc := raft.DefaultConfig()
	rc.BatchApplyCh = true
	rc.LocalID = raft.ServerID(id)
	rc.LogOutput = io.Discard
	rc.SnapshotThreshold = 8192
	rc.TrailingLogs = 10240
	t := raftnode.DefaultRaftTimeout
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = t, t, t
	logs, err := raft.NewLogCache(1024, store)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, err
	}
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, err
	}
	fr := &floorRaft{store: store, trans: trans, fsm: &floorFSM{}, grpcOf: map[raft.ServerAddress]string{}, clients: map[string]pactv1.JournalPeerServiceClient{}}
	var servers []raft.Server
	for _, p := range peers {
		servers = append(servers, raft.Server{ID: raft.ServerID(p.id), Address: raft.ServerAddress(p.raft), Suffrage: raft.Voter})
		fr.grpcOf[raft.ServerAddress(p.raft)] = p.grpc
	}
	if !existing {
		if err := raft.BootstrapCluster(rc, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			trans.Close()
			store.Close()
			return nil, err
		}
	}
	r, err := raft.NewRaft(rc, fr.fsm, logs, store, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, err
	}
	fr.r = r
	roots := x509.NewCertPool()
	roots.AddCert(authority.Root())
	fr.creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*server}, RootCAs: roots})
	return fr, nil
}

// ready says whether a leader is known and this stub has applied what it
// knows is committed.
func (fr *floorRaft) ready() bool {
	addr, _ := fr.r.LeaderWithID()
	return addr != "" && fr.r.AppliedIndex() >= fr.r.CommitIndex()
}

// commit writes one entry and returns once it is applied here (the leader)
// or on the leader (a follower's forward).
func (fr *floorRaft) commit(ctx context.Context, data []byte) error {
	if fr.r.State() == raft.Leader {
		err := fr.r.Apply(data, floorApplyTimeout).Error()
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
			if err != nil {
				return status.Error(codes.Unavailable, err.Error())
			}
			return nil
		}
	}
	addr, _ := fr.r.LeaderWithID()
	if addr == "" {
		return status.Error(codes.Unavailable, "floor: no leader")
	}
	cl, err := fr.client(fr.grpcOf[addr])
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	fctx, cancel := context.WithTimeout(ctx, 3*time.Second) // pact's forwardTimeout
	defer cancel()
	_, err = cl.Propose(fctx, &pactv1.ProposeRequest{Command: data})
	return err
}

func (fr *floorRaft) client(addr string) (pactv1.JournalPeerServiceClient, error) {
	if addr == "" {
		return nil, errors.New("floor: the leader's gRPC address is unknown")
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if c, ok := fr.clients[addr]; ok {
		return c, nil
	}
	conn, err := grpc.NewClient(addr, append(transport.ClientOptions(), grpc.WithTransportCredentials(fr.creds))...)
	if err != nil {
		return nil, err
	}
	c := pactv1.NewJournalPeerServiceClient(conn)
	fr.clients[addr], fr.conns = c, append(fr.conns, conn)
	return c, nil
}

// Propose is the leader's end of a follower's forward. The caller's
// certificate was checked in the handshake (one of the stubs'
// intermediates signed it); a stub does not tell a peer from an agent.
func (fr *floorRaft) Propose(_ context.Context, req *pactv1.ProposeRequest) (*pactv1.ProposeResponse, error) {
	if fr.r.State() != raft.Leader {
		return nil, status.Error(codes.Unavailable, "floor: not the leader")
	}
	f := fr.r.Apply(req.GetCommand(), floorApplyTimeout)
	if err := f.Error(); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &pactv1.ProposeResponse{Index: f.Index()}, nil
}

func (fr *floorRaft) close() {
	fr.mu.Lock()
	for _, c := range fr.conns {
		_ = c.Close()
	}
	fr.mu.Unlock()
	_ = fr.r.Shutdown().Error()
	_ = fr.trans.Close()
	_ = fr.store.Close()
}

// activateEntry and renewEntry are the commands pact writes for an
// enrollment and a renewal, with the issued certificate's record.
func activateEntry(nodeID string, hw *pactv1.HardwareIdentity, iss *ca.Issued) []byte {
	b, _ := proto.Marshal(&pactv1.Command{
		AtUnixNano: time.Now().UnixNano(),
		Op:         &pactv1.Command_Activate{Activate: &pactv1.ActivateOp{NodeId: nodeID, Reported: hw, Cert: certInfo(iss)}},
	})
	return b
}

func renewEntry(nodeID string, prev *x509.Certificate, iss *ca.Issued) []byte {
	b, _ := proto.Marshal(&pactv1.Command{
		AtUnixNano: time.Now().UnixNano(),
		Op:         &pactv1.Command_Renew{Renew: &pactv1.RenewOp{NodeId: nodeID, PreviousSerial: pki.SerialHex(prev.SerialNumber), Cert: certInfo(iss)}},
	})
	return b
}

func certInfo(iss *ca.Issued) *pactv1.CertificateInfo {
	return &pactv1.CertificateInfo{
		Serial: iss.Serial, SpkiSha256: iss.SPKISHA256, NotBeforeUnix: iss.Cert.NotBefore.Unix(), NotAfterUnix: iss.NotAfter.Unix(),
		IssuerSerial: iss.IssuerSerial, Der: iss.DER,
	}
}
