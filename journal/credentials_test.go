package journal_test

// Enrollment credentials beside the hardware match (join tokens), fencing,
// and one key per node, through a real journal on a fake clock.

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/pact-hpc/pact/internal/apierr"
	"github.com/pact-hpc/pact/journal"
	"github.com/pact-hpc/pact/journal/ca"
	"github.com/pact-hpc/pact/journal/journaltest"
	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// registerWithToken registers a node whose policy requires a join token.
func (e *env) registerWithToken(t testing.TB, id, bmc string, macs ...string) *pactv1.Node {
	t.Helper()
	resp, err := e.admin.RegisterNode(callCtx(t), &pactv1.RegisterNodeRequest{
		NodeId: id, Hardware: hw(bmc, macs...), Credentials: &pactv1.CredentialPolicy{RequireJoinToken: true},
	})
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	if !resp.GetNode().GetCredentials().GetRequireJoinToken() {
		t.Fatalf("registered %s without its token requirement: %v", id, resp.GetNode())
	}
	return resp.GetNode()
}

func (e *env) createToken(t testing.TB, node string, ttl time.Duration) (string, *pactv1.JoinTokenInfo) {
	t.Helper()
	resp, err := e.admin.CreateJoinToken(callCtx(t), &pactv1.CreateJoinTokenRequest{NodeId: node, TtlSeconds: int64(ttl / time.Second)})
	if err != nil {
		t.Fatalf("create token for %s: %v", node, err)
	}
	return resp.GetToken(), resp.GetInfo()
}

func (e *env) enrollToken(t testing.TB, key journaltest.Key, token, bmc string, macs ...string) (*pactv1.EnrollResponse, error) {
	t.Helper()
	return pactv1.NewEnrollmentServiceClient(e.h.Dial(t, nil)).Enroll(callCtx(t), &pactv1.EnrollRequest{
		Hardware: hw(bmc, macs...), CsrDer: key.CSR, Credentials: &pactv1.EnrollCredentials{JoinToken: token},
	})
}

func TestJoinTokenEnrollsOnce(t *testing.T) {
	e := newEnv(t)
	e.registerWithToken(t, "n1", "SN1", mac1)
	tok, info := e.createToken(t, "n1", time.Hour)
	if len(tok) != 50 || !strings.HasPrefix(tok, "pactjt_") {
		t.Fatalf("token %d bytes, want pactjt_ and 43 base64url characters", len(tok))
	}
	if info.GetNodeId() != "n1" || len(info.GetId()) != 12 || info.GetExpiresAtUnixNano() != e.fc.Now().Add(time.Hour).UnixNano() || info.GetUsedAtUnixNano() != 0 {
		t.Fatalf("token info %v", info)
	}
	if a := e.lastAudit(t, "n1"); a.GetAction() != "token-create" || !strings.Contains(a.GetDetail(), info.GetId()) {
		t.Errorf("audit %v, want token-create naming %s", a, info.GetId())
	}
	key := journaltest.NewKey(t)
	resp, err := e.enrollToken(t, key, tok, "SN1", mac1)
	if err != nil {
		t.Fatalf("enroll with the token: %v", err)
	}
	if a := e.lastAudit(t, "n1"); a.GetAction() != "enroll" || !strings.Contains(a.GetDetail(), "join token "+info.GetId()) {
		t.Errorf("audit %v, want enroll naming join token %s", a, info.GetId())
	}
	list, err := e.admin.ListJoinTokens(callCtx(t), &pactv1.ListJoinTokensRequest{NodeId: "n1"})
	if err != nil || len(list.GetTokens()) != 1 || list.GetTokens()[0].GetUsedAtUnixNano() != e.now() {
		t.Fatalf("tokens %v (%v), want one used now", list.GetTokens(), err)
	}
	// A retry of the committed enrollment (same key) gets the same
	// certificate back: the token was consumed by the first answer.
	before := e.registry(t)
	again, err := e.enrollToken(t, key, tok, "SN1", mac1)
	if err != nil || again.GetSerial() != resp.GetSerial() {
		t.Fatalf("retry with the same key: %v, serial %s want %s", err, again.GetSerial(), resp.GetSerial())
	}
	if after := e.registry(t); after.applied != before.applied {
		t.Errorf("the retry wrote to Raft (%d -> %d)", before.applied, after.applied)
	}
	// A second use with another key (a clone of the node, or the node
	// rebooted without a new token) is refused.
	before = e.registry(t)
	_, err = e.enrollToken(t, journaltest.NewKey(t), tok, "SN1", mac1)
	pe := e.refusedUnwritten(t, before, nil, err, codes.PermissionDenied, apierr.JoinTokenInvalid)
	if !strings.Contains(pe.Message, "already used") {
		t.Errorf("message %q, want it to say the token was used", pe.Message)
	}
}

