package journal_test

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// A renewal that committed with its answer lost (a deadline in a storm)
// is asked again from the certificate it replaced, with the same new key:
// the journal answers with the certificate that committed, and signs and
// writes nothing. From the replaced certificate any other key is refused
// stale, and so is every other call.
func TestRenewalRetriedAfterItsAnswerWasLost(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	c := e.agentClient(t, a)
	first, err := c.RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: key.CSR})
	if err != nil {
		t.Fatal(err)
	}

	last := e.h.J.RaftLastIndex()
	again, err := c.RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: key.CSR})
	if err != nil {
		t.Fatalf("the renewal asked again with its key: %v", err)
	}
	if again.GetSerial() != first.GetSerial() || !slices.EqualFunc(again.GetCertChainDer(), first.GetCertChainDer(), slices.Equal) {
		t.Fatalf("asked again: serial %s, want the committed %s and its chain", again.GetSerial(), first.GetSerial())
	}
	if got := e.h.J.RaftLastIndex(); got != last {
		t.Errorf("answering again wrote %d Raft entries, want none", got-last)
	}
	if got := must(t, e.h.J.MetricsRegistry(), "pact_journal_renew_total", "result", "retried"); got != 1 {
		t.Errorf("renew_total{result=retried} = %v, want 1", got)
	}
	// The answer is the node's certificate: the agent streams with it.
	e.subscribe(t, newAgent("n1", key, again.GetCertChainDer(), again.GetSerial()))

	before := e.registry(t)
	resp, err := c.RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: journaltest.NewKey(t).CSR})
	e.refused(t, before, resp, err, codes.PermissionDenied, apierr.StaleCertificate)
	resp, err = c.RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: []byte("not a CSR")})
	e.refused(t, before, resp, err, codes.InvalidArgument, apierr.InvalidCSR)
	_, err = c.Ping(callCtx(t), &pactv1.PingRequest{})
	wantErr(t, err, codes.PermissionDenied, apierr.StaleCertificate)
	_, err = c.Release(callCtx(t), &pactv1.ReleaseRequest{})
	wantErr(t, err, codes.PermissionDenied, apierr.StaleCertificate)
	if err := e.subscribeErr(t, &a.cert); apierr.FromError(err).Reason != apierr.StaleCertificate {
		t.Errorf("a stream of the replaced certificate: %v, want STALE_CERTIFICATE", err)
	}
}
