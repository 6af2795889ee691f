package v1rpc

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/pact-hpc/pact/internal/apierr"
)

// gRPC answers a request that does not decode with INTERNAL (and writes
// that status itself, before the handler can say otherwise), which tells
// the caller the journal is broken. It is the caller's message that is.
// So the journal's server codec never fails a decode: it empties the
// message, notes why in undecodable, and the service wrappers below turn
// the note into INVALID_ARGUMENT before any handler sees the message.
// Every unary method is wrapped (RegisterService) and every stream reads
// through the stream interceptor's RecvMsg, so no note is left unread.

// undecodable maps a message that failed to decode to the decode error.
var undecodable sync.Map

// decodeCodec is the protobuf codec with the behaviour above.
type decodeCodec struct{ encoding.CodecV2 }

// NewDecodeCodec is the server codec of the journal (ForceServerCodecV2).
func NewDecodeCodec() encoding.CodecV2 { return decodeCodec{encoding.GetCodecV2("proto")} }

func (c decodeCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		if m, ok := v.(proto.Message); ok {
			proto.Reset(m)
		}
		undecodable.Store(v, err)
	}
	return nil
}

// decoded turns the result of reading a request into the caller's answer.
func decoded(err error, v any) error {
	if err != nil {
		return err
	}
	if why, ok := undecodable.LoadAndDelete(v); ok {
		return apierr.Status(apierr.InvalidArgument, 0, "the request is not a valid message of this method: "+why.(error).Error()).Err()
	}
	return nil
}

// RegisterService registers impl under a copy of desc whose unary methods
// answer an undecodable request with INVALID_ARGUMENT.
func RegisterService(s *grpc.Server, desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = slices.Clone(desc.Methods)
	for i := range d.Methods {
		h := d.Methods[i].Handler
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return decoded(dec(v), v) }, ic)
		}
	}
	s.RegisterService(&d, impl)
}
