package main

import "testing"

func TestParseConntrackDrops(t *testing.T) {
	const header = "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop early_drop icmp_error  expect_new expect_create expect_delete search_restart\n"
	for _, tc := range []struct {
		name   string
		in     string
		want   uint64
		wantOK bool
	}{
		{"two CPUs", header +
			"00000278  00000000 00000000 00000000 00000178 00000000 00000000 00000000 00000000 00000000 00053117 000000cc 00000000  00000000 00000000 00000000 00000000\n" +
			"00000278  00000000 00000000 00000000 0000010f 00000000 00000000 00000000 00000000 00000000 00045393 000000a6 00000000  00000000 00000000 00000000 00000001\n",
			0x53117 + 0x45393, true},
		{"nothing dropped", header + "00000001  0 0 0 0 0 0 0 0 0 00000000 0 0 0 0 0 0\n", 0, true},
		{"no drop column", "entries found\n00000001 00000002\n", 0, false},
		{"a short line", header + "00000001 00000000\n", 0, false},
		{"not hexadecimal", header + "00000001  0 0 0 0 0 0 0 0 0 zz 0 0 0 0 0 0\n", 0, false},
		{"header only", header, 0, false},
		{"empty", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseConntrackDrops(tc.in)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("parseConntrackDrops = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
