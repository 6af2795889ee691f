package v1rpc

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

func sortedNodes(n int) []*pactv1.Node {
	out := make([]*pactv1.Node, n)
	for i := range out {
		out[i] = &pactv1.Node{NodeId: fmt.Sprintf("node-%05d", i), State: pactv1.NodeState_NODE_STATE_ACTIVE}
	}
	return out
}

func identity(n *pactv1.Node) *pactv1.Node { return n }

// walk lists every page and returns the node IDs in order and the page
// sizes.
func walk(t *testing.T, nodes []*pactv1.Node, size uint32, pageBytes int) (ids []string, pages []int) {
	t.Helper()
	token := ""
	for range len(nodes) + 2 {
		page, next, err := listPage(nodes, identity, token, size, pageBytes)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, len(page))
		for _, n := range page {
			ids = append(ids, n.GetNodeId())
		}
		if next == "" {
			return ids, pages
		}
		token = next
	}
	t.Fatalf("the pages of %d nodes did not end", len(nodes))
	return nil, nil
}

func TestListPageWalksEveryNodeOnce(t *testing.T) {
	nodes := sortedNodes(2503)
	one := proto.Size(nodes[0])
	tests := []struct {
		name      string
		size      uint32
		pageBytes int
		wantPages []int
	}{
		{"by count", 1000, listPageBytes, []int{1000, 1000, 503}},
		{"count above the cap", 1 << 30, listPageBytes, []int{2503}},
		{"by bytes", 1000, 700 * one, []int{700, 700, 700, 403}},
		{"a page holds one node however large", 1000, 1, slicesOf(2503, 1)},
		{"every node at once (zero)", 0, 1, []int{2503}},
		{"exact fit", 2503, listPageBytes, []int{2503}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids, pages := walk(t, nodes, tc.size, tc.pageBytes)
			if fmt.Sprint(pages) != fmt.Sprint(tc.wantPages) {
				t.Fatalf("pages %v, want %v", pages, tc.wantPages)
			}
			if len(ids) != len(nodes) {
				t.Fatalf("%d nodes listed, want %d", len(ids), len(nodes))
			}
			for i, id := range ids {
				if id != nodes[i].GetNodeId() {
					t.Fatalf("node %d is %s, want %s", i, id, nodes[i].GetNodeId())
				}
			}
		})
	}
}

func slicesOf(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// The next page starts after the token's node even if that node has gone
// (decommissioned and forgotten between two pages), and a node added
// before the cursor is not listed again.
func TestListPageContinuesAfterTheTokenNotAtAnIndex(t *testing.T) {
	nodes := sortedNodes(10)
	page, next, err := listPage(nodes, identity, "", 4, listPageBytes)
	if err != nil || len(page) != 4 || next == "" {
		t.Fatalf("first page: %d nodes, next %q, %v", len(page), next, err)
	}
	// node-00003, the last listed, disappears; node-00001b appears.
	changed := append([]*pactv1.Node{}, nodes[:3]...)
	changed = append(changed, &pactv1.Node{NodeId: "node-00001b"})
	changed = append(changed, nodes[4:]...)
	changed[2], changed[3] = changed[3], changed[2] // keep ID order: 00001b < 00002
	page, _, err = listPage(changed, identity, next, 4, listPageBytes)
	if err != nil {
		t.Fatal(err)
	}
	if page[0].GetNodeId() != "node-00004" {
		t.Fatalf("second page starts at %s, want node-00004", page[0].GetNodeId())
	}
}

func TestListPageRefusesATokenItDidNotGive(t *testing.T) {
	for _, token := range []string{"not base64!", strings.Repeat("A", maxPageToken+1), "="} {
		_, _, err := listPage(sortedNodes(3), identity, token, 10, listPageBytes)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "start the list again") {
			t.Errorf("token %.20q: %v, want an invalid argument that says what to do", token, err)
		}
	}
}

func FuzzListPageToken(f *testing.F) {
	f.Add(encodePageToken("node-00004"))
	f.Add("")
	f.Add("%%%")
	nodes := sortedNodes(20)
	f.Fuzz(func(t *testing.T, token string) {
		page, next, err := listPage(nodes, identity, token, 7, listPageBytes)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("token %q: untyped error %v", token, err)
			}
			return
		}
		if len(page) > 7 {
			t.Fatalf("token %q: page of %d", token, len(page))
		}
		if next != "" {
			if _, err := decodePageToken(next); err != nil {
				t.Fatalf("next token %q does not decode: %v", next, err)
			}
		}
	})
}
