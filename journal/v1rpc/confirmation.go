package v1rpc

import (
	"context"
	"sync/atomic"
)

// A unary call confirms this journal's copy of the registry with the leader
// at most once. After one read barrier the copy holds every entry committed
// before the barrier, and it only grows: every later decision of the same
// call reads a state that includes every write completed before the call
// began, which is all a linearizable answer needs. So the checks one
// Enroll makes (the caller's credentials, the hardware, the takeover, the
// boot policy) share one round trip to the leader instead of one each.
//
// Only unary calls carry it (Interceptors.Unary): a stream lives for hours,
// and a confirmation from its start says nothing about its tenth minute.
type callConfirmation struct{ done atomic.Bool }

type callConfirmationKey struct{}

// withCallConfirmation gives ctx, a unary call's context, its one
// confirmation.
func withCallConfirmation(ctx context.Context) context.Context {
	return context.WithValue(ctx, callConfirmationKey{}, &callConfirmation{})
}

// BarrierOnce runs barrier unless the call of ctx has already passed one;
// a failed barrier confirms nothing, so the next check tries again.
func BarrierOnce(ctx context.Context, barrier func(context.Context) error) error {
	c, _ := ctx.Value(callConfirmationKey{}).(*callConfirmation)
	if c != nil && c.done.Load() {
		return nil
	}
	if err := barrier(ctx); err != nil {
		return err
	}
	if c != nil {
		c.done.Store(true)
	}
	return nil
}
