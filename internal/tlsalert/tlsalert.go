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
	"context"
	"crypto/tls"
	"net"
	"reflect"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
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

// alertReadWait bounds the read Write makes for an alert after a failed
// write.
const alertReadWait = 250 * time.Millisecond

// Write, when it fails, reads the alert the server may have sent before
// it closed: a TLS 1.3 server refuses the client's certificate after the
// client's side of the handshake, and the client's first write (gRPC's
// preface) can then fail (broken pipe, reset) before anything reads the
// alert waiting in the socket. Without this read the refusal's reason
// would be lost to a race.
func (w *watched) Write(p []byte) (int, error) {
	n, err := w.Conn.Write(p)
	if err != nil && w.rec.Err() == nil {
		if derr := w.Conn.SetReadDeadline(time.Now().Add(alertReadWait)); derr == nil {
			var b [1]byte
			_, _ = w.Read(b[:])
		}
	}
	return n, err
}

// Credentials are gRPC client transport credentials that record the alert
// the server sent on the latest connection: in its handshake, or on a
// read after it (TLS 1.3). gRPC reports either as UNAVAILABLE with the
// alert in text only; Explain puts it back into a call's error.
type Credentials struct {
	credentials.TransportCredentials
	latest *latest
}

type latest struct {
	mu  sync.Mutex
	rec *Record // nil until a handshake has ended
	err error   // that handshake's error
}

// NewCredentials wraps creds.
func NewCredentials(creds credentials.TransportCredentials) *Credentials {
	return &Credentials{TransportCredentials: creds, latest: &latest{}}
}

// ClientHandshake performs the handshake and watches the connection. The
// connection is the latest once its handshake is over: one still in its
// handshake does not hide the alert that ended the one before.
func (c *Credentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	rec := &Record{}
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		if _, ok := Received(err); ok {
			rec.err = err
		}
	} else {
		conn = Watch(conn, rec)
	}
	c.latest.mu.Lock()
	c.latest.rec, c.latest.err = rec, err
	c.latest.mu.Unlock()
	return conn, info, err
}

// Latest reports the latest connection, as one snapshot: whether any
// handshake has ended on these credentials or a clone of them (ended),
// that handshake's error (nil if it succeeded), and the error that
// carried the server's alert, if one came (in the handshake, when it is
// the handshake's error, or on a read after it; Received finds the alert
// in it), nil if none did.
func (c *Credentials) Latest() (ended bool, handshake, alert error) {
	c.latest.mu.Lock()
	rec, err := c.latest.rec, c.latest.err
	c.latest.mu.Unlock()
	return rec != nil, err, rec.Err()
}

// Clone keeps the record shared.
func (c *Credentials) Clone() credentials.TransportCredentials {
	return &Credentials{TransportCredentials: c.TransportCredentials.Clone(), latest: c.latest}
}

// Explain returns a call's UNAVAILABLE error with the alert of the latest
// connection, if the server sent one, wrapped in it for Received to find
// (the text is err's: gRPC's message names the alert already); other
// errors, and any error when no alert came, as they are.
func (c *Credentials) Explain(err error) error {
	if status.Code(err) != codes.Unavailable {
		return err
	}
	_, _, alert := c.Latest()
	return Attach(err, alert)
}

// Attach returns a call's error with alert (an error Received finds an
// alert in) wrapped in it as well, for Received to find: its text and its
// gRPC status (code, message, details) are err's. It returns err if alert
// is nil.
func Attach(err, alert error) error {
	if err == nil || alert == nil {
		return err
	}
	return &attached{err: err, alert: alert}
}

type attached struct{ err, alert error }

func (e *attached) Error() string   { return e.err.Error() }
func (e *attached) Unwrap() []error { return []error{e.err, e.alert} }

// GRPCStatus is err's, as status.FromError reads it from err itself (a
// wrapper's status would carry the wrapper's whole text as its message).
func (e *attached) GRPCStatus() *status.Status { return status.Convert(e.err) }
