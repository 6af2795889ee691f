package chaos

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/caprofile"
	"github.com/pact-hpc/pact/internal/pki"
	"github.com/pact-hpc/pact/internal/tlsalert"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// WorkloadConfig shapes the clients.
type WorkloadConfig struct {
	Clients        int
	NodesPerClient int
	// OpTimeout bounds one call; a call that runs out has an unknown
	// outcome.
	OpTimeout time.Duration
	// ThinkMin and ThinkMax bound the pause between a client's calls.
	ThinkMin, ThinkMax time.Duration
	Seed               uint64
	// SourceIP gives client k's source address (nil: any).
	SourceIP func(k int) net.IP
	// Churn moves hardware between node ids, as a site does: a
	// decommissioned node's hardware registered to a new node id, a NIC
	// moved to a new node (a new id with the MAC of another, and its own
	// BMC). While the old owner is not decommissioned the registration
	// must be refused (HARDWARE_IDENTITY_CONFLICT).
	Churn bool
	// TakeoverWindow is the journals' --takeover-window when the workload
	// reboots nodes with a new key, inside the window (refused) and after
	// it (a takeover); 0: no reboots, and an Enroll with another key is
	// always refused.
	TakeoverWindow time.Duration
}

// DefaultWorkload is six clients of four nodes each.
func DefaultWorkload() WorkloadConfig {
	return WorkloadConfig{Clients: 6, NodesPerClient: 4, OpTimeout: 5 * time.Second, ThinkMin: 5 * time.Millisecond, ThinkMax: 40 * time.Millisecond}
}

// Workload is K clients, each driving its own nodes through their life:
// register, enroll, renew, decommission, read, and register again. Every
// call is recorded in the History with its call and return time.
type Workload struct {
	cfg     WorkloadConfig
	q       Quorum
	h       *History
	clients []*client
	wg      sync.WaitGroup
	stop    chan struct{}
	// probes counts the leader losses announced (Probe); each client
	// probes after each one.
	probes atomic.Int64
}

// probeWindow is how long after a leader loss the clients probe: every
// other call they make is a read or a call made to be refused, from the
// moment of the loss through the election and the first seconds of the
// new leader, while a restarted journal catches up. With the journals'
// 2 s Raft timeouts (raftnode.DefaultRaftTimeout) an election ends 4-6 s
// after the loss; 4 s, enough with 1 s timeouts, ended with no leader to
// confirm a final refusal.
const probeWindow = 8 * time.Second

// NewWorkload dials every journal from every client.
func NewWorkload(cfg WorkloadConfig, q Quorum, h *History) (*Workload, error) {
	w := &Workload{cfg: cfg, q: q, h: h, stop: make(chan struct{})}
	for k := range cfg.Clients {
		c := &client{id: k, w: w, rng: mrand.New(mrand.NewPCG(cfg.Seed, uint64(k)+1)), next: k, made: cfg.NodesPerClient}
		if cfg.SourceIP != nil {
			c.src = cfg.SourceIP(k)
		}
		admin := q.Admin()
		for i := range q.Size() {
			ec, err := dial(q.GRPC(i), q.Roots(), nil, c.src)
			if err != nil {
				w.Close()
				return nil, err
			}
			ac, err := dial(q.GRPC(i), q.Roots(), &admin, c.src)
			if err != nil {
				ec.Close()
				w.Close()
				return nil, err
			}
			c.conns = append(c.conns, ec, ac)
			c.enroll = append(c.enroll, pactv1.NewEnrollmentServiceClient(ec))
			c.admin = append(c.admin, pactv1.NewAdminServiceClient(ac))
		}
		for n := range cfg.NodesPerClient {
			c.nodes = append(c.nodes, &nodeBelief{
				id:    fmt.Sprintf("c%02d-n%03d", k, n),
				mac:   fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", 0xc0, k, n>>8, n&0xff),
				bmc:   fmt.Sprintf("SN-C%02d-N%03d", k, n),
				state: StateNone,
			})
		}
		// Never registered: its reads and its writes must be refused
		// (NODE_NOT_ENROLLED), whichever journal answers.
		c.ghost = &nodeBelief{id: fmt.Sprintf("c%02d-ghost", k), mac: fmt.Sprintf("52:54:%02x:%02x:ff:ff", 0xee, k), bmc: fmt.Sprintf("SN-GHOST-C%02d", k), state: StateNone}
		w.clients = append(w.clients, c)
	}
	return w, nil
}

