package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/wire"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// The agents' retry policy, as pact-agent's defaults (agent.DefaultConfig):
// exponential backoff with full jitter between MinBackoff and MaxBackoff,
// never shorter than a retry-after the journal asked for plus up to half
// of it again.
const (
	minBackoff  = 250 * time.Millisecond
	maxBackoff  = 30 * time.Second
	callTimeout = 15 * time.Second
)

func backoff(attempt int, pe *apierr.Error) time.Duration {
	ceiling := minBackoff << min(attempt, 16)
	if ceiling > maxBackoff || ceiling <= 0 {
		ceiling = maxBackoff
	}
	d := minBackoff/2 + rand.N(ceiling)
	if pe != nil && pe.RetryAfter > 0 {
		d = max(d, pe.RetryAfter+rand.N(pe.RetryAfter/2+1))
	}
	return d
}

// simAgent is one simulated node agent.
type simAgent struct {
	idx  int
	node benchNode

	// The enrolled credential (after the enroll storm).
	key    *ecdsa.PrivateKey
	chain  [][]byte
	serial string

	// The storm in progress.
	newKey   *ecdsa.PrivateKey
	csr      []byte
	arrival  time.Time // first arrival
	attempts int
	next     int // journal rotation
	done     time.Time
	call     time.Duration // the successful attempt, dial to answer
	failures map[string]int
	lastErr  *apierr.Error // the failure the next backoff answers
	err      error
	// uncertain: an attempt failed in a way that may have been after the
	// journal acted (a renewal that then sees STALE_CERTIFICATE committed).
	uncertain bool
}

type stormKind int

const (
	stormEnroll stormKind = iota
	stormRenew
)

func (k stormKind) String() string {
	if k == stormRenew {
		return "renew"
	}
	return "enroll"
}

// storm is one run of every agent against the quorum.
type storm struct {
	kind        stormKind
	agents      []*simAgent
	addrs       []string
	roots       *x509.CertPool
	concurrency int              // agents worked on at once by the load generator
	spread      time.Duration    // arrivals are spread evenly over this
	keygen      bool             // make the key and CSR at arrival (else before)
	deadline    time.Duration    // give up on the storm after this
	kx          wire.KeyExchange // what the agents offer
}

type stormResult struct {
	kind       stormKind
	agents     int
	ok         int
	failed     int
	unknown    int // renewals whose outcome the client never learned
	wall       time.Duration
	perSec     float64
	lat        []time.Duration // arrival to answer, per successful agent, sorted
	calls      []time.Duration // the successful attempt, sorted
	attempts   int
	maxAttempt int
	failures   map[string]int
	firstErrs  []string
	journalCPU []time.Duration
	genCPU     time.Duration
	rssMax     int64

	others          float64 // share of the machine other processes used meanwhile
	leaderChanges   int
	journalCounters map[string]float64 // pact_journal_{enroll,renew}_total by result, during the storm
}

