// Package jointoken is the form of a pact join token (pact node token
// create, pact-agent --join-token-file): made where an operator asks for
// one, parsed where an agent presents one. Only its SHA-256 reaches Raft.
package jointoken

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/pact-hpc/pact/raftfsm"
)

// Prefix starts every join token; 32 random bytes in unpadded base64url
// follow it.
const Prefix = "pactjt_"

const (
	randomBytes = 32
	tokenLen    = len(Prefix) + 43
)

// Token is a join token held in memory between its creation and the
// answer to the operator. It prints and logs as its id only.
type Token string

func (t Token) String() string { return Prefix + "[redacted " + raftfsm.JoinTokenID(t.Sum()) + "]" }

// LogValue keeps the token out of slog output whatever the call site does.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// Sum is the token's hex SHA-256: what Raft records and checks.
func (t Token) Sum() string {
	s := sha256.Sum256([]byte(t))
	return hex.EncodeToString(s[:])
}

// New makes a fresh token.
func New() (Token, error) {
	b := make([]byte, randomBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("journal: join token: %w", err)
	}
	return Token(Prefix + base64.RawURLEncoding.EncodeToString(b)), nil
}

// Parse checks a presented token's form and returns its hex SHA-256. The
// error (raftfsm.ErrJoinTokenInvalid) never echoes the input.
func Parse(s string) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) != tokenLen || !strings.HasPrefix(s, Prefix) {
		return "", invalid()
	}
	if b, err := base64.RawURLEncoding.DecodeString(s[len(Prefix):]); err != nil || len(b) != randomBytes {
		return "", invalid()
	}
	return Token(s).Sum(), nil
}

func invalid() error {
	return fmt.Errorf("%w: not a pact join token (want %s and 43 base64url characters, as pact node token create prints)", raftfsm.ErrJoinTokenInvalid, Prefix)
}