// dial opens a TLS 1.3 channel to a journal, presenting cert if set, from
// src if set, with a short reconnect backoff so a restarted journal is
// found again quickly.
func dial(addr string, roots *x509.CertPool, cert *tls.Certificate, src net.IP) (*grpc.ClientConn, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	bc := backoff.DefaultConfig
	bc.BaseDelay, bc.MaxDelay = 50*time.Millisecond, 500*time.Millisecond
	creds := tlsalert.NewCredentials(credentials.NewTLS(cfg))
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bc, MinConnectTimeout: 2 * time.Second}),
		// Classify reads how far a failed call got from typed values.
		grpc.WithChainUnaryInterceptor(explainCalls(creds)),
	}
	if src != nil {
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
			return d.DialContext(ctx, "tcp", a)
		}))
	}
	return grpc.NewClient("passthrough:///"+addr, opts...)
}

// Start runs the clients until Stop.
func (w *Workload) Start() {
	for _, c := range w.clients {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			c.loop()
		}()
	}
}

// Stop asks every client to stop after its current call and waits.
func (w *Workload) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// Close stops the clients and closes their channels.
func (w *Workload) Close() {
	w.Stop()
	for _, c := range w.clients {
		for _, conn := range c.conns {
			conn.Close()
		}
	}
}

// Nodes lists every node of the workload (retired ones, and the ghosts
// the probes ask about, too). Call it after Stop.
func (w *Workload) Nodes() []string {
	var out []string
	for _, c := range w.clients {
		for _, n := range append(append([]*nodeBelief{}, c.nodes...), c.retired...) {
			out = append(out, n.id)
		}
	}
	for _, c := range w.clients {
		out = append(out, c.ghost.id)
	}
	return out
}

// Probe tells every client that a leader was just lost (killed or
// frozen): for probeWindow, every other call a client makes is a probe
// (probe), recorded with Record.Probe.
func (w *Workload) Probe() { w.probes.Add(1) }

// Hardware maps each node to its MAC and BMC serial (a node id always
// registers with the same hardware). Call it after Stop.
func (w *Workload) Hardware() map[string][2]string {
	out := map[string][2]string{}
	for _, c := range w.clients {
		for _, n := range append(append([]*nodeBelief{}, c.nodes...), c.retired...) {
			out[n.id] = [2]string{n.mac, n.bmc}
		}
	}
	return out
}

// ---------------------------------------------------------------------------

// agentKey is a node's key pair and a CSR for it.
type agentKey struct {
	key  *ecdsa.PrivateKey
	csr  []byte
	hash string // hex SHA-256 of the SubjectPublicKeyInfo
}

func newAgentKey() (*agentKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return nil, err
	}
	return &agentKey{key: k, csr: csr, hash: pki.SPKIFingerprintRaw(der)}, nil
}

// heldCert is a certificate a client received, with its key.
type heldCert struct {
	key    *agentKey
	chain  [][]byte
	serial string
}

// nodeBelief is what a client believes about one of its nodes. It drives
// the choice of the next call; the checker never trusts it.
type nodeBelief struct {
	id, mac, bmc string
	// state is one of the model's states, or "uncertain" after an answer
	// that left it unknown (or surprised the client).
	state string
	cur   *heldCert   // the certificate the node holds (active)
	old   []*heldCert // earlier ones: replaced, or revoked
	// enrollKey is the key of the next Enroll: kept after an unknown
	// outcome, so the retry is safe.
	enrollKey *agentKey
	// pending are keys of calls whose outcome is unknown (they may hold
	// the node's certificate now).
	pending []*agentKey
	// rebootKey is the new key of a node "rebooting": nothing touches it
	// until quietUntil (past the takeover window), then it enrolls with
	// rebootKey.
	rebootKey  *agentKey
	quietUntil time.Time
	// moved: the node's hardware (or its NIC) was another node id's
	// before (reassign); its enrollments say so (Input.Moved).
	moved bool
	// refused: a journal refused the current certificate as it
	// authenticated (its intermediate revoked with its journal CA, in
	// revoke-leader-ca): the node enrolls again with a new key, as
	// pact-agent does.
	refused bool
}

