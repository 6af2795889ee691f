package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is the pact release, set at link time:
//
//	go build -ldflags "-X github.com/pact-hpc/pact/cli.Version=v0.1.0" ./cmd/pact
//
// When unset, the module version from the build info is used.
var Version = ""

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// versionView is "pact version -o json".
type versionView struct {
	Version  string `json:"version"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the pact CLI's version",
		Long: `Print the version of this pact binary, the Go release it was built with and
its platform. It does not contact the journal.`,
		Example: `  pact version
  pact version -o json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string) error {
			out, err := a.flags.resolveOutput()
			if err != nil {
				return newUsage(cmd.CommandPath(), err)
			}
			v := versionView{Version: version(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if out == outputJSON {
				return writeJSON(a.env.Stdout, v)
			}
			_, err = fmt.Fprintf(a.env.Stdout, "pact %s (%s, %s)\n", v.Version, v.Go, v.Platform)
			return err
		}),
	}
}
