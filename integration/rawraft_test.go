package integration

// A raw Raft client for the peer-rights tests: hashicorp/raft's own
// NetworkTransport over a stream layer that dials a journal's Raft port
// with any certificate, says (or skips) the quorum hello, and hands the
// connection to the transport whatever the answer, so every RPC is put on
// the wire as a journal's would be and the journal alone decides.

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// helloOutcome is what one dial of the raw layer learnt before the Raft
// RPC went out.
type helloOutcome struct {
	alpn  string // negotiated
	reply *pactv1.QuorumHelloReply
	err   error // of the hello exchange (a refused certificate surfaces here)
}

func (h helloOutcome) String() string {
	switch {
	case h.err != nil:
		return fmt.Sprintf("alpn %q, hello failed: %v", h.alpn, h.err)
	case h.reply == nil:
		return fmt.Sprintf("alpn %q, no hello", h.alpn)
	case h.reply.GetRefused() != "":
		return fmt.Sprintf("alpn %q, refused (%s): %s", h.alpn, h.reply.GetRefusedReason(), h.reply.GetRefused())
	default:
		return fmt.Sprintf("alpn %q, admitted into quorum %s by %s", h.alpn, h.reply.GetQuorumId(), h.reply.GetJournalId())
	}
}

// rawRaftLayer is a raft.StreamLayer that only dials.
type rawRaftLayer struct {
	cert tls.Certificate
	// hello is said after the handshake; nil: no ALPN and no hello, as a
	// journal of a release before quorum ids dials.
	hello *pactv1.QuorumHello
	done  chan struct{}
	once  sync.Once

	mu    sync.Mutex
	dials []helloOutcome
}

func (l *rawRaftLayer) Accept() (net.Conn, error) {
	<-l.done
	return nil, net.ErrClosed
}

func (l *rawRaftLayer) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *rawRaftLayer) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func (l *rawRaftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{l.cert}}
	if l.hello != nil {
		cfg.NextProtos = []string{"pact-raft/2"}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), cfg)
	if err != nil {
		l.record(helloOutcome{err: err})
		return nil, err
	}
	out := helloOutcome{alpn: c.ConnectionState().NegotiatedProtocol}
	if l.hello != nil {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		out.reply, out.err = sayHello(c, l.hello)
		_ = c.SetDeadline(time.Time{})
	}
	l.record(out)
	// Whatever the answer: the RPC goes out and the journal decides.
	return c, nil
}

func (l *rawRaftLayer) record(h helloOutcome) {
	l.mu.Lock()
	l.dials = append(l.dials, h)
	l.mu.Unlock()
}

// lastDial is the outcome of the layer's latest dial.
func (l *rawRaftLayer) lastDial() helloOutcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.dials) == 0 {
		return helloOutcome{err: errors.New("never dialed")}
	}
	return l.dials[len(l.dials)-1]
}

// sayHello frames a QuorumHello and reads the reply (length-prefixed
// protobuf each way, journal/raftnode/quorum.go).
func sayHello(c net.Conn, hello *pactv1.QuorumHello) (*pactv1.QuorumHelloReply, error) {
	b, err := proto.Marshal(hello)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 16<<10 {
		return nil, fmt.Errorf("a hello reply of %d bytes", size)
	}
	msg := make([]byte, size)
	if _, err := io.ReadFull(c, msg); err != nil {
		return nil, err
	}
	var reply pactv1.QuorumHelloReply
	if err := proto.Unmarshal(msg, &reply); err != nil {
		return nil, err
	}
	return &reply, nil
}

// rawRaft is a Raft client speaking for journal id (from address addr)
// with whatever certificate it was given.
type rawRaft struct {
	layer *rawRaftLayer
	trans *raft.NetworkTransport
	id    string
	addr  string
}

// newRawRaft makes a client; hello nil dials without ALPN and hello.
// Every RPC dials anew (no pool), so each is admitted or refused on its
// own.
func newRawRaft(cert tls.Certificate, hello *pactv1.QuorumHello, id, addr string) *rawRaft {
	l := &rawRaftLayer{cert: cert, hello: hello, done: make(chan struct{})}
	return &rawRaft{layer: l, trans: raft.NewNetworkTransport(l, 0, 5*time.Second, io.Discard), id: id, addr: addr}
}

func (r *rawRaft) Close() { _ = r.trans.Close() }

func (r *rawRaft) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(r.id), Addr: r.trans.EncodePeer(raft.ServerID(r.id), raft.ServerAddress(r.addr))}
}

// raftView is the target's Raft position the attack builds on.
type raftView struct {
	term, lastIndex, lastTerm uint64
	// servers is the configuration a forged snapshot carries (an
	// InstallSnapshot without one panics hashicorp/raft v1.7.3's
	// receiver: DecodeConfiguration of nothing).
	servers []raft.Server
}

