//go:build !linux

package agent

import "fmt"

// checkKeyOut refuses --key-out where the agent cannot prove the path is
// on a tmpfs.
func checkKeyOut(path string) error {
	return fmt.Errorf("agent: --key-out %s: writing the private key is supported on Linux only, where the agent can check that the path is on a tmpfs", path)
}