// A join token expires at the proposer's clock: the journal refuses it
// before any write, and the FSM would too (raftfsm tests).
func TestJoinTokenExpires(t *testing.T) {
	e := newEnv(t)
	e.registerWithToken(t, "n1", "SN1", mac1)
	tok, _ := e.createToken(t, "n1", time.Minute)
	e.tick(t, time.Minute)
	before := e.registry(t)
	_, err := e.enrollToken(t, journaltest.NewKey(t), tok, "SN1", mac1)
	pe := e.refusedUnwritten(t, before, nil, err, codes.PermissionDenied, apierr.JoinTokenInvalid)
	if !strings.Contains(pe.Message, "expired") {
		t.Errorf("message %q, want it to say the token expired", pe.Message)
	}
	fresh, _ := e.createToken(t, "n1", time.Minute)
	if _, err := e.enrollToken(t, journaltest.NewKey(t), fresh, "SN1", mac1); err != nil {
		t.Fatalf("a fresh token: %v", err)
	}
}

// A node that does not require a token ignores one, and is not consumed.
func TestJoinTokenIgnoredWhenNotRequired(t *testing.T) {
	e := newEnv(t)
	e.register(t, "n1", "SN1", mac1)
	if _, err := e.enrollToken(t, journaltest.NewKey(t), "pactjt_not-even-well-formed", "SN1", mac1); err != nil {
		t.Fatalf("enroll of a node without a token policy: %v", err)
	}
}

func TestRevokeJoinTokens(t *testing.T) {
	e := newEnv(t)
	e.registerWithToken(t, "n1", "SN1", mac1)
	tok1, info1 := e.createToken(t, "n1", time.Hour)
	tok2, _ := e.createToken(t, "n1", time.Hour)
	resp, err := e.admin.RevokeJoinTokens(callCtx(t), &pactv1.RevokeJoinTokensRequest{NodeId: "n1", Id: info1.GetId()})
	if err != nil || len(resp.GetRevoked()) != 1 || resp.GetRevoked()[0].GetId() != info1.GetId() {
		t.Fatalf("revoke %s: %v %v", info1.GetId(), resp, err)
	}
	if a := e.lastAudit(t, "n1"); a.GetAction() != "token-revoke" || !strings.Contains(a.GetDetail(), info1.GetId()) {
		t.Errorf("audit %v", a)
	}
	before := e.registry(t)
	_, err = e.enrollToken(t, journaltest.NewKey(t), tok1, "SN1", mac1)
	e.refusedUnwritten(t, before, nil, err, codes.PermissionDenied, apierr.JoinTokenInvalid)
	// Revoking again finds nothing: NOT_FOUND, no write.
	before = e.registry(t)
	_, err = e.admin.RevokeJoinTokens(callCtx(t), &pactv1.RevokeJoinTokensRequest{NodeId: "n1", Id: info1.GetId()})
	e.refusedUnwritten(t, before, nil, err, codes.NotFound, apierr.NotFound)
	if _, err := e.enrollToken(t, journaltest.NewKey(t), tok2, "SN1", mac1); err != nil {
		t.Fatalf("the other token: %v", err)
	}
}