const uncertain = "uncertain"

type client struct {
	id     int
	w      *Workload
	rng    *mrand.Rand
	src    net.IP
	next   int
	conns  []*grpc.ClientConn
	enroll []pactv1.EnrollmentServiceClient
	admin  []pactv1.AdminServiceClient
	nodes  []*nodeBelief
	// nextRefusal paces calls made to be refused: failed enrollments
	// cost the source's rate-limit budget.
	nextRefusal time.Time
	// retired nodes left the rotation: their hardware went to another
	// node id (or their one registration was refused).
	retired []*nodeBelief
	// made counts node ids this client has made; nextChurn and
	// nextReboot pace hardware moves and reboots.
	made                  int
	nextChurn, nextReboot time.Time
	// ghost is a node id that is never registered, with hardware of its
	// own; the probes read it and try to decommission and enroll it.
	ghost *nodeBelief
	// Probing after a leader loss: the last loss seen, until when to
	// probe, whether the next call is a probe, the next probe's number,
	// and whether the call in flight is one.
	probeSeen  int64
	probeUntil time.Time
	probeTurn  bool
	probeK     int
	inProbe    bool
}

func (c *client) stopped() bool {
	select {
	case <-c.w.stop:
		return true
	default:
		return false
	}
}

func (c *client) loop() {
	for !c.stopped() {
		if c.probing() {
			c.probe()
		} else {
			c.step(c.nodes[c.rng.IntN(len(c.nodes))])
		}
		think := c.w.cfg.ThinkMin
		if d := c.w.cfg.ThinkMax - c.w.cfg.ThinkMin; d > 0 {
			think += time.Duration(c.rng.Int64N(int64(d)))
		}
		select {
		case <-c.w.stop:
		case <-time.After(think):
		}
	}
}

// probing reports whether the next call is a probe: every other call
// during probeWindow after a leader loss, the first one at once.
func (c *client) probing() bool {
	if g := c.w.probes.Load(); g != c.probeSeen {
		c.probeSeen, c.probeUntil, c.probeTurn = g, time.Now().Add(probeWindow), false
	}
	if !time.Now().Before(c.probeUntil) {
		return false
	}
	c.probeTurn = !c.probeTurn
	return c.probeTurn
}

// probe makes one call that a journal must answer from the registry as
// the leader has it, right after a leader loss: in turn, a read of the
// ghost and of each node (linearizable), then a call made to be refused
// for good (a final refusal: NODE_NOT_ENROLLED, NODE_REVOKED,
// STALE_CERTIFICATE, ALREADY_ACTIVE), which a journal may give only once
// the leader has confirmed it. A rebooting node is only read (any call
// with its identity would be seen and spoil the takeover).
func (c *client) probe() {
	c.inProbe = true
	defer func() { c.inProbe = false }()
	k := c.probeK
	c.probeK++
	targets := 1 + len(c.nodes)
	t, refuse := k%targets, (k/targets)%2 == 1
	if t == 0 {
		switch {
		case !refuse:
			c.read(c.ghost) // NODE_NOT_ENROLLED
		case c.mayRefuse():
			if key, err := newAgentKey(); err == nil {
				c.retryEnroll(c.ghost, key, OpEnroll) // NODE_NOT_ENROLLED (costs the source's failure budget)
			}
		default:
			c.decommission(c.ghost) // NODE_NOT_ENROLLED
		}
		return
	}
	n := c.nodes[t-1]
	if !refuse || n.rebootKey != nil {
		c.read(n)
		return
	}
	switch {
	case n.state == StateActive && len(n.old) > 0:
		c.renew(n, n.old[len(n.old)-1]) // replaced (STALE_CERTIFICATE) or of an earlier registration (NODE_REVOKED)
	case n.state == StateRevoked && (n.cur != nil || len(n.old) > 0):
		held := n.cur
		if held == nil {
			held = n.old[len(n.old)-1]
		}
		c.renew(n, held) // NODE_REVOKED
	case n.state == StateRevoked, n.state == StateNone:
		c.decommission(n) // NODE_REVOKED, NODE_NOT_ENROLLED
	case n.state == StateActive && c.mayRefuse():
		if key, err := newAgentKey(); err == nil {
			kind := OpEnroll // another key: ALREADY_ACTIVE
			if c.w.cfg.TakeoverWindow > 0 {
				kind = OpTakeover
			}
			c.retryEnroll(n, key, kind)
		}
	default:
		c.read(n)
	}
}

