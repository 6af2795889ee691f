package hwid

import (
	"errors"
	"testing"
)

func TestNormalizeMAC(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"52:54:00:AB:cd:01", "52:54:00:ab:cd:01", false},
		{"52-54-00-ab-cd-01", "52:54:00:ab:cd:01", false},
		{"5254.00ab.cd01", "52:54:00:ab:cd:01", false},
		{"525400abcd01", "52:54:00:ab:cd:01", false},
		{" 52:54:00:ab:cd:01 ", "52:54:00:ab:cd:01", false},
		{"52:54:00:ab:cd", "", true},
		{"52:54:00:ab:cd:01:02", "", true},
		{"52:54:00-ab:cd:01", "", true},
		{"5:254:00:ab:cd:01", "", true},
		{"52:54:00:ab:cd:0g", "", true},
		{"00:00:00:00:00:00", "", true},
		{"ff:ff:ff:ff:ff:ff", "", true},
		{"=HYPERLINK(\"x\")", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := NormalizeMAC(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("NormalizeMAC(%q) err = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil && !errors.Is(err, ErrInvalidMAC) {
			t.Errorf("NormalizeMAC(%q) err = %v, want ErrInvalidMAC", tt.in, err)
		}
		if got != tt.want {
			t.Errorf("NormalizeMAC(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestNormalizeReportsEveryProblem(t *testing.T) {
	_, err := Normalize([]string{"zz", "52:54:00:00:00:01"}, "bad\x01", "abc")
	for _, want := range []error{ErrInvalidMAC, ErrInvalidBMCSerial, ErrInvalidEKHash} {
		if !errors.Is(err, want) {
			t.Errorf("Normalize err = %v, want it to include %v", err, want)
		}
	}
	if _, err := Normalize(nil, "S1", ""); !errors.Is(err, ErrEmpty) {
		t.Errorf("Normalize(no MACs) err = %v, want ErrEmpty", err)
	}
}

func TestNormalizeSortsAndDedups(t *testing.T) {
	id, err := Normalize([]string{"52:54:00:00:00:02", "52-54-00-00-00-01", "52:54:00:00:00:02"}, " S1 ", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(id.MACs) != 2 || id.MACs[0] != "52:54:00:00:00:01" || id.MACs[1] != "52:54:00:00:00:02" {
		t.Errorf("MACs = %v", id.MACs)
	}
	if id.BMCSerial != "S1" {
		t.Errorf("BMCSerial = %q", id.BMCSerial)
	}
}

func TestMatch(t *testing.T) {
	const ek = "aa00000000000000000000000000000000000000000000000000000000000000"
	reg := Identity{MACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}, BMCSerial: "S1"}
	regEK := Identity{MACs: []string{"52:54:00:00:00:01"}, EKHash: ek}
	tests := []struct {
		name string
		reg  Identity
		rep  Identity
		want Mismatch
	}{
		{"exact", reg, reg, MatchOK},
		{"extra NIC", reg, Identity{MACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:09"}, BMCSerial: "S1"}, MatchOK},
		{"one registered NIC missing", reg, Identity{MACs: []string{"52:54:00:00:00:02"}, BMCSerial: "S1"}, MatchOK},
		{"no registered NIC", reg, Identity{MACs: []string{"52:54:00:00:00:09"}, BMCSerial: "S1"}, MismatchNoMAC},
		{"no BMC serial reported", reg, Identity{MACs: []string{"52:54:00:00:00:01"}}, MismatchBMCMissing},
		{"other BMC serial", reg, Identity{MACs: []string{"52:54:00:00:00:01"}, BMCSerial: "S2"}, MismatchBMCDiffers},
		{"EK required", regEK, Identity{MACs: []string{"52:54:00:00:00:01"}}, MismatchEKMissing},
		{"EK differs", regEK, Identity{MACs: []string{"52:54:00:00:00:01"}, EKHash: "bb" + ek[2:]}, MismatchEKDiffers},
		{"EK matches", regEK, Identity{MACs: []string{"52:54:00:00:00:01"}, EKHash: ek}, MatchOK},
		{"registered without BMC, reported with", Identity{MACs: []string{"52:54:00:00:00:01"}}, Identity{MACs: []string{"52:54:00:00:00:01"}, BMCSerial: "X"}, MatchOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Match(tt.reg, tt.rep); got != tt.want {
				t.Errorf("Match = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzNormalize(f *testing.F) {
	f.Add("52:54:00:ab:cd:01", "S1", "")
	f.Add("5254.00ab.cd01", "", "AA00000000000000000000000000000000000000000000000000000000000000")
	f.Add("\xff\xfe", "\x00", "zz")
	f.Fuzz(func(t *testing.T, mac, bmc, ek string) {
		id, err := Normalize([]string{mac}, bmc, ek)
		if err != nil {
			return
		}
		// A normalised identity must be a fixed point.
		again, err := Normalize(id.MACs, id.BMCSerial, id.EKHash)
		if err != nil {
			t.Fatalf("normalised identity %+v does not normalise again: %v", id, err)
		}
		if again.MACs[0] != id.MACs[0] || again.BMCSerial != id.BMCSerial || again.EKHash != id.EKHash {
			t.Fatalf("not a fixed point: %+v vs %+v", id, again)
		}
	})
}

func TestCheckUnicast(t *testing.T) {
	tests := []struct {
		macs []string
		bad  int
	}{
		{[]string{"52:54:00:ab:cd:01", "00:1b:21:00:00:01"}, 0},
		{[]string{"01:00:5e:00:00:fb"}, 1},                      // IPv4 multicast
		{[]string{"33:33:00:00:00:01", "52:54:00:ab:cd:01"}, 1}, // IPv6 multicast
		{[]string{"03:00:00:00:00:01", "ff:ff:ff:ff:ff:fe"}, 2},
		{nil, 0},
	}
	for _, tt := range tests {
		err := CheckUnicast(tt.macs)
		if got := len(flattenErrs(err)); got != tt.bad {
			t.Errorf("%v: %d errors (%v), want %d", tt.macs, got, err, tt.bad)
		}
		if err != nil && !errors.Is(err, ErrInvalidMAC) {
			t.Errorf("%v: %v is not ErrInvalidMAC", tt.macs, err)
		}
	}
}

func flattenErrs(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
