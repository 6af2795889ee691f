package chaos

import "github.com/pact-hpc/pact/integration/launch"

// The journal processes and their networks come from integration/launch,
// which the integration tests and the storm benchmark use too.
type (
	Network    = launch.Network
	NetNS      = launch.NetNS
	NetNSNames = launch.NetNSNames
	Loopback   = launch.Loopback
	ProcConfig = launch.ProcConfig
	ProcQuorum = launch.ProcQuorum
)

var (
	ChaosNames           = launch.ChaosNames
	NewNetNS             = launch.NewNetNS
	NewNetNSNamed        = launch.NewNetNSNamed
	NewLoopback          = launch.NewLoopback
	NewProcQuorum        = launch.NewProcQuorum
	CleanStaleNamespaces = launch.CleanStaleNamespaces
	groupOf              = launch.GroupOf
	run                  = launch.Run
	tail                 = launch.Tail
	loadCreds            = launch.LoadCreds
)