// raftRPCOutcome is one RPC of an attack.
type raftRPCOutcome struct {
	rpc   string
	hello helloOutcome
	err   error
	// taken: the journal answered the RPC as Raft (granted, success, or a
	// Raft-level answer), i.e. the connection reached its Raft.
	taken   bool
	granted bool // RequestVote, InstallSnapshot: granted / success
	success bool // AppendEntries
	term    uint64
	detail  string
}

func (o raftRPCOutcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("%s: refused (%v) [%s]", o.rpc, o.err, o.hello)
	}
	return fmt.Sprintf("%s: ANSWERED by Raft: term %d granted=%v success=%v %s [%s]", o.rpc, o.term, o.granted, o.success, o.detail, o.hello)
}

// attack sends, to target, a RequestVote for term+1 that claims a
// leadership transfer (the one vote a leader grants while it leads) and a
// log far ahead, an AppendEntries at term+5 carrying forged (a command)
// right after the target's last entry and committing it, a TimeoutNow, and
// an InstallSnapshot at term+6.
func (r *rawRaft) attack(target string, v raftView, forged []byte) []raftRPCOutcome {
	to := raft.ServerAddress(target)
	var out []raftRPCOutcome

	var vote raft.RequestVoteResponse
	err := r.trans.RequestVote("", to, &raft.RequestVoteRequest{
		RPCHeader: r.header(), Term: v.term + 1, LastLogIndex: v.lastIndex + 1000, LastLogTerm: v.term + 1, LeadershipTransfer: true,
	}, &vote)
	out = append(out, raftRPCOutcome{rpc: "RequestVote", hello: r.layer.lastDial(), err: err, taken: err == nil, granted: vote.Granted, term: vote.Term})

	prev, prevTerm := v.lastIndex, v.lastTerm
	for try := 0; try < 2; try++ {
		var app raft.AppendEntriesResponse
		err = r.trans.AppendEntries("", to, &raft.AppendEntriesRequest{
			RPCHeader: r.header(), Term: v.term + 5, PrevLogEntry: prev, PrevLogTerm: prevTerm,
			Entries:           []*raft.Log{{Index: prev + 1, Term: v.term + 5, Type: raft.LogCommand, Data: forged, AppendedAt: time.Now()}},
			LeaderCommitIndex: prev + 1,
		}, &app)
		o := raftRPCOutcome{rpc: "AppendEntries", hello: r.layer.lastDial(), err: err, taken: err == nil, success: app.Success, term: app.Term,
			detail: fmt.Sprintf("(prev %d@%d, its last log %d)", prev, prevTerm, app.LastLog)}
		out = append(out, o)
		if err != nil || app.Success || app.LastLog == 0 || app.LastLog == prev {
			break
		}
		// Its log ends elsewhere: try right after its end.
		prev = app.LastLog
	}

	var tn raft.TimeoutNowResponse
	err = r.trans.TimeoutNow("", to, &raft.TimeoutNowRequest{RPCHeader: r.header()}, &tn)
	out = append(out, raftRPCOutcome{rpc: "TimeoutNow", hello: r.layer.lastDial(), err: err, taken: err == nil, success: err == nil})

	junk := bytes.Repeat([]byte("not a pact snapshot "), 8)
	var snap raft.InstallSnapshotResponse
	err = r.trans.InstallSnapshot("", to, &raft.InstallSnapshotRequest{
		RPCHeader: r.header(), SnapshotVersion: raft.SnapshotVersionMax, Term: v.term + 6,
		LastLogIndex: v.lastIndex + 2000, LastLogTerm: v.term + 6, Size: int64(len(junk)),
		Configuration: raft.EncodeConfiguration(raft.Configuration{Servers: v.servers}), ConfigurationIndex: v.lastIndex,
	}, &snap, bytes.NewReader(junk))
	out = append(out, raftRPCOutcome{rpc: "InstallSnapshot", hello: r.layer.lastDial(), err: err, taken: err == nil, granted: snap.Success, term: snap.Term})
	return out
}

// requestVote sends the RequestVote of attack alone.
func (r *rawRaft) requestVote(target string, v raftView) raftRPCOutcome {
	var vote raft.RequestVoteResponse
	err := r.trans.RequestVote("", raft.ServerAddress(target), &raft.RequestVoteRequest{
		RPCHeader: r.header(), Term: v.term + 1, LastLogIndex: v.lastIndex + 1000, LastLogTerm: v.term + 1, LeadershipTransfer: true,
	}, &vote)
	return raftRPCOutcome{rpc: "RequestVote", hello: r.layer.lastDial(), err: err, taken: err == nil, granted: vote.Granted, term: vote.Term}
}
