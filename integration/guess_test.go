package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/internal/polltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// guessSources is the distributed guessing: wrong-hardware Enrolls
// from 1,000 source addresses.
const (
	guessSources  = 1000
	guessWorkers  = 100                      // each drives guessSources/guessWorkers connections
	guessHelperEv = "PACT_TEST_GUESS_HELPER" // "addr ca.pem"
)

// guessHelper floods a journal with Enrolls for hardware nobody
// registered, each connection from its own loopback address, until its
// stdin closes (or 2 minutes pass). It prints "saturated" once the journal
// refuses for its global budget, and at the end "counts" of the answers
// by reason and limit.
func guessHelper(spec string) int {
	var addr, caFile string
	if _, err := fmt.Sscan(spec, &addr, &caFile); err != nil {
		fmt.Fprintln(os.Stderr, "guess helper:", err)
		return 2
	}
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "guess helper:", err)
		return 2
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemBytes)
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	clients := make([]pactv1.EnrollmentServiceClient, guessSources)
	for i := range clients {
		src := net.IPv4(127, 0, byte(20+i/250), byte(1+i%250))
		conn, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "localhost"})),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
				return d.DialContext(ctx, "tcp", a)
			}))
		if err != nil {
			fmt.Fprintln(os.Stderr, "guess helper:", err)
			return 1
		}
		defer conn.Close()
		clients[i] = pactv1.NewEnrollmentServiceClient(conn)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	var saturated atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < guessWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ctx.Err() == nil; k++ {
				c := clients[w+guessWorkers*(k%(guessSources/guessWorkers))]
				mac := fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", rand.N(256), rand.N(256), rand.N(256), rand.N(256), rand.N(256))
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.Enroll(cctx, &pactv1.EnrollRequest{Hardware: &pactv1.HardwareIdentity{Macs: []string{mac}, BmcSerial: fmt.Sprintf("GUESS-%d", rand.N(1<<30))}})
				cancel()
				key := "ok"
				if pe := apierr.FromError(err); pe != nil {
					key = string(pe.Reason)
					if key == "" {
						key = pe.Code.String()
					}
					if pe.Limit != "" {
						key += "/" + string(pe.Limit)
					}
					if pe.Limit == apierr.LimitJournal && saturated.CompareAndSwap(false, true) {
						fmt.Println("saturated")
					}
				}
				mu.Lock()
				counts[key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	fmt.Println("counts " + strings.Join(parts, " "))
	return 0
}

// A correctly registered node that boots during a wrong-hardware flood from
// 1,000 addresses enrolls within 10 s of its first attempt, while the
// failed guesses the journal evaluates stay bounded by its global budget;
// and nothing the node is told blames its own address.
func TestGuessingFloodLetsARegisteredNodeThrough(t *testing.T) {
	dir := t.TempDir()
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ml.Addr().String()
	ml.Close()
	// The journal's default limits: 200 failures all sources together,
	// regained one per 300 ms.
	p := start(t, nil, "pact-journal", "--dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--metrics-listen", metricsAddr)
	addr := p.waitLine(t, servingRE)[1]
	j := &devJournal{proc: p, dir: dir, addr: addr, env: []string{
		"PACT_JOURNAL=" + addr,
		"PACT_CA=" + filepath.Join(dir, "ca.pem"),
		"PACT_CERT=" + filepath.Join(dir, "admin.pem"),
		"PACT_KEY=" + filepath.Join(dir, "admin-key.pem"),
	}}
	if out, code := j.pact(t, "node", "enroll", "node-001", "--mac", "52:54:00:00:02:01", "--bmc-serial", "SN-GUESS-1"); code != 0 {
		t.Fatalf("pact node enroll: exit %d\n%s", code, out)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper, in, out := startTestHelper(t, self, fmt.Sprintf("%s=%s %s", guessHelperEv, addr, filepath.Join(dir, "ca.pem")))
	saturated := make(chan struct{})
	countsLine := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			switch l := sc.Text(); {
			case l == "saturated":
				close(saturated)
			case strings.HasPrefix(l, "counts "):
				countsLine <- l
			}
		}
		close(countsLine)
	}()
	helperDone := false
	stopHelper := func() {
		if !helperDone {
			helperDone = true
			in.Close()
			_ = helper.Wait()
		}
	}
	defer stopHelper()
	select {
	case <-saturated:
	case <-time.After(60 * time.Second):
		t.Fatal("the flood never spent the journal's global failure budget")
	}
	failuresAt := func() float64 {
		return scrape(t, metricsAddr, `pact_journal_enroll_failures_total{reason="NODE_NOT_ENROLLED"}`)
	}

	// The registered node boots now, in the middle of the flood.
	began := time.Now()
	agent := j.agent(t, "52:54:00:00:02:01", "SN-GUESS-1")
	agent.waitLineWithin(t, enrolledRE, 10*time.Second)
	took := time.Since(began)

	// Once every address of the flood has failed once (its first failure
	// spends the fresh budget, ratelimit.Config.FreshBurst), every failure
	// spends the global budget: 200 at first, then one per 300 ms.
	var made polltest.Last
	polltest.Until(t, 60*time.Second, 100*time.Millisecond, func() bool { // polling the attack's progress
		made.Value = failuresAt()
		return made.Value.(float64) >= guessSources+200
	}, "the flood made only %v failures in a minute", &made)
	from, failedFrom := time.Now(), failuresAt()
	<-time.After(3 * time.Second)
	failed, elapsed := failuresAt()-failedFrom, time.Since(from)
	stopHelper()
	counts := <-countsLine

	if strings.Contains(agent.output(), "this address") {
		t.Errorf("the registered node was told its address is to blame:\n%s", agent.output())
	}
	// One failure per 300 ms refill, plus the few admitted at once when
	// the window opened.
	bound := elapsed.Seconds()/0.3 + 8
	t.Logf("registered node enrolled %v after its process started, during a flood from %d addresses; then the journal evaluated %.0f failed guesses in %v (%.1f/s; bound %.0f); flood answers: %s",
		took.Round(time.Millisecond), guessSources, failed, elapsed.Round(time.Millisecond), failed/elapsed.Seconds(), bound, counts)
	if failed > bound {
		t.Errorf("the journal evaluated %.0f failed guesses in %v, more than its global budget allows (%.0f)", failed, elapsed, bound)
	}
	if !strings.Contains(counts, "RATE_LIMITED/journal") {
		t.Errorf("the flood was never refused for the journal's global limit: %s", counts)
	}
}
