package main

// stepca.go runs step-ca for peer (peer.go) as `step ca init` would leave
// it, without the step CLI: a P-256 root and intermediate made here, a
// ca.json written here with one JWK provisioner whose private key never
// leaves this process (it signs each one-time token), and the database
// step ca init configures (badgerv2).

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// stepCAProvisioner is the JWK provisioner's name, the tokens' issuer.
const stepCAProvisioner = "pact-bench"

// stepCA is a running step-ca process.
type stepCA struct {
	cmd      *exec.Cmd
	exited   chan struct{}
	addr     string // 127.0.0.1:port
	roots    *x509.CertPool
	signer   jose.Signer // the provisioner's key: signs one-time tokens
	audience string      // the sign endpoint, as the tokens name it
	logPath  string
	version  string
}

// startStepCA writes step-ca's configuration under dir and starts bin on
// it, waiting until it answers /health. db is the database type (badgerv2,
// bbolt) or "none" for step-ca's in-memory one.
func startStepCA(bin, dir, db string) (*stepCA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// go install stamps no version into step-ca's own "step-ca version";
	// the module version in its build information is the pinned one.
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("step-ca: %w", err)
	}
	s := &stepCA{version: info.Main.Path + " " + info.Main.Version, logPath: filepath.Join(dir, "step-ca.log"), exited: make(chan struct{})}
	rootPath, crtPath, keyPath, err := writeStepCAPKI(dir)
	if err != nil {
		return nil, err
	}
	if s.roots, err = loadPool(rootPath); err != nil {
		return nil, err
	}
	provKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pub := jose.JSONWebKey{Key: &provKey.PublicKey, Algorithm: string(jose.ES256), Use: "sig"}
	thumb, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, err
	}
	pub.KeyID = base64.RawURLEncoding.EncodeToString(thumb)
	s.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: provKey, KeyID: pub.KeyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, err
	}
	if s.addr, err = freeLoopbackAddr(); err != nil {
		return nil, err
	}
	s.audience = "https://" + s.addr + "/1.0/sign"
	cfg := map[string]any{
		"root": rootPath, "crt": crtPath, "key": keyPath,
		"address":  s.addr,
		"dnsNames": []string{"127.0.0.1"},
		"logger":   map[string]any{"format": "text"},
		"authority": map[string]any{
			"provisioners": []any{map[string]any{"type": "JWK", "name": stepCAProvisioner, "key": pub}},
		},
	}
	if db != "none" {
		cfg["db"] = map[string]any{"type": db, "dataSource": filepath.Join(dir, "db")}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "ca.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, cfgPath)
	// STEPPATH keeps step-ca from looking in (or making) $HOME/.step.
	s.cmd.Env = append(os.Environ(), "STEPPATH="+dir)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() {
		_ = s.cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	if err := s.waitHealthy(60 * time.Second); err != nil {
		s.stop()
		return nil, fmt.Errorf("step-ca: %w; see %s", err, s.logPath)
	}
	// step-ca refuses a token issued (iat, whole seconds) before it
	// started: let the first token's second be after its start.
	time.Sleep(time.Second)
	return s, nil
}

func (s *stepCA) pid() int { return s.cmd.Process.Pid }

func (s *stepCA) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *stepCA) waitHealthy(timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	end := time.Now().Add(timeout)
	var last error
	for time.Now().Before(end) {
		select {
		case <-s.exited:
			return errors.New("exited before it served")
		default:
		}
		resp, err := client.Get("https://" + s.addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/health: %s", resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not healthy after %v: %v", timeout, last)
}

// token is a one-time token for a certificate named subject, as `step ca
// token` makes it: the provisioner's JWT for the sign endpoint with a
// unique jti, valid five minutes.
func (s *stepCA) token(subject string) (string, error) {
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", err
	}
	now := time.Now()
	claims := jwt.Claims{
		Issuer: stepCAProvisioner, Subject: subject, Audience: jwt.Audience{s.audience},
		NotBefore: jwt.NewNumericDate(now), IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)),
		ID: hex.EncodeToString(jti[:]),
	}
	return jwt.Signed(s.signer).Claims(claims).Claims(map[string]any{"sans": []string{subject}}).Serialize()
}

// sign asks for a certificate for csr (its subject and only SAN are
// subject) over client, a new TLS connection per request, and returns it.
func (s *stepCA) sign(ctx context.Context, client *http.Client, subject string, csrDER []byte) (*x509.Certificate, error) {
	ott, err := s.token(subject)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(map[string]string{
		"csr": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER})),
		"ott": ott,
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+s.addr+"/1.0/sign", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var answer struct {
		Crt     string `json:"crt"`
		Message string `json:"message"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return nil, fmt.Errorf("/1.0/sign: %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/1.0/sign: %s: %s", resp.Status, answer.Message)
	}
	block, _ := pem.Decode([]byte(answer.Crt))
	if block == nil {
		return nil, fmt.Errorf("/1.0/sign: %s: no certificate in the answer", resp.Status)
	}
	return x509.ParseCertificate(block.Bytes)
}

// writeStepCAPKI makes a P-256 root and an intermediate under it, as step
// ca init does, and writes them (the intermediate's key unencrypted, mode
// 0600, in the benchmark's own working directory: step-ca reads its
// signing key from a file). The root's key is never written.
func writeStepCAPKI(dir string) (rootPath, crtPath, keyPath string, err error) {
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	rootTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pact-bench step-ca Root CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLen: 1,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		return "", "", "", err
	}
	root, err := x509.ParseCertificate(rootDER)
	if err != nil {
		return "", "", "", err
	}
	intKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	intTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "pact-bench step-ca Intermediate CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	intDER, err := x509.CreateCertificate(rand.Reader, intTmpl, root, &intKey.PublicKey, rootKey)
	if err != nil {
		return "", "", "", err
	}
	intKeyDER, err := x509.MarshalECPrivateKey(intKey)
	if err != nil {
		return "", "", "", err
	}
	rootPath, crtPath, keyPath = filepath.Join(dir, "root_ca.crt"), filepath.Join(dir, "intermediate_ca.crt"), filepath.Join(dir, "intermediate_ca_key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{rootPath, "CERTIFICATE", rootDER}, {crtPath, "CERTIFICATE", intDER}, {keyPath, "EC PRIVATE KEY", intKeyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return rootPath, crtPath, keyPath, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no certificate", path)
	}
	return pool, nil
}

// freeLoopbackAddr is a TCP port on 127.0.0.1 free a moment ago.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
