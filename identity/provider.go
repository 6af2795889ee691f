package identity

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrUnavailable: a provider (or the whole cascade) has no identity now.
	// Every error from Provider.Current wraps it.
	ErrUnavailable = errors.New("identity: no identity available")
	// ErrExpired: the provider's certificate is past its not_after. Errors
	// wrapping it wrap ErrUnavailable too.
	ErrExpired = errors.New("identity: certificate expired")
	// ErrBadFiles: the bootstrap certificate, key or bundle files cannot be
	// read or do not belong together.
	ErrBadFiles = errors.New("identity: bad bootstrap files")
)

// Provider is one source of identity.
type Provider interface {
	// Source names the provider's source; it never changes.
	Source() Source
	// Current returns the provider's identity now, or an error wrapping
	// ErrUnavailable, with the reason, when it has none. It does not block
	// on the network and is safe to call from any goroutine. The returned
	// Identity is shared: do not modify it.
	Current(ctx context.Context) (*Identity, error)
}

// Watcher is implemented by providers whose identity changes on its own
// (SPIRE rotates SVIDs, appears and vanishes; the agent sets the journal
// certificate). Changes returns a channel that receives a value whenever
// Current may have changed. Signals coalesce: the channel holds at most one,
// so a slow reader sees one signal for several changes, and it is meant for
// one reader (a Cascade, or the agent). It is never closed.
type Watcher interface {
	Changes() <-chan struct{}
}

// ProviderError is why a provider has no identity. It matches ErrUnavailable
// with errors.Is, and whatever Err wraps (ErrExpired, a gRPC status...).
type ProviderError struct {
	Source Source
	// Reason says what is missing and what to do about it, in one line.
	Reason string
	// Err is the underlying cause, if any; Error does not repeat it, so
	// Reason should carry whatever of it a reader needs.
	Err error
}

func (e *ProviderError) Error() string { return "identity: " + string(e.Source) + ": " + e.Reason }

// Is makes every ProviderError match ErrUnavailable.
func (e *ProviderError) Is(target error) bool { return target == ErrUnavailable }

func (e *ProviderError) Unwrap() error { return e.Err }

// Unavailable returns a *ProviderError for src with the formatted reason and
// cause (which may be nil).
func Unavailable(src Source, cause error, format string, args ...any) error {
	return &ProviderError{Source: src, Reason: fmt.Sprintf(format, args...), Err: cause}
}

// noIdentityError is the cascade's answer when no provider has an identity:
// every provider's reason, best source first.
type noIdentityError []error

func (e noIdentityError) Error() string {
	reasons := make([]string, len(e))
	for i, err := range e {
		var pe *ProviderError
		if errors.As(err, &pe) {
			reasons[i] = string(pe.Source) + ": " + pe.Reason
		} else {
			reasons[i] = err.Error()
		}
	}
	return "identity: no provider has an identity (" + strings.Join(reasons, "; ") + ")"
}

func (e noIdentityError) Is(target error) bool { return target == ErrUnavailable }

func (e noIdentityError) Unwrap() []error { return e }
