// Package tlsalert finds the TLS alert a peer sent as a typed value.
//
// crypto/tls reports an alert it received as a *net.OpError whose Op is
// "remote error" around a value of its own (unexported) alert type; gRPC
// passes it on to the caller as text only. A Conn records the alert where
// the connection reads it (in TLS 1.3 a server refuses the client's
// certificate after the client's side of the handshake is done, so the
// alert comes on the first read), and Received finds it in an error
// chain: no caller reads an alert back from an error's text.
package tlsalert

import (
	"crypto/tls"
	"net"
	"reflect"
	"sync"
)

// BadCertificate is the alert by which a server refuses the client's
// certificate (RFC 8446 bad_certificate): pact's journals send it for a
// certificate that chains to no authority they trust for the caller.
const BadCertificate = tls.AlertError(42)

// Received returns the alert the peer sent, if err or an error it wraps
// is crypto/tls's report of one. An alert this side sent (a
// tls.AlertError wrapped in a handshake error) is not one the peer sent.
func Received(err error) (tls.AlertError, bool) {
	if err == nil {
		return 0, false
	}
	if op, ok := err.(*net.OpError); ok && op.Op == "remote error" {
		// crypto/tls's alert type: a uint8 of package crypto/tls.
		if v := reflect.ValueOf(op.Err); v.IsValid() && v.Kind() == reflect.Uint8 && v.Type().PkgPath() == "crypto/tls" {
			return tls.AlertError(v.Uint()), true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return Received(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if a, ok := Received(e); ok {
				return a, true
			}
		}
	}
	return 0, false
}

// Record holds the first alert a connection read, if any.
type Record struct {
	mu  sync.Mutex
	err error
}

// Err is the error that carried the peer's alert (Received finds it),
// nil if none was read.
func (r *Record) Err() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Watch returns conn, recording in rec the first alert a read on it
// returns. conn is the TLS connection (or a wrapper of it) after its
// handshake.
func Watch(conn net.Conn, rec *Record) net.Conn { return &watched{Conn: conn, rec: rec} }

type watched struct {
	net.Conn
	rec *Record
}

func (w *watched) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if err != nil {
		if _, ok := Received(err); ok {
			w.rec.mu.Lock()
			if w.rec.err == nil {
				w.rec.err = err
			}
			w.rec.mu.Unlock()
		}
	}
	return n, err
}
