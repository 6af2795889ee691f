//go:build testhooks

package raftnode

import "time"

// HooksBuilt reports whether this build runs the Hooks: true with -tags
// testhooks (make test, make test-bootstrap), false in every binary
// make build ships (hooks_off.go).
const HooksBuilt = true

func (h *Hooks) beforeApply() {
	if f := h.BeforeApply.Load(); f != nil {
		(*f)()
	}
}

func (h *Hooks) holdWrite() {
	if f := h.HoldWrites.Load(); f != nil {
		(*f)()
	}
}

func (h *Hooks) holdProbe() {
	if f := h.HoldProbes.Load(); f != nil {
		(*f)()
		return
	}
	h.holdWrite()
}

// schedWait is SchedWait's answer if a test set one, else measured.
func (h *Hooks) schedWait(measured func() time.Duration) time.Duration {
	if f := h.SchedWait.Load(); f != nil {
		return (*f)()
	}
	return measured()
}

func (h *Hooks) severed() bool { return h.Severed.Load() }

func (h *Hooks) applyWait() time.Duration { return time.Duration(h.ApplyWait.Load()) }

func (h *Hooks) batchQueued(n int) {
	if f := h.BatchQueued.Load(); f != nil {
		(*f)(n)
	}
}

// batchBeforeSend returns the hook to run before a batch is proposed, read
// when the batch is flushed, or nil.
func (h *Hooks) batchBeforeSend() func(n int) {
	if f := h.BatchBeforeSend.Load(); f != nil {
		return *f
	}
	return nil
}

func (h *Hooks) waitingApplied() {
	if f := h.WaitingApplied.Load(); f != nil {
		(*f)()
	}
}

func (h *Hooks) raftListening() {
	if f := h.RaftListening.Load(); f != nil {
		(*f)()
	}
}
