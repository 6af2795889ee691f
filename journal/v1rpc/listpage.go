package v1rpc

import (
	"encoding/base64"
	"fmt"
	"sort"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

const (
	// maxListPage bounds the nodes in one ListNodes answer when the
	// client pages.
	maxListPage = 5000
	// listPageBytes bounds one page's encoded nodes, so that an answer
	// fits gRPC's default 4 MiB receive limit whatever a node's record
	// holds (an active node's is about 260 bytes; MACs, credentials and a
	// fence make it longer).
	listPageBytes = 2 << 20
	// maxPageToken bounds a page token: a node ID, encoded.
	maxPageToken = 512
)

// listPage returns the page of nodes (sorted by ID) that follows the
// node named by token ("" for the first page), at most size of them and
// about pageBytes of their views, with the token of the next page ("" if
// none follows). A page holds at least one node if any follows, however
// large. size 0 asks for every node in one answer (a client that does not
// page).
func listPage(nodes []*pactv1.Node, view func(*pactv1.Node) *pactv1.Node, token string, size uint32, pageBytes int) ([]*pactv1.Node, string, error) {
	start := 0
	if token != "" {
		after, err := decodePageToken(token)
		if err != nil {
			return nil, "", err
		}
		start = sort.Search(len(nodes), func(i int) bool { return nodes[i].GetNodeId() > after })
	}
	rest := nodes[start:]
	if size == 0 {
		out := make([]*pactv1.Node, len(rest))
		for i, n := range rest {
			out[i] = view(n)
		}
		return out, "", nil
	}
	size = min(size, maxListPage)
	out := make([]*pactv1.Node, 0, min(int(size), len(rest)))
	bytes := 0
	for _, n := range rest {
		if len(out) == int(size) || (len(out) > 0 && bytes >= pageBytes) {
			return out, encodePageToken(out[len(out)-1].GetNodeId()), nil
		}
		v := view(n)
		bytes += proto.Size(v)
		out = append(out, v)
	}
	return out, "", nil
}

func encodePageToken(lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(lastID))
}

func decodePageToken(token string) (string, error) {
	if len(token) > maxPageToken {
		return "", fmt.Errorf("%w: page_token of %d bytes is not one this journal gave; start the list again without one", ErrInvalidArgument, len(token))
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) == 0 {
		return "", fmt.Errorf("%w: page_token %q is not one this journal gave; start the list again without one", ErrInvalidArgument, token)
	}
	return string(b), nil
}