// journal picks the next journal, round robin.
func (c *client) journal() int {
	i := c.next % c.w.q.Size()
	c.next++
	return i
}

// mayRefuse reports whether a call expected to fail may be made now.
func (c *client) mayRefuse() bool {
	if time.Now().Before(c.nextRefusal) {
		return false
	}
	c.nextRefusal = time.Now().Add(8 * time.Second)
	return true
}

func (c *client) step(n *nodeBelief) {
	if n.rebootKey != nil {
		if time.Now().Before(n.quietUntil) {
			return // rebooting: no call touches it, so it goes unseen
		}
		key := n.rebootKey
		n.rebootKey = nil
		c.retryEnroll(n, key, OpTakeover) // after the window: a takeover
		return
	}
	if n.refused {
		n.refused = false
		if n.state == StateActive {
			if k, err := newAgentKey(); err == nil {
				c.retryEnroll(n, k, OpEnroll) // at once if its certificate is withdrawn; else ALREADY_ACTIVE
			}
			return
		}
	}
	p := c.rng.IntN(100)
	if c.w.cfg.Churn && time.Now().After(c.nextChurn) &&
		// A decommissioned node's hardware always goes to a new id once the
		// pace allows: a short scenario must still show a move.
		(n.state == StateRevoked || (n.state == StateActive || n.state == StateRegistered) && p < 4) {
		c.nextChurn = time.Now().Add(time.Second)
		c.reassign(n)
		return
	}
	if w := c.w.cfg.TakeoverWindow; w > 0 && n.state == StateActive && p < 4 && time.Now().After(c.nextReboot) {
		c.nextReboot = time.Now().Add(2 * time.Second)
		k, err := newAgentKey()
		if err != nil {
			return
		}
		if c.rng.IntN(2) == 0 {
			c.retryEnroll(n, k, OpTakeover) // inside the window: refused
			return
		}
		n.rebootKey, n.quietUntil = k, time.Now().Add(w+time.Second)
		return
	}
	switch n.state {
	case StateNone:
		c.register(n)
	case StateRegistered:
		if p < 10 {
			c.read(n)
			return
		}
		c.enrollNode(n)
	case StateActive:
		switch {
		case p < 40:
			c.renew(n, n.cur)
		case p < 60:
			c.read(n)
		case p < 68:
			c.decommission(n)
		case p < 76:
			c.retryEnroll(n, n.cur.key, OpEnroll) // same key: the same certificate back
		case p < 82 && len(n.old) > 0:
			c.renew(n, n.old[len(n.old)-1]) // a replaced certificate: refused
		case p < 88 && c.mayRefuse():
			k, err := newAgentKey()
			if err == nil {
				kind := OpEnroll // another key: ALREADY_ACTIVE
				if c.w.cfg.TakeoverWindow > 0 {
					kind = OpTakeover // ... unless the node went unseen for the window
				}
				c.retryEnroll(n, k, kind)
			}
		default:
			c.renew(n, n.cur)
		}
	case StateRevoked:
		switch {
		case p < 15 && (n.cur != nil || len(n.old) > 0):
			held := n.cur
			if held == nil {
				held = n.old[len(n.old)-1]
			}
			c.renew(n, held) // after a decommission: must be refused
		case p < 25 && c.mayRefuse():
			c.enrollNode(n) // NODE_REVOKED
		case p < 35:
			c.read(n)
		default:
			c.register(n)
		}
	default:
		c.resolve(n)
	}
}

