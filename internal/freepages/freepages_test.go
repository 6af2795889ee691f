package freepages

import (
	"reflect"
	"testing"
)

func TestEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=madvdontneed=0"}, true},
		{"other settings kept", []string{"GODEBUG=gctrace=1", "A=b"}, []string{"GODEBUG=gctrace=1,madvdontneed=0", "A=b"}, true},
		{"empty GODEBUG", []string{"GODEBUG="}, []string{"GODEBUG=madvdontneed=0"}, true},
		{"the last GODEBUG counts", []string{"GODEBUG=madvdontneed=1", "GODEBUG=gctrace=1"}, []string{"GODEBUG=madvdontneed=1", "GODEBUG=gctrace=1,madvdontneed=0"}, true},
		{"the operator keeps MADV_DONTNEED", []string{"GODEBUG=madvdontneed=1"}, []string{"GODEBUG=madvdontneed=1"}, false},
		{"already set (the second start)", []string{"GODEBUG=gctrace=1,madvdontneed=0"}, []string{"GODEBUG=gctrace=1,madvdontneed=0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]string(nil), tc.env...)
			got, changed := Env(in)
			if changed != tc.changed || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Env(%q) = %q, %v; want %q, %v", tc.env, got, changed, tc.want, tc.changed)
			}
			if !reflect.DeepEqual(in, tc.env) {
				t.Fatalf("the caller's environment changed: %q", in)
			}
		})
	}
}
