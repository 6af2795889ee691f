package journalmain

import (
	"github.com/spf13/pflag"

	"github.com/pact-hpc/pact/internal/settings"
)

// newFlagSet is pact-journal's settings as flags alone, for the tests that parse
// a command line without running the command.
func newFlagSet(s *settings.Set) *pflag.FlagSet {
	fs := pflag.NewFlagSet("pact-journal", pflag.ContinueOnError)
	s.Register(fs)
	return fs
}