// Refused token enrollments count against the source like any refused
// enrollment: the failure limiter stops a guesser.
func TestJoinTokenRefusalsAreRateLimited(t *testing.T) {
	e := newEnv(t, func(c *journal.Config) {
		c.RateLimit.PerSourceBurst = 3
		c.RateLimit.PerSourceRefill = time.Minute
		c.MetricsListen = "127.0.0.1:0"
	})
	e.registerWithToken(t, "n1", "SN1", mac1)
	tok, _ := e.createToken(t, "n1", time.Hour)
	wrong := "pactjt_" + strings.Repeat("A", 43)
	for range 3 {
		_, err := e.enrollToken(t, journaltest.NewKey(t), wrong, "SN1", mac1)
		wantErr(t, err, codes.PermissionDenied, apierr.JoinTokenInvalid)
	}
	_, err := e.enrollToken(t, journaltest.NewKey(t), tok, "SN1", mac1)
	wantErr(t, err, codes.ResourceExhausted, apierr.RateLimited)
	if _, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	body := metricsBody(t, e.h)
	for _, want := range []string{
		"pact_journal_nodes_fenced 1",
		`pact_journal_raft_apply_seconds_count{op="fence"} 1`,
		`pact_journal_enroll_failures_total{reason="JOIN_TOKEN_INVALID"} 3`,
		`pact_journal_enroll_credential_refusals_total{credential="join_token"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func metricsBody(t testing.TB, h *journaltest.Harness) string {
	t.Helper()
	resp, err := http.Get("http://" + h.J.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJoinTokenNeverLeaks drives every path a token takes (created,
// listed, presented wrong, for the wrong node, right, again, revoked) and
// then looks for the token in the journal's log (at debug level), the
// audit trail and its JSON-lines export, every error message, and every
// operator answer as JSON. Only the operator's CreateJoinToken answer may
// hold it.
func TestJoinTokenNeverLeaks(t *testing.T) {
	var logs syncBuffer
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	e := newEnv(t, func(c *journal.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.AuditLog = auditFile
	})
	e.registerWithToken(t, "n1", "SN1", mac1)
	e.registerWithToken(t, "n2", "SN2", mac2)
	tok, _ := e.createToken(t, "n1", time.Hour)
	other, _ := e.createToken(t, "n2", time.Hour)
	spare, _ := e.createToken(t, "n1", time.Hour)
	secrets := []string{tok, other, spare}

	var seen []string // every error message and operator answer
	record := func(err error) {
		if err != nil {
			seen = append(seen, err.Error())
		}
	}
	_, err := e.enrollToken(t, journaltest.NewKey(t), other, "SN1", mac1) // n2's token
	record(err)
	_, err = e.enrollToken(t, journaltest.NewKey(t), tok[:len(tok)-1]+"x", "SN1", mac1) // mistyped
	record(err)
	_, err = e.enrollToken(t, journaltest.NewKey(t), tok, "SN1", mac1) // right
	record(err)
	_, err = e.enrollToken(t, journaltest.NewKey(t), tok, "SN1", mac1) // used
	record(err)
	list, err := e.admin.ListJoinTokens(callCtx(t), &pactv1.ListJoinTokensRequest{})
	record(err)
	seen = append(seen, protojson.Format(list))
	rev, err := e.admin.RevokeJoinTokens(callCtx(t), &pactv1.RevokeJoinTokensRequest{NodeId: "n1"})
	record(err)
	seen = append(seen, protojson.Format(rev))
	for _, n := range []string{"n1", "n2"} {
		seen = append(seen, protojson.Format(e.node(t, n)))
	}
	for _, a := range e.audit(t, "") {
		seen = append(seen, protojson.Format(a))
	}
	if len(seen) < 8 {
		t.Fatalf("collected %d answers, want every path", len(seen))
	}
	eventually(t, "the audit export to hold the token entries", func() bool {
		b, _ := os.ReadFile(auditFile)
		return strings.Count(string(b), "token-") >= 4
	})
	exported, err := os.ReadFile(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	places := map[string]string{"the journal log": logs.String(), "the audit export": string(exported), "answers and errors": strings.Join(seen, "\n")}
	if !strings.Contains(logs.String(), "join token created") || !strings.Contains(logs.String(), "enrollment refused") {
		t.Fatalf("the log did not record the token paths; the check below would prove nothing:\n%s", logs.String())
	}
	for where, text := range places {
		for _, s := range secrets {
			// The random part alone, so a token split or re-encoded
			// around its prefix is caught too.
			if body := strings.TrimPrefix(s, "pactjt_"); strings.Contains(text, body[:20]) {
				t.Errorf("%s holds a join token", where)
			}
		}
	}
}

func TestFenceNode(t *testing.T) {
	e := newEnv(t)
	e.registerIn(t, "n1", "vc1", "SN1", mac1)
	a := e.enrollNew(t, "n1", "SN1", mac1)
	w := e.subscribe(t, a)

	start := time.Now()
	resp, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "INC-42 suspicious traffic"})
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	// The journal's clock stands still: the fence itself, not a timer,
	// closes the stream.
	evs, ended, err := w.end(t)
	t.Logf("the stream ended %v after the fence began", ended.Sub(start))
	if len(evs) != 1 || evs[0].GetRevoked().GetCode() != string(apierr.NodeFenced) || !strings.Contains(evs[0].GetRevoked().GetReason(), "fenced") {
		t.Errorf("the stream delivered %v before ending, want one Revoked event saying fenced", evs)
	}
	wantErr(t, err, codes.PermissionDenied, apierr.NodeFenced)
	n := resp.GetNode()
	if f := n.GetFence(); f.GetReason() != "INC-42 suspicious traffic" || f.GetBy() != devAdmin || f.GetAtUnixNano() != e.now() {
		t.Errorf("fence %v", f)
	}
	if n.GetVcluster() != "vc1" || n.GetState() != stInactive || n.GetCert().GetSerial() != a.serial {
		t.Errorf("fenced node %v: want vc1 kept, Inactive, its last certificate on record", n)
	}
	if au := e.lastAudit(t, "n1"); au.GetAction() != "fence" || au.GetDetail() != "reason: INC-42 suspicious traffic" || au.GetSerial() != a.serial {
		t.Errorf("audit %v", au)
	}
	// Fenced: the old certificate no longer authenticates, a new
	// enrollment and a renewal are refused, nothing is written.
	tests := []struct {
		name string
		call func() (certCarrier, error)
	}{
		{"Enroll", func() (certCarrier, error) { return e.enroll(t, journaltest.NewKey(t), "SN1", mac1) }},
		{"Enroll with the fenced key", func() (certCarrier, error) { return e.enroll(t, a.key, "SN1", mac1) }},
		{"RenewCert", func() (certCarrier, error) {
			return e.agentClient(t, a).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: a.serial, CsrDer: journaltest.NewKey(t).CSR})
		}},
		{"Subscribe", func() (certCarrier, error) { return nil, e.subscribeErr(t, &a.cert) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			resp, err := tt.call()
			pe := e.refusedUnwritten(t, before, resp, err, codes.PermissionDenied, apierr.NodeFenced)
			if strings.Contains(pe.Message, "INC-42") {
				t.Errorf("the node is told the operator's reason: %q", pe.Message)
			}
		})
	}
	// Fencing again changes nothing, says so, and writes nothing.
	before := e.registry(t)
	if again, err := e.admin.FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "again"}); err != nil || again.GetNode().GetFence().GetReason() != "INC-42 suspicious traffic" || !again.GetUnchanged() {
		t.Errorf("fence again: %v %v", again, err)
	}
	e.unchangedUnwritten(t, before)
	un, err := e.admin.UnfenceNode(callCtx(t), &pactv1.UnfenceNodeRequest{NodeId: "n1"})
	if err != nil || un.GetNode().GetFence() != nil || un.GetUnchanged() {
		t.Fatalf("unfence: %v %v", un, err)
	}
	if au := e.lastAudit(t, "n1"); au.GetAction() != "unfence" {
		t.Errorf("audit %v", au)
	}
	// Unfencing a node that is not fenced: the same, no Raft write.
	before = e.registry(t)
	if again, err := e.admin.UnfenceNode(callCtx(t), &pactv1.UnfenceNodeRequest{NodeId: "n1"}); err != nil || !again.GetUnchanged() || again.GetNode().GetNodeId() != "n1" {
		t.Errorf("unfence again: %v %v", again, err)
	}
	e.unchangedUnwritten(t, before)
	// The old certificate stays revoked; the node enrolls again.
	e.refused(t, e.registry(t), nil, e.subscribeErr(t, &a.cert), codes.PermissionDenied, apierr.NodeRevoked)
	b := e.enrollNew(t, "n1", "SN1", mac1)
	e.subscribe(t, b)
	if n := e.node(t, "n1"); n.GetState() != stActive || n.GetVcluster() != "vc1" {
		t.Errorf("after unfence and enroll: %v", n)
	}
}

func TestFenceRefusals(t *testing.T) {
	e := newEnv(t)
	e.register(t, "n1", "SN1", mac1)
	tests := []struct {
		name   string
		req    *pactv1.FenceNodeRequest
		code   codes.Code
		reason apierr.Reason
	}{
		{"no reason", &pactv1.FenceNodeRequest{NodeId: "n1"}, codes.InvalidArgument, apierr.InvalidArgument},
		{"blank reason", &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "  "}, codes.InvalidArgument, apierr.InvalidArgument},
		{"reason with a newline", &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "a\nforged audit line"}, codes.InvalidArgument, apierr.InvalidArgument},
		{"reason too long", &pactv1.FenceNodeRequest{NodeId: "n1", Reason: strings.Repeat("x", 513)}, codes.InvalidArgument, apierr.InvalidArgument},
		{"unknown node", &pactv1.FenceNodeRequest{NodeId: "nope", Reason: "r"}, codes.NotFound, apierr.NodeNotEnrolled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.registry(t)
			_, err := e.admin.FenceNode(callCtx(t), tt.req)
			e.refusedUnwritten(t, before, nil, err, tt.code, tt.reason)
		})
	}
}

// One key, one node: a CSR for a key that is another node's current key
// is refused at Enroll and at RenewCert.
func TestKeyBoundToAnotherNode(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, "n1", "SN1", mac1)
	b := e.activate(t, "n2", "SN2", mac2)
	e.register(t, "n3", "SN3", mac(0x803))
	t.Run("Enroll", func(t *testing.T) {
		before := e.registry(t)
		resp, err := e.enroll(t, a.key, "SN3", mac(0x803))
		e.refusedUnwritten(t, before, resp, err, codes.AlreadyExists, apierr.KeyInUse)
	})
	t.Run("RenewCert", func(t *testing.T) {
		before := e.registry(t)
		resp, err := e.agentClient(t, b).RenewCert(callCtx(t), &pactv1.RenewCertRequest{CurrentSerial: b.serial, CsrDer: a.key.CSR})
		e.refusedUnwritten(t, before, resp, err, codes.AlreadyExists, apierr.KeyInUse)
	})
	// Once n1 renews onto a new key, its old one is bound to nobody.
	if _, err := e.renew(t, a); err != nil {
		t.Fatal(err)
	}
	if _, err := e.enroll(t, a.key, "SN3", mac(0x803)); err != nil {
		t.Errorf("a key no node holds any more: %v", err)
	}
}

// Two journals offered the same token at once: the FSM consumes it in the
// activation's entry, so exactly one enrollment wins.
func TestClusterJoinTokenSingleUse(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	admin := c.Nodes[leader].AdminClient(t)
	if _, err := admin.RegisterNode(context.Background(), &pactv1.RegisterNodeRequest{
		NodeId: "n1", Hardware: hw("SN1", mac1), Credentials: &pactv1.CredentialPolicy{RequireJoinToken: true},
	}); err != nil {
		t.Fatal(err)
	}
	created, err := admin.CreateJoinToken(context.Background(), &pactv1.CreateJoinTokenRequest{NodeId: "n1", TtlSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	const tries = 3
	errs := make([]error, tries)
	var wg sync.WaitGroup
	for i := range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = pactv1.NewEnrollmentServiceClient(c.Nodes[i].Dial(t, nil)).Enroll(context.Background(), &pactv1.EnrollRequest{
				Hardware: hw("SN1", mac1), CsrDer: journaltest.NewKey(t).CSR, Credentials: &pactv1.EnrollCredentials{JoinToken: created.GetToken()},
			})
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch pe := apierr.FromError(err); {
		case err == nil:
			won++
		case pe.Reason != apierr.JoinTokenInvalid:
			t.Errorf("journal %d: %v, want JOIN_TOKEN_INVALID for the losers", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d enrollments accepted one token, want exactly 1: %v", won, errs)
	}
}

// A fence closes the node's streams on every journal at once: when the
// fence is applied there. The journals' clocks stand still, so no timer of
// theirs can be what closes them.
func TestClusterFenceClosesStreamsEverywhere(t *testing.T) {
	c := startCluster(t, 3, frozenClock())
	leader := c.Leader(t)
	c.Nodes[leader].Register(t, "n1", "SN1", mac1)
	key := journaltest.NewKey(t)
	resp, err := c.Nodes[leader].Enroll(t, key, "SN1", mac1)
	if err != nil {
		t.Fatal(err)
	}
	cert := key.TLSCert(resp.GetCertChainDer())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var streams []pactv1.EnrollmentService_SubscribeClient
	for _, h := range c.Nodes {
		s, err := pactv1.NewEnrollmentServiceClient(h.Dial(t, &cert)).Subscribe(ctx, &pactv1.SubscribeRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		if err != nil {
			t.Fatalf("stream on %s: %v", h.Cfg.NodeID, err)
		}
		streams = append(streams, s)
	}
	start := time.Now()
	if _, err := c.Nodes[(leader+1)%3].AdminClient(t).FenceNode(context.Background(), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		wantReason(t, recvUntilEnd(s), codes.PermissionDenied, apierr.NodeFenced)
		t.Logf("the stream on %s closed %v after the fence", c.Nodes[i].Cfg.NodeID, time.Since(start))
	}
}

// The attacker of docs/security.md: someone who knows a node's MACs and BMC
// serial. Against a node registered with --require-token, that is not
// enough before the node first boots, nor when it has been quiet past the
// takeover window (when hardware alone would take its identity over); a
// fresh token from an operator is.
func TestHardwareAloneDoesNotEnrollATokenNode(t *testing.T) {
	e := newEnv(t)
	e.registerWithToken(t, "n1", "SN1", mac1)
	before := e.registry(t)
	resp, err := e.enroll(t, journaltest.NewKey(t), "SN1", mac1)
	e.refusedUnwritten(t, before, resp, err, codes.PermissionDenied, apierr.JoinTokenRequired)

	tok, _ := e.createToken(t, "n1", time.Hour)
	if _, err := e.enrollToken(t, journaltest.NewKey(t), tok, "SN1", mac1); err != nil {
		t.Fatal(err)
	}
	e.tick(t, e.cfg.TakeoverWindow+3*e.cfg.DigestInterval) // quiet: a takeover is possible
	before = e.registry(t)
	resp, err = e.enroll(t, journaltest.NewKey(t), "SN1", mac1)
	e.refusedUnwritten(t, before, resp, err, codes.PermissionDenied, apierr.JoinTokenRequired)
	before = e.registry(t)
	resp, err = e.enrollToken(t, journaltest.NewKey(t), tok, "SN1", mac1)
	e.refusedUnwritten(t, before, resp, err, codes.PermissionDenied, apierr.JoinTokenInvalid)

	fresh, _ := e.createToken(t, "n1", time.Hour)
	if _, err := e.enrollToken(t, journaltest.NewKey(t), fresh, "SN1", mac1); err != nil {
		t.Fatalf("the rebooted node with a fresh token: %v", err)
	}
	if a := e.lastAudit(t, "n1"); a.GetAction() != "takeover" {
		t.Errorf("audit %v, want a takeover", a)
	}
}

// The same attacker against a node with hardware alone: before its first
// boot the hardware is enough (which is why sites that cannot keep MACs
// and serials secret should require a token or a TPM).
func TestHardwareAloneEnrollsAHardwareOnlyNode(t *testing.T) {
	e := newEnv(t)
	e.register(t, "n1", "SN1", mac1)
	if _, err := e.enroll(t, journaltest.NewKey(t), "SN1", mac1); err != nil {
		t.Fatalf("hardware alone: %v", err)
	}
}

// Only the leader's word is final: a journal cut off from the leader does
// not refuse a token, a fence or a key from its own copy (the token may
// have been created, the fence lifted, the key released a moment ago);
// it answers NO_LEADER, which the agent retries.
func TestClusterCredentialRefusalsNeedTheLeader(t *testing.T) {
	c := startCluster(t, 3)
	leader := c.Leader(t)
	lone := (leader + 1) % 3
	admin := c.Nodes[leader].AdminClient(t)
	ctx := context.Background()
	for _, r := range []*pactv1.RegisterNodeRequest{
		{NodeId: "tok", Hardware: hw("SN1", mac1), Credentials: &pactv1.CredentialPolicy{RequireJoinToken: true}},
		{NodeId: "fenced", Hardware: hw("SN2", mac2)},
		{NodeId: "holder", Hardware: hw("SN3", mac(0x903))},
		{NodeId: "fresh", Hardware: hw("SN4", mac(0x904))},
	} {
		if _, err := admin.RegisterNode(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.FenceNode(ctx, &pactv1.FenceNodeRequest{NodeId: "fenced", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	holderKey := journaltest.NewKey(t)
	if _, err := c.Nodes[leader].Enroll(t, holderKey, "SN3", mac(0x903)); err != nil {
		t.Fatal(err)
	}
	// The lone journal has applied all of that before the others stop.
	want := c.Nodes[leader].J.CommitIndex()
	eventually(t, "the follower to catch up", func() bool { return inspectOn(t, c.Nodes[lone], "holder").GetState() == stActive })
	if got := c.Nodes[lone].J.CommitIndex(); got < want {
		t.Fatalf("follower at %d, leader at %d", got, want)
	}
	c.StopMember(t, leader)
	c.StopMember(t, (leader+2)%3)

	enroll := pactv1.NewEnrollmentServiceClient(c.Nodes[lone].Dial(t, nil))
	tests := []struct {
		name string
		req  *pactv1.EnrollRequest
	}{
		{"no token", &pactv1.EnrollRequest{Hardware: hw("SN1", mac1), CsrDer: journaltest.NewKey(t).CSR}},
		{"unknown token", &pactv1.EnrollRequest{Hardware: hw("SN1", mac1), CsrDer: journaltest.NewKey(t).CSR,
			Credentials: &pactv1.EnrollCredentials{JoinToken: "pactjt_" + strings.Repeat("B", 43)}}},
		{"fenced node", &pactv1.EnrollRequest{Hardware: hw("SN2", mac2), CsrDer: journaltest.NewKey(t).CSR}},
		{"another node's key", &pactv1.EnrollRequest{Hardware: hw("SN4", mac(0x904)), CsrDer: holderKey.CSR}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := enroll.Enroll(ctx, tt.req)
			wantReason(t, err, codes.Unavailable, apierr.NoLeader)
		})
	}
}

// fakeUpstream is a ca.RootAuthority made of any certificate and key.
type fakeUpstream struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func (f fakeUpstream) Root() *x509.Certificate { return f.cert }
func (f fakeUpstream) Signer() crypto.Signer   { return f.key }

// An operator credential must be signed by the domain root itself: one
// signed by an intermediate of the same root (what a compromised journal
// holds) is refused, so an intermediate key cannot mint operators.
func TestOperatorCertificateFromAnIntermediateIsRefused(t *testing.T) {
	e := newEnv(t)
	root, err := ca.LoadKeyFileAuthority(filepath.Join(e.h.Dir, ca.RootCertFile), filepath.Join(e.h.Dir, ca.RootKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	interKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(77), Subject: pkix.Name{CommonName: "rogue intermediate"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		URIs:     root.Root().URIs, // the domain, as IssueAdmin wants of its signer
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.Root(), interKey.Public(), root.Signer())
	if err != nil {
		t.Fatal(err)
	}
	inter, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueAdmin(fakeUpstream{inter, interKey}, "mallory", "platform-admin", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	before := e.registry(t)
	_, err = pactv1.NewAdminServiceClient(e.h.Dial(t, &pair)).FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "r"})
	e.refusedUnwritten(t, before, nil, err, codes.Unauthenticated, apierr.Unauthenticated)
	// The same operator from the root works: the refusal is about the signer.
	e.register(t, "n1", "SN1", mac1)
	certPEM, keyPEM, err = ca.IssueAdmin(root, "mallory", "platform-admin", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	if _, err := pactv1.NewAdminServiceClient(e.h.Dial(t, &pair)).FenceNode(callCtx(t), &pactv1.FenceNodeRequest{NodeId: "n1", Reason: "r"}); err != nil {
		t.Errorf("a root-signed operator: %v", err)
	}
}

// A batch row carries the credential policy; re-running the same file
// answers "exists", a row that changes the policy does not.
func TestRegisterNodesCarriesThePolicy(t *testing.T) {
	e := newEnv(t)
	row := &pactv1.RegisterNodeRequest{NodeId: "n1", Hardware: hw("SN1", mac1), Credentials: &pactv1.CredentialPolicy{RequireJoinToken: true}}
	for i, want := range []pactv1.RegisterOutcome{pactv1.RegisterOutcome_REGISTER_OUTCOME_OK, pactv1.RegisterOutcome_REGISTER_OUTCOME_EXISTS} {
		resp, err := e.admin.RegisterNodes(callCtx(t), &pactv1.RegisterNodesRequest{Nodes: []*pactv1.RegisterNodeRequest{row}})
		if err != nil || resp.GetResults()[0].GetOutcome() != want {
			t.Fatalf("run %d: %v %v, want %v", i, resp, err, want)
		}
	}
	if !e.node(t, "n1").GetCredentials().GetRequireJoinToken() {
		t.Fatal("the batch row's policy was not stored")
	}
	changed := &pactv1.RegisterNodeRequest{NodeId: "n1", Hardware: hw("SN1", mac1)}
	resp, err := e.admin.RegisterNodes(callCtx(t), &pactv1.RegisterNodesRequest{Nodes: []*pactv1.RegisterNodeRequest{changed}})
	if err != nil || resp.GetResults()[0].GetReason() != string(apierr.NodeAlreadyEnrolled) {
		t.Errorf("a row dropping the token requirement: %v %v, want NODE_ALREADY_ENROLLED", resp, err)
	}
}
