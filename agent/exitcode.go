package agent

import (
	"errors"

	"github.com/pact-hpc/pact/internal/apierr"
)

// Exit codes of pact-agent.
const (
	ExitOK            = 0
	ExitError         = 1
	ExitUsage         = 2
	ExitNotEnrolled   = 3
	ExitConflict      = 4
	ExitRevoked       = 5
	ExitAlreadyActive = 6
	// ExitNotReady: pact-agent status found the agent not ready (no
	// unexpired identity with an open stream).
	ExitNotReady = 9
)

// ExitCode is pact-agent's exit code for what Run returned
// (docs/exit-codes.md): a refusal an operator must fix has its own code.
func ExitCode(err error) int {
	if !errors.Is(err, ErrRefused) {
		return ExitError
	}
	switch apierr.FromError(err).Reason {
	case apierr.NodeNotEnrolled:
		return ExitNotEnrolled
	case apierr.HardwareIdentityConflict, apierr.KeyInUse:
		return ExitConflict
	case apierr.AlreadyActive:
		return ExitAlreadyActive
	}
	return ExitRevoked
}
