package journal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/pact-hpc/pact/internal/logkey"
)

// DefaultBundleRefreshHint is the spiffe_refresh_hint the bundle endpoint
// announces unless --bundle-refresh-hint says otherwise (SPIRE's own
// default).
const DefaultBundleRefreshHint = 5 * time.Minute

// BundlePath is the path the bundle endpoint serves the bundle on. The
// SPIFFE Federation specification leaves the path to the server; "/" keeps
// the URL an operator gives SPIRE or another quorum short.
const BundlePath = "/"

// federationBundle is the domain's SPIFFE bundle as the bundle endpoint
// serves it: the domain's roots as its X.509 authorities (a pact leaf
// carries its journal CA and intermediate in its chain, so the roots are
// the trust anchors, as in any X.509-SVID bundle), no JWT authorities, the
// refresh hint, and a sequence number derived from the roots alone, so
// every journal of the quorum serves the same number for the same bundle.
func federationBundle(td spiffeid.TrustDomain, roots []*x509.Certificate, hint time.Duration) *spiffebundle.Bundle {
	b := spiffebundle.New(td)
	b.SetX509Authorities(roots)
	b.SetRefreshHint(hint)
	b.SetSequenceNumber(bundleSequence(roots))
	return b
}

// bundleSequence is the spiffe_sequence of a set of roots. It rises when a
// newer root is added (a rollover's first step) and again when an older
// one leaves (its last): the newest root's NotBefore in seconds, times 8,
// plus 8 less the number of roots (up to 7 counted). Journals restarted
// with the same ca.pem serve the same number.
func bundleSequence(roots []*x509.Certificate) uint64 {
	var newest int64
	for _, r := range roots {
		if s := r.NotBefore.Unix(); s > newest {
			newest = s
		}
	}
	if newest < 0 {
		newest = 0
	}
	n := len(roots)
	if n > 7 {
		n = 7
	}
	return uint64(newest)*8 + uint64(8-n)
}

// bundleSource hands the federation handler the current bundle of the
// journal's own trust domain and nothing else.
type bundleSource struct {
	td    spiffeid.TrustDomain
	roots []*x509.Certificate
	hint  time.Duration
}

func (s bundleSource) GetBundleForTrustDomain(td spiffeid.TrustDomain) (*spiffebundle.Bundle, error) {
	if td != s.td {
		return nil, fmt.Errorf("journal: no bundle for trust domain %q (this journal serves %q)", td, s.td)
	}
	return federationBundle(s.td, s.roots, s.hint), nil
}

// serveBundleEndpoint serves the domain's bundle over HTTPS (the
// https_spiffe profile) on BundleEndpointListen until the journal stops.
// The connection is server-authenticated with the journal's current server
// certificate (re-keyed with the intermediate); no client certificate is
// asked for: a bundle is public.
func (j *Journal) serveBundleEndpoint() (net.Listener, error) {
	td, err := spiffeid.TrustDomainFromString(j.ca.Domain())
	if err != nil {
		return nil, fmt.Errorf("journal: domain %q is not a SPIFFE trust domain: %w", j.ca.Domain(), err)
	}
	h, err := federation.NewHandler(td, bundleSource{td: td, roots: j.bundle.roots, hint: j.cfg.BundleRefreshHint})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(BundlePath, h)
	mux.HandleFunc(ClaimsPath, j.serveClaims)
	lis, err := net.Listen("tcp", j.cfg.BundleEndpointListen)
	if err != nil {
		return nil, err
	}
	tcfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The bundle is public; the claim feed checks the client
		// certificate itself, against the federated bundles in Raft.
		ClientAuth: tls.RequestClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return j.ca.ServerCertificate(), nil
		},
		Time: j.cfg.Clock.Now,
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10,
		// TLS handshake failures (scanners, a wrong root) are routine:
		// debug, not the operator's error log.
		ErrorLog: slog.NewLogLogger(j.log.Handler(), slog.LevelDebug)}
	go func() {
		if err := srv.Serve(tls.NewListener(lis, tcfg)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			j.log.Error("bundle endpoint stopped", logkey.Err, err)
		}
	}()
	go func() {
		<-j.stop
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	return lis, nil
}

// BundleEndpointAddr is the bundle endpoint's address ("" when it is off).
func (j *Journal) BundleEndpointAddr() string { return j.bundleEndpointAddr }
