package jointoken

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/pact-hpc/pact/raftfsm"
)

// FuzzParse: whatever an agent presents as a join token is either
// a well-formed token (which hashes to what a created token would) or a
// JOIN_TOKEN_INVALID refusal whose message does not echo the input.
func FuzzParse(f *testing.F) {
	tok, err := New()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(tok), " " + string(tok) + "\n", "", "pactjt_", string(tok)[:len(tok)-1] + "!", strings.Repeat("pactjt_", 8)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sum, err := Parse(s)
		if err != nil {
			if !errors.Is(err, raftfsm.ErrJoinTokenInvalid) {
				t.Fatalf("untyped refusal %v", err)
			}
			if trimmed := strings.TrimSpace(s); len(trimmed) >= 8 && strings.Contains(err.Error(), trimmed) {
				t.Fatalf("the refusal echoes the input: %v", err)
			}
			return
		}
		if len(sum) != 64 || sum != Token(strings.TrimSpace(s)).Sum() {
			t.Fatalf("sum %q for an accepted token", sum)
		}
	})
}

// A token prints and logs as its id only.
func TestJoinTokenRedacted(t *testing.T) {
	tok, err := New()
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(string(tok), Prefix)
	var _ slog.LogValuer = tok
	for _, s := range []string{tok.String(), tok.LogValue().String()} {
		if strings.Contains(s, body[:8]) {
			t.Errorf("%q shows the token", s)
		}
	}
}
