package v1rpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// CorrelationHeader carries a request's correlation id: a caller may send
// one; the journal returns the one it used in the response header, writes it
// to its logs and into every audit entry the request causes.
const CorrelationHeader = "x-correlation-id"

var correlationRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

type correlationKey struct{}

// WithCorrelation takes the caller's id when it is well formed, else makes
// one, and sends it back in the response header.
func WithCorrelation(ctx context.Context) context.Context {
	id := ""
	// The one header read, not a copy of the whole metadata
	// (FromIncomingContext's), on every call.
	if v := metadata.ValueFromIncomingContext(ctx, CorrelationHeader); len(v) == 1 && correlationRE.MatchString(v[0]) {
		id = v[0]
	}
	if id == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(CorrelationHeader, id))
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationFrom is the correlation id of the call of ctx ("" outside
// one).
func CorrelationFrom(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}