// call records one call to journal i: do makes it and says what came back.
func (c *client) call(i int, in Input, do func(ctx context.Context) (Output, error)) (*Record, Output) {
	r := c.w.h.Begin(c.id, c.w.q.ID(i), in)
	r.Probe = c.inProbe
	ctx, cancel := context.WithTimeout(context.Background(), c.w.cfg.OpTimeout)
	out, err := do(ctx)
	cancel()
	if err != nil {
		out = Classify(err)
	}
	c.w.h.End(r, out, err)
	return r, out
}

// Classify turns a call's error into an outcome: a reason from the journal
// is definite (except OUTCOME_UNKNOWN and INTERNAL); a transport error is
// definite only when the request cannot have left (the connection was
// refused or never made); anything else is unknown.
func Classify(err error) Output {
	pe := apierr.FromError(err)
	if pe.Reason != "" {
		switch pe.Reason {
		case apierr.OutcomeUnknown, apierr.Internal:
			return Output{Result: ResultUnknown, Reason: string(pe.Reason)}
		}
		// A refusal with a retry-after is not final (apierr.Error.Final).
		return Output{Result: ResultFailed, Reason: string(pe.Reason), Retryable: pe.RetryAfter > 0 && !pe.Final()}
	}
	if a, ok := tlsalert.Received(err); ok && certificateAlert(a) {
		// The journal refused the client certificate in the handshake
		// (a TLS alert): nothing reached a handler, so the refusal is
		// definite, and it is about the certificate: the model accepts it
		// only for one that is not the node's current certificate.
		return Output{Result: ResultFailed, Reason: ReasonCertRefused}
	}
	if pe.Code == codes.Unavailable && errors.Is(err, errNotSent) {
		return Output{Result: ResultFailed, Reason: "UNREACHABLE"}
	}
	return Output{Result: ResultUnknown, Reason: strings.ToUpper(pe.Code.String())}
}

// ReasonCertRefused is the outcome of a call whose client certificate the
// journal refused in the TLS handshake (a certificate alert).
const ReasonCertRefused = "CERT_REFUSED"

func (c *client) register(n *nodeBelief) {
	i := c.journal()
	_, out := c.call(i, Input{Kind: OpRegister, Node: n.id}, func(ctx context.Context) (Output, error) {
		_, err := c.admin[i].RegisterNode(ctx, &pactv1.RegisterNodeRequest{
			NodeId: n.id, Hardware: &pactv1.HardwareIdentity{Macs: []string{n.mac}, BmcSerial: n.bmc},
		})
		return Output{Result: ResultOK}, err
	})
	switch {
	case out.Result == ResultOK:
		n.retire()
		n.state, n.enrollKey, n.pending = StateRegistered, nil, nil
	case out.Result == ResultUnknown, out.Reason == "NODE_ALREADY_ENROLLED":
		n.state = uncertain
	}
}

// retire moves the current certificate to the old ones.
func (n *nodeBelief) retire() {
	if n.cur != nil {
		n.old = append(n.old, n.cur)
		if len(n.old) > 4 {
			n.old = n.old[1:]
		}
		n.cur = nil
	}
}

// enrollNode enrolls a registered node: with a fresh key, or with the key
// of an attempt whose outcome is unknown.
func (c *client) enrollNode(n *nodeBelief) {
	if n.enrollKey == nil {
		k, err := newAgentKey()
		if err != nil {
			return
		}
		n.enrollKey = k
	}
	c.retryEnroll(n, n.enrollKey, OpEnroll)
}