func (r *stormResult) pct(p float64) time.Duration { return percentile(r.lat, p) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (r *stormResult) cpuPerOp() time.Duration {
	if r.ok == 0 {
		return 0
	}
	var t time.Duration
	for _, c := range r.journalCPU {
		t += c
	}
	return (t + r.genCPU) / time.Duration(r.ok)
}

func (r *stormResult) genCPUPerOp() time.Duration {
	if r.ok == 0 {
		return 0
	}
	return r.genCPU / time.Duration(r.ok)
}

func (r *stormResult) journalCPUPerOp() time.Duration {
	if r.ok == 0 {
		return 0
	}
	var t time.Duration
	for _, c := range r.journalCPU {
		t += c
	}
	return t / time.Duration(r.ok)
}

// prepare makes the keys and CSRs before the timed phase when keygen is
// off.
func (s *storm) prepare() error {
	if s.keygen {
		return nil
	}
	for _, a := range s.agents {
		k, csr, err := newAgentKey()
		if err != nil {
			return err
		}
		a.newKey, a.csr = k, csr
	}
	return nil
}

// run releases every agent at its arrival time (spread evenly over
// s.spread, in a random order) to a pool of s.concurrency workers; an
// agent told to retry goes back to the pool after its backoff, holding no
// worker while it waits. pids are the journal processes whose CPU and
// memory are measured.
func (s *storm) run(pids []int) *stormResult {
	n := len(s.agents)
	order := rand.Perm(n)
	ready := make(chan *simAgent, n)
	var pending sync.WaitGroup
	pending.Add(n)
	workers := s.concurrency
	if workers <= 0 || workers > n {
		workers = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline)
	defer cancel()

	rss := sampleRSS(pids, 100*time.Millisecond)
	machine := startMachine()
	cpu := startCPU(pids)
	t0 := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for a := range ready {
				if s.attempt(ctx, a) {
					pending.Done()
					continue
				}
				wait := backoff(a.attempts-1, a.lastErr)
				time.AfterFunc(wait, func() { ready <- a })
			}
		})
	}
	go func() { // arrivals
		for k, i := range order {
			a := s.agents[i]
			a.arrival = t0.Add(time.Duration(k) * s.spread / time.Duration(n))
			a.attempts, a.done, a.err, a.lastErr, a.uncertain, a.failures = 0, time.Time{}, nil, nil, false, map[string]int{}
			a.next = i
			time.Sleep(time.Until(a.arrival))
			ready <- a
		}
	}()
	pending.Wait()
	close(ready)
	wg.Wait()
	res := &stormResult{kind: s.kind, agents: n, failures: map[string]int{}}
	res.journalCPU, res.genCPU = cpu.stop()
	ours := res.genCPU
	for _, c := range res.journalCPU {
		ours += c
	}
	res.others = machine.others(ours)
	res.rssMax = rss.finish()

	var last time.Time
	for _, a := range s.agents {
		res.attempts += a.attempts
		res.maxAttempt = max(res.maxAttempt, a.attempts)
		for k, v := range a.failures {
			res.failures[k] += v
		}
		switch {
		case a.err == nil:
			res.ok++
			res.lat = append(res.lat, a.done.Sub(a.arrival))
			res.calls = append(res.calls, a.call)
			if a.done.After(last) {
				last = a.done
			}
		case a.uncertain && s.kind == stormRenew:
			res.unknown++
			fallthrough
		default:
			res.failed++
			if len(res.firstErrs) < 5 {
				res.firstErrs = append(res.firstErrs, fmt.Sprintf("%s: %v", a.node.id, a.err))
			}
		}
	}
	slices.Sort(res.lat)
	slices.Sort(res.calls)
	if res.ok > 0 {
		res.wall = last.Sub(t0)
		res.perSec = float64(res.ok) / res.wall.Seconds()
	}
	return res
}

// attempt makes one Enroll or RenewCert call for a, on a fresh connection
// (a fresh TLS handshake) to the next journal in its rotation. It reports
// whether the agent is finished (success, a final refusal, or the storm's
// deadline).
func (s *storm) attempt(ctx context.Context, a *simAgent) bool {
	if err := ctx.Err(); err != nil {
		a.err = fmt.Errorf("gave up after %d attempts: %w", a.attempts, err)
		return true
	}
	if a.csr == nil { // -keygen: the agent makes its key at boot
		k, csr, err := newAgentKey()
		if err != nil {
			a.err = err
			return true
		}
		a.newKey, a.csr = k, csr
	}
	a.attempts++
	addr := s.addrs[a.next%len(s.addrs)]
	a.next++
	began := time.Now()
	err := s.call(ctx, a, addr)
	if err == nil {
		a.done = time.Now()
		a.call = a.done.Sub(began)
		a.key, a.newKey, a.csr = a.newKey, nil, nil
		a.lastErr = nil
		return true
	}
	pe := apierr.FromError(err)
	label := pe.Code.String()
	if pe.Reason != "" {
		label += "/" + string(pe.Reason)
	}
	a.failures[label]++
	if pe.Code == codes.Unavailable || pe.Code == codes.DeadlineExceeded || pe.Code == codes.Unknown {
		a.uncertain = true
	}
	if pe.Final() {
		a.err = fmt.Errorf("attempt %d at %s: %w", a.attempts, addr, pe)
		return true
	}
	a.lastErr = pe
	return false
}

func (s *storm) call(ctx context.Context, a *simAgent, addr string) error {
	// Dial exactly as pact-agent does: its key exchange and its gRPC
	// transport options.
	cfg := s.kx.Apply(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.roots})
	if s.kind == stormRenew {
		cfg.Certificates = []tls.Certificate{{Certificate: a.chain, PrivateKey: a.key}}
	}
	opts := append(wire.ClientOptions(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	client := pactv1.NewEnrollmentServiceClient(conn)
	if s.kind == stormEnroll {
		resp, err := client.Enroll(cctx, &pactv1.EnrollRequest{
			Hardware: &pactv1.HardwareIdentity{Macs: []string{a.node.mac}, BmcSerial: a.node.bmc},
			CsrDer:   a.csr,
		})
		if err != nil {
			return err
		}
		a.chain, a.serial = resp.GetCertChainDer(), resp.GetSerial()
		return nil
	}
	resp, err := client.RenewCert(cctx, &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: a.csr})
	if err != nil {
		return err
	}
	a.chain, a.serial = resp.GetCertChainDer(), resp.GetSerial()
	return nil
}
