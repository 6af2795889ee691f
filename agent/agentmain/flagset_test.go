package agentmain

import (
	"github.com/spf13/pflag"

	"github.com/pact-hpc/pact/internal/settings"
)

// newFlagSet is pact-agent's settings as flags alone, for the tests that parse
// a command line without running the command.
func newFlagSet(s *settings.Set) *pflag.FlagSet {
	fs := pflag.NewFlagSet("pact-agent", pflag.ContinueOnError)
	s.Register(fs)
	return fs
}
