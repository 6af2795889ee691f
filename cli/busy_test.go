package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pact-hpc/pact/internal/transport"
)

// busyFront stands in front of a journal: it reads each connection's
// ClientHello and answers the first busy ones busy, as a saturated
// journal does, relaying the rest to the journal.
func busyFront(t *testing.T, journal string, busyFirst int, retryAfter time.Duration) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				hdr := make([]byte, 5)
				if _, err := io.ReadFull(c, hdr); err != nil {
					return
				}
				hello := make([]byte, 5+(int(hdr[3])<<8|int(hdr[4])))
				copy(hello, hdr)
				if _, err := io.ReadFull(c, hello[5:]); err != nil {
					return
				}
				mu.Lock()
				n++
				busy := n <= busyFirst
				mu.Unlock()
				if busy {
					_, _ = c.Write(transport.FormatBusy(retryAfter))
					_ = c.(*net.TCPConn).CloseWrite()
					return
				}
				up, err := net.Dial("tcp", journal)
				if err != nil {
					return
				}
				defer up.Close()
				go func() {
					_, _ = up.Write(hello)
					_, _ = io.Copy(up, c)
					_ = up.(*net.TCPConn).CloseWrite()
				}()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return lis.Addr().String()
}

// A command that finds the journal busy says so, with the time it named,
// not "EOF". The busy answers are injected (busyFront) in front of a real
// journal: a real one gives them only when saturated.
func TestBusyJournalIsExplained(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	alice := l.alice(t)
	addr := busyFront(t, l.h.Addr, 1000, 1500*time.Millisecond)
	code, _, stderr := runEnv(t, nil, runOpts{key: alice.keyPEM}, append([]string{"node", "list"}, l.flags(alice, addr)...)...)
	if code != ExitUnavailable || !strings.Contains(stderr, "journal "+addr+" is busy (boot storm?); retry after 1.5 s") || strings.Contains(stderr, "EOF") {
		t.Errorf("exit %d stderr:\n%s", code, stderr)
	}
}

// pact node enroll --batch waits out a busy answer for the time the
// journal named (plus a little jitter, not the backoff), then sends.
func TestEnrollBatchWaitsOutBusy(t *testing.T) {
	clearEnv(t)
	l := sharedJournal(t)
	alice := l.alice(t)
	suffix, mac := l.fresh()
	addr := busyFront(t, l.h.Addr, 2, 1500*time.Millisecond)
	var slept []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		slept = append(slept, d)
		return ctx.Err()
	}
	rec := &recorder{}
	code, stdout, stderr := runEnv(t, nil, runOpts{stdin: strings.NewReader(liveBatchFile(5, suffix, mac)), sleep: sleep, rec: rec, key: alice.keyPEM},
		append([]string{"node", "enroll", "--batch", "-"}, l.flags(alice, addr)...)...)
	if code != ExitOK || !strings.HasSuffix(stdout, "5 rows: 5 ok, 0 exists, 0 errors\n") {
		t.Fatalf("exit %d stdout %s stderr %s", code, stdout, stderr)
	}
	// 1.5 s, and half of the jitter's range (5 % of it) as every draw in
	// these tests: twice, once per busy answer.
	want := 1500*time.Millisecond + 75*time.Millisecond/2
	if !slices.Equal(slept, []time.Duration{want, want}) {
		t.Errorf("slept %v, want %v twice", slept, want)
	}
	// The chunk was tried three times, the first two refused at the
	// handshake (never sent), and the journal registered every row once:
	// all five answered ok above, none exists.
	if got := rec.chunkSizes(); !slices.Equal(got, []int{5, 5, 5}) {
		t.Errorf("chunks tried %v, want one of 5 rows three times", got)
	}
	for i := range 5 {
		if n := fmt.Sprintf("node-%06d%s", i, suffix); !l.exists(t, n) {
			t.Errorf("%s is not registered", n)
		}
	}
}
