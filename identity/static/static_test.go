package static_test

import (
	"context"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pact-hpc/pact/identity"
	"github.com/pact-hpc/pact/identity/identitytest"
	"github.com/pact-hpc/pact/identity/static"
	"github.com/pact-hpc/pact/internal/clock/fakeclock"
)

var t0 = time.Date(2026, 3, 17, 12, 0, 0, 0, time.UTC)

const bootID = "spiffe://pact.local/pact-bootstrap/image"

func config(f identitytest.Files, clk *fakeclock.Clock) static.Config {
	cfg := static.DefaultConfig()
	cfg.CertFile, cfg.KeyFile, cfg.BundleFile, cfg.Clock = f.Cert, f.Key, f.Bundle, clk
	return cfg
}

// listing is everything about a directory that a write would change.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v %d %v", path, info.Mode(), info.Size(), info.ModTime().UnixNano())
		if !d.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", sha256.Sum256(data))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadGoodFiles(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	boot := ca.Issue(identity.SourceStatic, bootID, t0, t0.Add(24*time.Hour))
	dir := t.TempDir()
	files := identitytest.WriteFiles(t, dir, boot)
	before := listing(t, dir)

	clk := fakeclock.New(t0)
	p, err := static.New(config(files, clk))
	if err != nil {
		t.Fatal(err)
	}
	if p.Source() != identity.SourceStatic {
		t.Errorf("Source = %q", p.Source())
	}
	id, err := p.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if id.Source != identity.SourceStatic || id.Serial() != boot.Serial() || id.SPIFFEID != bootID ||
		len(id.Bundle) != 1 || !id.Bundle[0].Equal(ca.Cert) || !id.NotAfter.Equal(boot.NotAfter) {
		t.Errorf("Current = %v (bundle %d)", id, len(id.Bundle))
	}
	// The key survived New clearing the buffers it was parsed from.
	digest := sha256.Sum256([]byte("challenge"))
	sig, err := id.Key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if !ecdsa.VerifyASN1(id.Chain[0].PublicKey.(*ecdsa.PublicKey), digest[:], sig) {
		t.Error("the loaded key's signature does not verify with the certificate")
	}

	p.Discard()
	if _, err := p.Current(context.Background()); !errors.Is(err, identity.ErrUnavailable) || !strings.Contains(err.Error(), "discarded") {
		t.Errorf("Current after Discard = %v", err)
	}
	if after := listing(t, dir); !slices.Equal(before, after) {
		t.Errorf("the directory changed:\nbefore %q\nafter  %q", before, after)
	}
}

func TestKeyFormats(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	ec := ca.IssueFor(identity.SourceStatic, ecKey, "", t0, t0.Add(time.Hour))
	rs := ca.IssueFor(identity.SourceStatic, rsaKey, "", t0, t0.Add(time.Hour))
	for name, tc := range map[string]struct {
		cert, key []byte
	}{
		"SEC 1 EC":          {identitytest.CertsPEM(ec.Chain...), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})},
		"PKCS#1 RSA":        {identitytest.CertsPEM(rs.Chain...), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})},
		"one combined file": {append(identitytest.CertsPEM(ec.Chain...), identitytest.KeyPEM(ecKey)...), append(identitytest.KeyPEM(ecKey), identitytest.CertsPEM(ec.Chain...)...)},
	} {
		id, err := static.Parse(tc.cert, tc.key, nil)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(id.Bundle) != 0 || len(id.Chain) != 1 {
			t.Errorf("%s: %v", name, id)
		}
	}
}

