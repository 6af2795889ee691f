package main

import (
	"reflect"
	"testing"
)

func TestWithFreePages(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    []string
		want   []string
		reexec bool
	}{
		{"no GODEBUG", []string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=madvdontneed=0"}, true},
		{"other settings kept", []string{"GODEBUG=gctrace=1", "A=b"}, []string{"GODEBUG=gctrace=1,madvdontneed=0", "A=b"}, true},
		{"empty GODEBUG", []string{"GODEBUG="}, []string{"GODEBUG=madvdontneed=0"}, true},
		{"operator keeps DONTNEED", []string{"GODEBUG=madvdontneed=1"}, []string{"GODEBUG=madvdontneed=1"}, false},
		{"already set (the second start)", []string{"GODEBUG=gctrace=1,madvdontneed=0"}, []string{"GODEBUG=gctrace=1,madvdontneed=0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]string(nil), tc.env...)
			got, reexec := withFreePages(in)
			if reexec != tc.reexec || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("withFreePages(%q) = %q, %v; want %q, %v", tc.env, got, reexec, tc.want, tc.reexec)
			}
			if !reflect.DeepEqual(in, tc.env) {
				t.Fatalf("the caller's environment changed: %q", in)
			}
		})
	}
}
