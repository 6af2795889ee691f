package identity_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
)

var t0 = time.Date(2026, 3, 17, 12, 0, 0, 0, time.UTC)

const nodeID = "spiffe://pact.local/pact-agent/n1"

// secrets lists text forms of key's private material that must never show.
func secrets(t *testing.T, key crypto.Signer) []string {
	t.Helper()
	der := identitytest.KeyPKCS8(key)
	out := []string{
		base64.StdEncoding.EncodeToString(der),
		base64.StdEncoding.EncodeToString(der)[8:48], // any long run of it
		hex.EncodeToString(der)[16:80],
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		d, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		n := new(big.Int).SetBytes(d) // the private scalar as a number
		out = append(out, n.String(), n.Text(16), hex.EncodeToString(d), base64.StdEncoding.EncodeToString(d))
	case ed25519.PrivateKey:
		seed := k.Seed()
		out = append(out, hex.EncodeToString(seed), base64.StdEncoding.EncodeToString(seed),
			strings.Trim(fmt.Sprint([]byte(seed)), "[]"), fmt.Sprintf("%x", []byte(seed)))
	}
	return out
}

func TestIdentityNeverPrintsItsKey(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]*identity.Identity{
		"ecdsa":   ca.Issue(identity.SourceSPIRE, nodeID, t0, t0.Add(time.Hour)),
		"ed25519": ca.IssueFor(identity.SourceStatic, edKey, "", t0, t0.Add(time.Hour)),
	} {
		t.Run(name, func(t *testing.T) {
			type holder struct {
				ID  *identity.Identity
				Val identity.Identity
			}
			var outputs []string
			add := func(how, s string) { outputs = append(outputs, how+": "+s) }
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v"} {
				add(verb+" ptr", fmt.Sprintf(verb, id))
				add(verb+" val", fmt.Sprintf(verb, *id))
				add(verb+" holder", fmt.Sprintf(verb, holder{id, *id}))
				add(verb+" slice", fmt.Sprintf(verb, []identity.Identity{*id}))
			}
			add("String", id.String())
			add("GoString", id.GoString())
			add("Sprint", fmt.Sprint(id, *id))
			add("Sprintln", fmt.Sprintln(id, *id))
			for _, h := range []func(*bytes.Buffer) slog.Handler{
				func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
				func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
			} {
				var b bytes.Buffer
				log := slog.New(h(&b))
				log.Info("identity", "ptr", id, "val", *id, slog.Any("any", id), "holder", holder{id, *id})
				log.With("ctx", id).Info("with", slog.Group("g", "id", id))
				add("slog", b.String())
			}
			for _, v := range []any{id, *id, holder{id, *id}, []*identity.Identity{id}} {
				j, err := json.Marshal(v)
				if err != nil {
					t.Fatalf("json.Marshal(%T): %v", v, err)
				}
				add("json", string(j))
			}

			serial := id.Serial()
			if serial == "" {
				t.Fatal("identity has no serial")
			}
			for _, out := range outputs {
				for _, s := range secrets(t, id.Key) {
					if strings.Contains(out, s) {
						t.Errorf("%s\n  contains private key material %q", out, s)
					}
				}
			}
			for _, out := range outputs {
				if strings.HasPrefix(out, "%T") || strings.HasPrefix(out, "%x") || strings.HasPrefix(out, "%X") || strings.HasPrefix(out, "%d") {
					continue
				}
				if !strings.Contains(out, serial) {
					t.Errorf("%s\n  does not show the serial %s", out, serial)
				}
			}
		})
	}
}

func TestIdentityJSONAndLogShape(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	id := ca.Issue(identity.SourceJournal, nodeID, t0, t0.Add(time.Hour))
	j, err := json.Marshal(id)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"source":"journal","spiffe_id":%q,"serial":%q,"not_after":"2026-03-17T13:00:00Z"}`, nodeID, id.Serial())
	if string(j) != want {
		t.Errorf("json = %s\nwant   %s", j, want)
	}
	var b bytes.Buffer
	slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})).Info("x", "id", id)
	wantLog := fmt.Sprintf("level=INFO msg=x id.source=journal id.spiffe_id=%s id.serial=%s id.not_after=2026-03-17T13:00:00Z\n", nodeID, id.Serial())
	if b.String() != wantLog {
		t.Errorf("log = %q\nwant  %q", b.String(), wantLog)
	}
	var nilID *identity.Identity
	if got := fmt.Sprint(nilID); got != "<nil>" {
		t.Errorf("nil identity prints %q", got)
	}
	b.Reset()
	slog.New(slog.NewTextHandler(&b, nil)).Info("x", "id", nilID)
	if !strings.Contains(b.String(), "id=<nil>") {
		t.Errorf("nil identity logs %q", b.String())
	}
}

func TestNew(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	a := ca.Issue(identity.SourceSPIRE, nodeID, t0, t0.Add(time.Hour))
	b := ca.Issue(identity.SourceSPIRE, nodeID, t0, t0.Add(time.Hour))

	id, err := identity.New(identity.SourceJournal, a.Chain, a.Key, a.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	if id.SPIFFEID != nodeID || !id.NotAfter.Equal(t0.Add(time.Hour)) || id.Source != identity.SourceJournal {
		t.Errorf("New filled %v", id)
	}
	cert := id.TLSCertificate()
	if len(cert.Certificate) != 1 || cert.Leaf != a.Chain[0] || cert.PrivateKey != a.Key {
		t.Errorf("TLSCertificate = %+v", cert)
	}
	if _, err := id.Chain[0].Verify(x509.VerifyOptions{Roots: id.BundlePool(), CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("chain does not verify against BundlePool: %v", err)
	}
	if !id.Expired(t0.Add(time.Hour+time.Nanosecond)) || id.Expired(t0.Add(time.Hour)) {
		t.Error("Expired is wrong at the not_after boundary")
	}

	// NotAfter is the earliest in the chain.
	short := ca.Issue(identity.SourceStatic, "", t0, t0.Add(time.Minute)).Chain[0]
	if id, err := identity.New(identity.SourceJournal, []*x509.Certificate{a.Chain[0], short}, a.Key, nil); err != nil || !id.NotAfter.Equal(short.NotAfter) {
		t.Errorf("NotAfter = %v, %v; want the intermediate's %v", id, err, short.NotAfter)
	}

	for name, tc := range map[string]struct {
		src   identity.Source
		chain []*x509.Certificate
		key   crypto.Signer
		want  string
	}{
		"other key":      {identity.SourceJournal, a.Chain, b.Key, "does not belong"},
		"no chain":       {identity.SourceJournal, nil, a.Key, "no certificate"},
		"no key":         {identity.SourceJournal, a.Chain, nil, "no private key"},
		"unknown source": {"vault", a.Chain, a.Key, "unknown source"},
	} {
		if _, err := identity.New(tc.src, tc.chain, tc.key, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func TestSourceRank(t *testing.T) {
	if !(identity.SourceSPIRE.Rank() > identity.SourceJournal.Rank() &&
		identity.SourceJournal.Rank() > identity.SourceStatic.Rank() &&
		identity.SourceStatic.Rank() > identity.Source("other").Rank()) {
		t.Error("ranks out of order")
	}
}