// reassign gives d's hardware to a new node id: all of it (the node was
// replaced) or only its MAC (a NIC moved to a new node, which has its own
// BMC). It must succeed only once d is decommissioned; while d is
// registered or active the journals must refuse it as a hardware conflict.
// A new node that may be registered takes d's place in the rotation.
func (c *client) reassign(d *nodeBelief) {
	id := fmt.Sprintf("c%02d-n%03d", c.id, c.made)
	n := &nodeBelief{id: id, mac: d.mac, bmc: d.bmc, state: StateNone, moved: true}
	if c.rng.IntN(2) == 0 {
		n.bmc = fmt.Sprintf("SN-C%02d-N%03d", c.id, c.made) // only the NIC moves
	}
	c.made++
	c.register(n)
	if n.state == StateNone {
		c.retired = append(c.retired, n) // refused: d keeps its hardware
		return
	}
	for k, x := range c.nodes {
		if x == d {
			c.nodes[k] = n
		}
	}
	c.retired = append(c.retired, d)
}

// retryEnroll calls Enroll with key and follows the answer; kind is
// OpTakeover when the key is a reboot's.
func (c *client) retryEnroll(n *nodeBelief, key *agentKey, kind OpKind) {
	i := c.journal()
	var resp *pactv1.EnrollResponse
	r, out := c.call(i, Input{Kind: kind, Node: n.id, Key: key.hash, Moved: n.moved}, func(ctx context.Context) (Output, error) {
		var err error
		resp, err = c.enroll[i].Enroll(ctx, &pactv1.EnrollRequest{
			Hardware: &pactv1.HardwareIdentity{Macs: []string{n.mac}, BmcSerial: n.bmc},
			CsrDer:   key.csr,
		})
		if err != nil {
			return Output{}, err
		}
		return c.received(resp.GetCertChainDer(), resp.GetSerial(), key), nil
	})
	switch out.Result {
	case ResultOK:
		c.verify(r, resp.GetCertChainDer(), resp.GetSerial(), key, resp.GetNodeId(), n.id, resp.GetServerTimeUnixNano())
		if n.cur == nil || n.cur.serial != resp.GetSerial() {
			n.retire()
			n.cur = &heldCert{key: key, chain: resp.GetCertChainDer(), serial: resp.GetSerial()}
		}
		n.state, n.enrollKey, n.pending = StateActive, nil, nil
	case ResultUnknown:
		n.pending = appendKey(n.pending, key)
		n.state = uncertain
	case ResultFailed:
		switch out.Reason {
		case "NO_LEADER", "RATE_LIMITED", "UNREACHABLE", "JOURNAL_HALTED", "JOURNAL_CA_REVOKED":
		case "ALREADY_ACTIVE":
			// Expected for another key while the node is active.
			if n.state != StateActive || n.cur == nil || n.cur.key == key {
				n.state = uncertain
			}
		default:
			n.state = uncertain
		}
	}
}

func appendKey(keys []*agentKey, k *agentKey) []*agentKey {
	for _, x := range keys {
		if x == k {
			return keys
		}
	}
	return append(keys, k)
}

// maxClockSkew is pact-agent's --max-clock-skew and the journals'
// ClockSkewTolerance (both 5 minutes by default).
const maxClockSkew = 5 * time.Minute

// received describes a certificate chain received for key.
func (c *client) received(chain [][]byte, serial string, key *agentKey) Output {
	out := Output{Result: ResultOK, Serial: serial}
	if len(chain) > 0 {
		if leaf, err := x509.ParseCertificate(chain[0]); err == nil {
			out.Key = pki.SPKIFingerprint(leaf)
		}
	}
	if len(chain) > 1 {
		// The intermediate that signed it: the model needs it once a
		// journal CA is revoked (ModelState.Issuer).
		if ic, err := x509.ParseCertificate(chain[1]); err == nil {
			out.Issuer = pki.SerialHex(ic.SerialNumber)
		}
	}
	return out
}