func TestBadFiles(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	boot := ca.Issue(identity.SourceStatic, bootID, t0, t0.Add(time.Hour))
	other := ca.Issue(identity.SourceStatic, bootID, t0, t0.Add(time.Hour))
	good := identitytest.WriteFiles(t, t.TempDir(), boot)
	keyPEM := identitytest.KeyPEM(boot.Key)
	keyBody := base64.StdEncoding.EncodeToString(identitytest.KeyPKCS8(other.Key))

	block := func(typ string, body []byte, headers map[string]string) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: body, Headers: headers})
	}
	for name, tc := range map[string]struct {
		cert, key, bundle []byte // nil: the good file; "-": missing
		want              []string
		is                error
	}{
		"missing cert": {cert: []byte("-"), want: []string{"--bootstrap-cert", "cert.pem: cannot read it", "no such file"}, is: fs.ErrNotExist},
		"missing key and bundle": {key: []byte("-"), bundle: []byte("-"),
			want: []string{"--bootstrap-key", "key.pem: cannot read it", "--bootstrap-bundle", "bundle.pem: cannot read it"}},
		"garbage cert":       {cert: []byte("hello\x00\xff"), want: []string{`cert.pem: no PEM "CERTIFICATE" block`}},
		"garbage key":        {key: []byte("not a key at all"), want: []string{"key.pem: no private key (want a PEM"}},
		"corrupt cert":       {cert: block("CERTIFICATE", []byte{0x30, 0x03, 1, 2, 3}, nil), want: []string{"cert.pem: pki: parse certificate: x509: malformed"}},
		"corrupt key":        {key: block("PRIVATE KEY", []byte{0x30, 0x03, 1, 2, 3}, nil), want: []string{`key.pem: "PRIVATE KEY" block:`}},
		"mismatched key":     {key: identitytest.KeyPEM(other.Key), want: []string{"key.pem: the key does not belong to the certificate in --bootstrap-cert", "same issuance"}},
		"encrypted PKCS#8":   {key: block("ENCRYPTED PRIVATE KEY", []byte{0x30, 0}, nil), want: []string{"encrypted"}},
		"encrypted PEM":      {key: block("EC PRIVATE KEY", []byte{0x30, 0}, map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,000102030405060708090A0B0C0D0E0F"}), want: []string{"encrypted"}},
		"two keys":           {key: append(slices.Clone(keyPEM), keyPEM...), want: []string{"2 private keys; want exactly one"}},
		"x25519 key":         {key: x25519KeyPEM(t), want: []string{"unsupported key type"}},
		"empty bundle":       {bundle: []byte{}, want: []string{`bundle.pem: no PEM "CERTIFICATE" block`}},
		"huge cert":          {cert: make([]byte, static.MaxFileSize+1), want: []string{"larger than"}},
		"everything missing": {cert: []byte("-"), key: []byte("-"), bundle: []byte("-"), want: []string{"cert.pem", "key.pem", "bundle.pem"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			files := identitytest.Files{Dir: dir, Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem"), Bundle: filepath.Join(dir, "bundle.pem")}
			for _, f := range []struct {
				data      []byte
				good, dst string
			}{{tc.cert, good.Cert, files.Cert}, {tc.key, good.Key, files.Key}, {tc.bundle, good.Bundle, files.Bundle}} {
				data := f.data
				if string(data) == "-" {
					continue
				}
				if data == nil {
					var err error
					if data, err = os.ReadFile(f.good); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(f.dst, data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before := listing(t, dir)
			p, err := static.New(config(files, fakeclock.New(t0)))
			if p != nil || !errors.Is(err, identity.ErrBadFiles) {
				t.Fatalf("New = %v, %v; want ErrBadFiles", p, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error does not wrap %v", tc.is)
			}
			if strings.Contains(err.Error(), keyBody[10:40]) || strings.Contains(err.Error(), string(keyPEM[40:80])) {
				t.Errorf("error quotes key material: %v", err)
			}
			if after := listing(t, dir); !slices.Equal(before, after) {
				t.Errorf("the directory changed:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

func x25519KeyPEM(t *testing.T) []byte {
	t.Helper()
	// An X25519 key parses as PKCS#8 but cannot sign.
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func TestExpired(t *testing.T) {
	ca := identitytest.NewCA("pact.local", t0)
	boot := ca.Issue(identity.SourceStatic, bootID, t0.Add(-time.Hour), t0.Add(time.Hour))
	files := identitytest.WriteFiles(t, t.TempDir(), boot)
	clk := fakeclock.New(t0)
	p, err := static.New(config(files, clk))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if _, err := p.Current(context.Background()); err != nil {
		t.Fatalf("Current at not_after = %v", err)
	}
	clk.Advance(time.Second)
	_, err = p.Current(context.Background())
	if !errors.Is(err, identity.ErrUnavailable) || !errors.Is(err, identity.ErrExpired) {
		t.Fatalf("Current after not_after = %v; want ErrUnavailable and ErrExpired", err)
	}
	for _, w := range []string{files.Cert, boot.Serial(), "expired at 2026-03-17T13:00:00Z", "rebuild the node image"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}

	// Already expired when the agent starts: New loads it, Current says so.
	old := ca.Issue(identity.SourceStatic, bootID, t0.Add(-2*time.Hour), t0.Add(-time.Hour))
	p, err = static.New(config(identitytest.WriteFiles(t, t.TempDir(), old), fakeclock.New(t0)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Current(context.Background()); !errors.Is(err, identity.ErrExpired) {
		t.Errorf("Current = %v; want ErrExpired", err)
	}
}

func TestValidate(t *testing.T) {
	err := static.Config{}.Validate()
	for _, w := range []string{"--bootstrap-cert", "--bootstrap-key", "Clock is required"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate error lacks %q: %v", w, err)
		}
	}
	if _, err := static.New(static.DefaultConfig()); err == nil {
		t.Error("New accepted a config without files")
	}
}
