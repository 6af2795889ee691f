package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"runtime"
	"slices"
	"time"
)

// speedProbe measures how fast the machine does a fixed piece of work
// while a phase of the benchmark runs: the CPU time of the calling thread
// for a few ECDSA P-256 signatures and verifications, every probeEvery,
// on a locked thread. Thread CPU time does not count waiting for a CPU,
// only doing the work, so it moves with what the hardware gives a thread
// at that moment (another guest on the host, a busy sibling hyperthread,
// caches), not with how the scheduler shares the CPUs. Comparing the
// storm's median with the ceiling's tells whether a slow run was slow
// because the machine was.
type speedProbe struct {
	stop    chan struct{}
	done    chan struct{}
	samples []time.Duration
}

const (
	probeEvery = 200 * time.Millisecond
	probeOps   = 4
)

func startProbe() *speedProbe {
	p := &speedProbe{stop: make(chan struct{}), done: make(chan struct{})}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err) // the system's randomness failed
	}
	digest := sha256.Sum256([]byte("pact stormbench speed probe"))
	go func() {
		defer close(p.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			start := threadCPU()
			for range probeOps {
				sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
				if err != nil || !ecdsa.VerifyASN1(&key.PublicKey, digest[:], sig) {
					panic("stormbench: speed probe: ECDSA failed")
				}
			}
			p.samples = append(p.samples, (threadCPU()-start)/probeOps)
		}
	}()
	return p
}

// finish stops the probe and returns the median of its samples (0 if it
// took none: a phase shorter than probeEvery).
func (p *speedProbe) finish() time.Duration {
	close(p.stop)
	<-p.done
	if len(p.samples) == 0 {
		return 0
	}
	s := slices.Clone(p.samples)
	slices.Sort(s)
	return s[len(s)/2]
}