// verify records what is wrong with a certificate a client received: it
// must chain to the domain root, carry the serial of the response, be for
// the client's key and name the node. Validity is checked at the time the
// answering journal gave (serverTime, if it gave one), as pact-agent
// does: an agent runs its certificate decisions on the journal's clock
// (docs/security.md, clock skew), so a journal whose clock is stepped
// hands out certificates valid on its own clock.
func (c *client) verify(r *Record, chain [][]byte, serial string, key *agentKey, respNode, node string, serverTime int64) {
	var problems []string
	if respNode != "" && respNode != node {
		problems = append(problems, fmt.Sprintf("the response names node %s", respNode))
	}
	if len(chain) < 2 {
		problems = append(problems, fmt.Sprintf("chain of %d certificates", len(chain)))
	} else if leaf, err := x509.ParseCertificate(chain[0]); err != nil {
		problems = append(problems, "leaf: "+err.Error())
	} else {
		inter := x509.NewCertPool()
		for _, der := range chain[1:] {
			if ic, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(ic)
				if r.Issuer == "" {
					r.Issuer = pki.SerialHex(ic.SerialNumber)
				}
			}
		}
		at := time.Now()
		if serverTime != 0 {
			at = time.Unix(0, serverTime)
		}
		opts := x509.VerifyOptions{Roots: c.w.q.Roots(), Intermediates: inter, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		chains, err := leaf.Verify(opts)
		// A certificate of the chain not valid yet by less than the skew
		// the agent (--max-clock-skew) and the journals
		// (ClockSkewTolerance) accept: made by a journal whose clock ran
		// ahead of the answering one's. Checked again at its not_before.
		for range 3 {
			var inv x509.CertificateInvalidError
			if err == nil || !errors.As(err, &inv) || inv.Reason != x509.Expired || inv.Cert == nil {
				break
			}
			if ahead := inv.Cert.NotBefore.Sub(at); ahead <= 0 || ahead > maxClockSkew || !inv.Cert.NotBefore.After(opts.CurrentTime) {
				break
			}
			opts.CurrentTime = inv.Cert.NotBefore
			chains, err = leaf.Verify(opts)
		}
		if err != nil {
			problems = append(problems, "does not verify: "+err.Error())
		} else if id, ierr := pki.IdentityOf(leaf); ierr == nil {
			// In a shape the journals accept ([leaf, intermediate,
			// journal CA] or legacy [leaf, intermediate]).
			shape := caprofile.ErrChainShape
			for _, vc := range chains {
				if shape = caprofile.CheckChainShape(pki.KindAgent, vc, id.Domain); shape == nil {
					break
				}
			}
			if shape != nil {
				problems = append(problems, shape.Error())
			}
		}
		if got := pki.SerialHex(leaf.SerialNumber); got != serial {
			problems = append(problems, fmt.Sprintf("leaf serial %s, response serial %s", got, serial))
		}
		if got := pki.SPKIFingerprint(leaf); got != key.hash {
			problems = append(problems, "not for the client's key")
		}
		if id, err := pki.IdentityOf(leaf); err != nil || id.Name != node {
			problems = append(problems, fmt.Sprintf("leaf names %q (%v)", id.Name, err))
		}
	}
	r.CertProblem = strings.Join(problems, "; ")
}

// renew calls RenewCert over mTLS with held and a fresh key.
func (c *client) renew(n *nodeBelief, held *heldCert) {
	key, err := newAgentKey()
	if err != nil {
		return
	}
	i := c.journal()
	var resp *pactv1.RenewCertResponse
	r, out := c.call(i, Input{Kind: OpRenew, Node: n.id, Key: key.hash, Prev: held.serial}, func(ctx context.Context) (Output, error) {
		cert := tls.Certificate{Certificate: held.chain, PrivateKey: held.key.key}
		conn, err := dial(c.w.q.GRPC(i), c.w.q.Roots(), &cert, c.src)
		if err != nil {
			return Output{}, err
		}
		defer conn.Close()
		resp, err = pactv1.NewEnrollmentServiceClient(conn).RenewCert(ctx, &pactv1.RenewCertRequest{CurrentSerial: held.serial, CsrDer: key.csr})
		if err != nil {
			return Output{}, err
		}
		return c.received(resp.GetCertChainDer(), resp.GetSerial(), key), nil
	})
	switch out.Result {
	case ResultOK:
		c.verify(r, resp.GetCertChainDer(), resp.GetSerial(), key, resp.GetNodeId(), n.id, resp.GetServerTimeUnixNano())
		n.retire()
		n.cur = &heldCert{key: key, chain: resp.GetCertChainDer(), serial: resp.GetSerial()}
		n.state, n.pending = StateActive, nil
	case ResultUnknown:
		n.pending = appendKey(n.pending, key)
		n.state = uncertain
	case ResultFailed:
		switch out.Reason {
		case "NO_LEADER", "RATE_LIMITED", "UNREACHABLE", "JOURNAL_HALTED", "JOURNAL_CA_REVOKED":
		case "UNAUTHENTICATED", ReasonCertRefused:
			n.refused = held == n.cur && n.state == StateActive
		case "STALE_CERTIFICATE", "NODE_REVOKED":
			if held == n.cur {
				n.state = uncertain
			}
		default:
			n.state = uncertain
		}
	}
}

