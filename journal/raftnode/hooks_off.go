//go:build !testhooks

package raftnode

import "time"

// HooksBuilt reports whether this build runs the Hooks: false here, the
// build of every shipped binary. Each hook below is an empty function the
// compiler inlines away, so nothing a test may set is read on the apply,
// write or transport path of a production journal (as etcd's failpoints
// compile out). With -tags testhooks (make test) hooks_on.go runs them; a
// test that needs one skips without it (plain go test).
const HooksBuilt = false

func (*Hooks) beforeApply()                 {}
func (*Hooks) holdWrite()                   {}
func (*Hooks) holdProbe()                   {}
func (*Hooks) severed() bool                { return false }
func (*Hooks) applyWait() time.Duration     { return 0 }
func (*Hooks) raftListening()               {}
func (*Hooks) waitingApplied()              {}
func (*Hooks) batchQueued(int)              {}
func (*Hooks) batchBeforeSend() func(n int) { return nil }

func (*Hooks) schedWait(measured func() time.Duration) time.Duration { return measured() }
