package journal

import (
	"github.com/pact-hpc/pact/journal/v1rpc"
)

// adminServer is the AdminService: the node registry's calls are
// v1rpc.NodeAdmin's; the quorum's (membership, operators, intermediates,
// journal CAs, federation, snapshots, status) are still the journal's
// methods below and in the files they name.
type adminServer struct {
	*v1rpc.NodeAdmin
	j *Journal
}