func (c *client) decommission(n *nodeBelief) {
	i := c.journal()
	_, out := c.call(i, Input{Kind: OpDecommission, Node: n.id}, func(ctx context.Context) (Output, error) {
		_, err := c.admin[i].DecommissionNode(ctx, &pactv1.DecommissionNodeRequest{NodeId: n.id, Force: true})
		return Output{Result: ResultOK}, err
	})
	switch {
	case out.Result == ResultOK, out.Reason == "NODE_REVOKED":
		n.state, n.enrollKey, n.pending = StateRevoked, nil, nil
	case out.Result == ResultUnknown, out.Reason == "NODE_NOT_ENROLLED":
		n.state = uncertain
	}
}

// read calls InspectNode on the next journal.
func (c *client) read(n *nodeBelief) Output {
	i := c.journal()
	_, out := c.call(i, Input{Kind: OpRead, Node: n.id}, func(ctx context.Context) (Output, error) {
		resp, err := c.admin[i].InspectNode(ctx, &pactv1.InspectNodeRequest{NodeId: n.id})
		if err != nil {
			return Output{}, err
		}
		return NodeOutput(resp.GetNode()), nil
	})
	return out
}

// NodeOutput describes a node record as a read's output.
func NodeOutput(nd *pactv1.Node) Output {
	return Output{Result: ResultOK, State: StateName(nd.GetState()), Serial: nd.GetCert().GetSerial(), Key: nd.GetCert().GetSpkiSha256()}
}

// StateName is the model's name of a node state.
func StateName(s pactv1.NodeState) string {
	switch s {
	case pactv1.NodeState_NODE_STATE_REGISTERED:
		return StateRegistered
	case pactv1.NodeState_NODE_STATE_ACTIVE:
		return StateActive
	case pactv1.NodeState_NODE_STATE_INACTIVE:
		return StateInactive
	case pactv1.NodeState_NODE_STATE_REVOKED:
		return StateRevoked
	}
	return s.String()
}

// resolve finds out where a node stands after an uncertain answer: a
// linearizable read, then (if it holds a certificate for a key of ours we
// have no certificate for) an Enroll retry with that key to get it.
func (c *client) resolve(n *nodeBelief) {
	out := c.read(n)
	switch {
	case out.Result == ResultFailed && out.Reason == "NODE_NOT_ENROLLED":
		n.retire()
		n.state, n.enrollKey, n.pending = StateNone, nil, nil
		return
	case out.Result != ResultOK:
		return // still uncertain; try again later
	}
	switch out.State {
	case StateRegistered, StateInactive:
		n.retire()
		n.state = StateRegistered
	case StateRevoked:
		n.state, n.enrollKey, n.pending = StateRevoked, nil, nil
	case StateActive:
		if n.cur != nil && n.cur.key.hash == out.Key && n.cur.serial == out.Serial {
			n.state, n.pending = StateActive, nil
			return
		}
		keys := append([]*agentKey{}, n.pending...)
		if n.enrollKey != nil {
			keys = append(keys, n.enrollKey)
		}
		for _, k := range keys {
			if k.hash == out.Key {
				c.retryEnroll(n, k, OpEnroll) // the committed certificate, for our key
				return
			}
		}
		// Active with a key this client does not hold: it cannot use the
		// node any more; decommission it and start again.
		c.decommission(n)
	}
}
