package duration

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"90s", 90 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"500ms", 500 * time.Millisecond},
		{"3d", 72 * time.Hour},
		{"7d", 168 * time.Hour},
		{"1d12h", 36 * time.Hour},
		{"12h1d", 36 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{"0.5d", 12 * time.Hour},
		{"2d3h4m5s", 2*Day + 3*time.Hour + 4*time.Minute + 5*time.Second},
		{"-1d", -Day},
		{"+2d", 2 * Day},
		{"0d", 0},
		{"106751d", 106751 * Day}, // the longest whole number of days
	} {
		got, err := Parse(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tt := range []struct{ in, why string }{
		{"", ""},
		{"3", "a unit must follow"},
		{"3 days", `unknown unit " days"`},
		{"3days", `unknown unit "days"`},
		{"d", "a number must come before"},
		{"1d2", "a unit must follow"},
		{"1w", `unknown unit "w"`},
		{"1dd", `unknown unit "dd"`},
		{".d", "a number must come before"},
		{"-", ""},
		{" 3d", "a number must come before"},
		{"106752d", ""}, // over time.Duration's 292 years
		{"1.2.3d", ""},
		{"99999999999999999999d", ""},
	} {
		_, err := Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) accepted", tt.in)
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.why) || !strings.Contains(err.Error(), Hint) {
			t.Errorf("Parse(%q) = %v; want ErrInvalid, %q and the hint", tt.in, err, tt.why)
		}
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                       "0s",
		72 * time.Hour:          "3d",
		36 * time.Hour:          "36h0m0s",
		90 * time.Second:        "1m30s",
		-Day:                    "-1d",
		15 * time.Minute:        "15m0s",
		7*Day + time.Nanosecond: "168h0m0.000000001s",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
		if back, err := Parse(Format(d)); err != nil || back != d {
			t.Errorf("Parse(Format(%v)) = %v, %v", d, back, err)
		}
	}
}

// TestValue: the same flag value serves the flag package (the daemons'
// subcommands) and spf13/pflag (the CLI).
func TestValue(t *testing.T) {
	var d time.Duration
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(NewValue(&d, time.Hour), "ttl", "")
	if d != time.Hour || fs.Lookup("ttl").DefValue != "1h0m0s" {
		t.Fatalf("default %v, shown %q", d, fs.Lookup("ttl").DefValue)
	}
	if err := fs.Parse([]string{"--ttl", "2d"}); err != nil || d != 2*Day {
		t.Fatalf("--ttl 2d: %v, %v", d, err)
	}
	if err := fs.Parse([]string{"--ttl", "2 days"}); err == nil || !strings.Contains(err.Error(), Hint) {
		t.Fatalf("--ttl '2 days': %v", err)
	}
	if (Value{}).Type() != "duration" || (Value{}).String() != "" {
		t.Fatal("zero Value")
	}
}

// FuzzParse: Parse never panics; where Go's parser accepts a value, Parse
// gives the same duration; a value with days is its terms added up (what
// the days are in hours, times 24); and Format writes what Parse reads.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "3d", "1d12h", "1.5d", "-2d", "90s", "1h30m", "3 days", "d", "1dd", "106752d", ".5d", "5.d", "1µs", "0.000000001d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse(s)
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Parse(%q): %v does not wrap ErrInvalid", s, err)
		}
		if want, gerr := time.ParseDuration(s); gerr == nil {
			if err != nil || got != want {
				t.Fatalf("Parse(%q) = %v, %v; time.ParseDuration says %v", s, got, err, want)
			}
		} else if err == nil && !strings.Contains(s, "d") {
			t.Fatalf("Parse(%q) = %v without days, time.ParseDuration refuses: %v", s, got, gerr)
		}
		if err != nil {
			return
		}
		if back, err := Parse(Format(got)); err != nil || back != got {
			t.Fatalf("Parse(Format(%v)) = %v, %v (from %q)", got, back, err, s)
		}
		// A whole number of days is that many 24-hour days.
		if n, ok := strings.CutSuffix(s, "d"); ok && strings.Trim(n, "0123456789") == "" && n != "" {
			if h, err := time.ParseDuration(n + "h"); err == nil && got != h*24 {
				t.Fatalf("Parse(%q) = %v, want %v", s, got, h*24)
			}
		}
	})
}
