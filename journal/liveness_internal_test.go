package journal

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pactv1 "github.com/pact-hpc/pact/proto/pact/v1"
)

// Each chunk of a liveness digest, encoded as the command's op, fits the
// bound; together the chunks are the ids in order, none lost or repeated.
func TestDigestChunksFitTheirBound(t *testing.T) {
	ids := func(n, width int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%0*d", width, i)
		}
		return out
	}
	tests := []struct {
		name     string
		ids      []string
		maxBytes int
		chunks   int // 0: more than one, count not fixed
	}{
		{"one id", []string{"n1"}, digestBytes, 1},
		{"a rack", ids(64, 20), digestBytes, 1},
		{"a journal of a 30,000-node site", ids(10000, 12), digestBytes, 0},
		{"long ids", ids(5000, 253), digestBytes, 0},
		{"ids exactly filling a chunk", ids(10, 97), 1000, 1}, // 10 x (97+3)
		{"one byte more", ids(10, 98), 1000, 2},
		{"a bound below one id", ids(3, 40), 10, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks := digestChunks(tt.ids, tt.maxBytes)
			if tt.chunks > 0 && len(chunks) != tt.chunks || tt.chunks == 0 && len(chunks) < 2 {
				t.Errorf("%d chunks, want %d (0: several)", len(chunks), tt.chunks)
			}
			var joined []string
			for _, c := range chunks {
				if len(c) == 0 {
					t.Fatalf("an empty chunk")
				}
				op := &pactv1.LivenessDigestOp{NodeIds: c}
				if size := proto.Size(op); len(c) > 1 && size > tt.maxBytes {
					t.Errorf("a chunk of %d ids encodes to %d bytes, over %d", len(c), size, tt.maxBytes)
				}
				joined = append(joined, c...)
			}
			if !slices.Equal(joined, tt.ids) {
				t.Errorf("the chunks hold %d ids (%s...), want the %d given in order", len(joined), strings.Join(joined[:min(3, len(joined))], ","), len(tt.ids))
			}
		})
	}
}
