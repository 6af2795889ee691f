package v1rpc

import (
	"context"
	"errors"
	"testing"
)

func TestBarrierOnce(t *testing.T) {
	errNoLeader := errors.New("no leader")
	cases := []struct {
		name     string
		perCall  bool
		results  []error // what the leader answers, barrier after barrier
		want     []error // what each of len(want) checks of the call sees
		barriers int
	}{
		{name: "one barrier for every check of a call", perCall: true, results: []error{nil}, want: []error{nil, nil, nil}, barriers: 1},
		{name: "a failed barrier confirms nothing", perCall: true, results: []error{errNoLeader, nil}, want: []error{errNoLeader, nil, nil}, barriers: 2},
		{name: "failures all the way", perCall: true, results: []error{errNoLeader, errNoLeader}, want: []error{errNoLeader, errNoLeader}, barriers: 2},
		// A stream's context carries none: each check confirms anew.
		{name: "no call confirmation", perCall: false, results: []error{nil, nil, nil}, want: []error{nil, nil, nil}, barriers: 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.perCall {
				ctx = withCallConfirmation(ctx)
			}
			n := 0
			barrier := func(context.Context) error {
				if n >= len(tc.results) {
					t.Fatalf("barrier %d: the leader was asked more often than %d times", n+1, len(tc.results))
				}
				n++
				return tc.results[n-1]
			}
			for i, want := range tc.want {
				if got := BarrierOnce(ctx, barrier); !errors.Is(got, want) || (want == nil) != (got == nil) {
					t.Errorf("check %d: %v, want %v", i+1, got, want)
				}
			}
			if n != tc.barriers {
				t.Errorf("the leader was asked %d times, want %d", n, tc.barriers)
			}
		})
	}
}
