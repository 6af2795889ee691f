package journalmain

import (
	"log/slog"

	"github.com/pact-hpc/pact/internal/clock"
)

// chaosClock, nil in every normal build, is set only in a pact-journal
// built with -tags chaosclock (chaosclock_on.go): the chaos campaign's
// clock-step scenario uses it to step one journal's wall clock.
var chaosClock func(base clock.Clock, nodeID string, log *slog.Logger) clock.Clock
