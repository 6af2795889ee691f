package channel_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/pact-hpc/pact/agent/channel"
	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/internal/pki"
)

// logBuffer is a log sink several goroutines write.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// take returns what was logged since the last take.
func (l *logBuffer) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}

// selfSignedLeaf is a self-signed certificate that is no CA, with a SPIFFE
// ID of domain.
func selfSignedLeaf(t *testing.T, domain string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := pki.NewSerial()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "self-signed leaf"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		URIs:         []*url.URL{{Scheme: "spiffe", Host: domain}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The learned roots are exactly the latest bundle's self-signed CA
// certificates of the --ca roots' trust domain that are not --ca roots: a
// bundle that drops one withdraws it, and no bundle withdraws a --ca root.
// Each change is logged once, at INFO, by fingerprint.
func TestRotatorLearnsTheLatestBundlesRoots(t *testing.T) {
	now := time.Now()
	a := identitytest.NewCA("pact.local", now)
	b := identitytest.NewCA("pact.local", now)
	c := identitytest.NewCA("pact.local", now)
	foreign := identitytest.NewCA("other.example", now)
	interA, _ := testCert(t, "intermediate under a", a.Cert, a.Key.(*ecdsa.PrivateKey), now)
	interB, _ := testCert(t, "intermediate under b", b.Cert, b.Key.(*ecdsa.PrivateKey), now)
	leaf := selfSignedLeaf(t, "pact.local")
	fp := func(ca *identitytest.CA) string { return pki.CertFingerprint(ca.Cert) }

	logs := &logBuffer{}
	rot, err := channel.New(func() channel.Config {
		cfg := channel.DefaultConfig()
		cfg.Targets = []string{"127.0.0.1:1"}
		cfg.Roots = []*x509.Certificate{a.Cert}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		return cfg
	}())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rot.Close() })

	steps := []struct {
		name    string
		bundle  []*x509.Certificate
		changed bool
		want    []*identitytest.CA // Roots(), in order
		logged  []string           // in the log line, if any
		notLog  []string           // never in it
	}{
		{"the --ca root and its intermediate", []*x509.Certificate{a.Cert, interA}, false, []*identitytest.CA{a}, nil, nil},
		{"a new root of the domain", []*x509.Certificate{a.Cert, b.Cert, interA, interB}, true, []*identitytest.CA{a, b},
			[]string{"level=INFO", "trusted roots changed", "roots_added=[" + fp(b) + "]", "roots_removed=[]"}, nil},
		{"the same bundle again", []*x509.Certificate{b.Cert, a.Cert, interB}, false, []*identitytest.CA{a, b}, nil, nil},
		{"a bundle without the --ca root", []*x509.Certificate{b.Cert, interB}, false, []*identitytest.CA{a, b}, nil, nil},
		{"another root replaces the learned one", []*x509.Certificate{a.Cert, c.Cert}, true, []*identitytest.CA{a, c},
			[]string{"roots_added=[" + fp(c) + "]", "roots_removed=[" + fp(b) + "]", "roots_trusted=\"[" + fp(a) + " " + fp(c) + "]\""}, nil},
		{"a root of another domain, a self-signed leaf", []*x509.Certificate{a.Cert, foreign.Cert, leaf}, true, []*identitytest.CA{a},
			[]string{"level=WARN", "another trust domain", "roots_refused=[" + fp(foreign) + "]", "roots_removed=[" + fp(c) + "]"},
			[]string{pki.CertFingerprint(leaf)}},
		{"the foreign root again is not logged again", []*x509.Certificate{a.Cert, foreign.Cert}, false, []*identitytest.CA{a}, nil, nil},
		{"an empty bundle keeps the --ca root", nil, false, []*identitytest.CA{a}, nil, nil},
	}
	for _, s := range steps {
		if got := rot.LearnBundle(s.bundle); got != s.changed {
			t.Errorf("%s: LearnBundle = %v, want %v", s.name, got, s.changed)
		}
		got := rot.Roots()
		ok := len(got) == len(s.want)
		for i := 0; ok && i < len(got); i++ {
			ok = got[i].Equal(s.want[i].Cert)
		}
		if !ok {
			t.Errorf("%s: Roots() holds %d roots %v, want %d", s.name, len(got), got, len(s.want))
		}
		logged := logs.take()
		if len(s.logged) == 0 && logged != "" {
			t.Errorf("%s: logged %q, want nothing", s.name, logged)
		}
		for _, w := range s.logged {
			if !strings.Contains(logged, w) {
				t.Errorf("%s: the log %q lacks %q", s.name, logged, w)
			}
		}
		for _, w := range s.notLog {
			if strings.Contains(logged, w) {
				t.Errorf("%s: the log %q has %q", s.name, logged, w)
			}
		}
	}
}

// A journal that re-keyed under a new root (a rollover's step 3) and that
// the agent must dial afresh is refused as of unknown authority until a
// trust bundle brings the new root, accepted after, and refused again once
// a bundle withdraws it; a journal under the --ca root is accepted
// throughout. Real mTLS and gRPC on loopback; the swaps are the rotator's.
func TestRotatorTrustsTheRootsABundleBrings(t *testing.T) {
	now := time.Now()
	caOld := identitytest.NewCA("pact.local", now)
	caNew := identitytest.NewCA("pact.local", now)
	underOld := startFakeJournal(t, caOld)
	underNew := startFakeJournalUnder(t, caNew, caOld) // it accepts the agents' certificates of the old root
	// One journal address; which server answers it is the test's choice,
	// as after a journal's restart under a new chain.
	var serving atomic.Pointer[string]
	serving.Store(&underNew.addr)
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", *serving.Load())
	}
	cfg := channel.DefaultConfig()
	cfg.Targets = []string{"127.0.0.1:443"} // the dialer picks the server; the name is the server certificate's
	cfg.Roots = []*x509.Certificate{caOld.Cert}
	cfg.CallTimeout = 5 * time.Second
	cfg.Logger = quiet
	cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(dialer)}
	rot, err := channel.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rot.Close() })
	unknownAuthority := func(step string, err error) {
		t.Helper()
		var ua x509.UnknownAuthorityError
		if !errors.As(err, &ua) {
			t.Fatalf("%s: swap error %v, want an x509.UnknownAuthorityError", step, err)
		}
	}
	id := caOld.Issue(identity.SourceJournal, "spiffe://pact.local/pact-agent/n1", now.Add(-time.Minute), now.Add(time.Hour))

	unknownAuthority("before the bundle", rot.Swap(t.Context(), id))

	rot.LearnBundle([]*x509.Certificate{caOld.Cert, caNew.Cert})
	if err := rot.Swap(t.Context(), id); err != nil {
		t.Fatalf("after a bundle with the new root: %v", err)
	}

	rot.LearnBundle([]*x509.Certificate{caOld.Cert})
	unknownAuthority("after a bundle without the new root", rot.Swap(t.Context(), id))

	serving.Store(&underOld.addr)
	if err := rot.Swap(t.Context(), id); err != nil {
		t.Fatalf("a journal under the --ca root after the new root was withdrawn: %v", err)
	}
	rot.LearnBundle(nil)
	if err := rot.Swap(t.Context(), id); err != nil {
		t.Fatalf("a journal under the --ca root after an empty bundle: %v", err)
	}
}
