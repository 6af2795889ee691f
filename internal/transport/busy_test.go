package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func TestParseBusy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"pact-journal busy: retry after 1234 ms\n", 1234 * time.Millisecond, true},
		{"pact-journal busy: retry after 0 ms\n", 0, true},
		{"pact-journal busy: retry after 9999999 ms\n", MaxBusyRetryAfter, true}, // capped
		{"pact-journal busy: retry after 10000000 ms\n", 0, false},               // too many digits
		{"pact-journal busy: retry after ms\n", 0, false},
		{"pact-journal busy: retry after -5 ms\n", 0, false},
		{"pact-journal busy: retry after 12 ms", 0, false}, // no newline
		{"pact-journal busy: retry after 12 s\n", 0, false},
		{"pact-journal busy: retry after 1 2 ms\n", 0, false},
		{"\x16\x03\x01\x00\x05hello", 0, false},
		{"", 0, false},
	} {
		got, err := ParseBusy([]byte(tc.in))
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseBusy(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if !tc.ok && !errors.Is(err, ErrBadBusyLine) {
			t.Errorf("ParseBusy(%q): %v, want ErrBadBusyLine", tc.in, err)
		}
	}
}

func TestFormatBusy(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{1234 * time.Millisecond, "pact-journal busy: retry after 1234 ms\n"},
		{1500 * time.Microsecond, "pact-journal busy: retry after 2 ms\n"}, // rounded up
		{-time.Second, "pact-journal busy: retry after 0 ms\n"},
		{time.Hour, "pact-journal busy: retry after 300000 ms\n"},
	} {
		line := FormatBusy(tc.in)
		if string(line) != tc.want {
			t.Errorf("FormatBusy(%v) = %q, want %q", tc.in, line, tc.want)
		}
		if line[0] >= 20 && line[0] <= 23 {
			t.Errorf("FormatBusy(%v) begins with a TLS record type", tc.in)
		}
		if _, err := ParseBusy(line); err != nil || len(line) > MaxBusyLine {
			t.Errorf("FormatBusy(%v) = %q does not parse back: %v", tc.in, line, err)
		}
	}
}

// serve writes data on one end of a pipe, closes it, and returns the
// other end wrapped.
func serve(data []byte) net.Conn {
	client, server := net.Pipe()
	go func() {
		for len(data) > 0 { // in pieces, as TCP may deliver it
			n := min(len(data), 7)
			if _, err := server.Write(data[:n]); err != nil {
				break
			}
			data = data[n:]
		}
		server.Close()
	}()
	return BusyAware(client)
}

func TestBusyAware(t *testing.T) {
	// A busy line becomes a *BusyError.
	_, err := serve(FormatBusy(2500 * time.Millisecond)).Read(make([]byte, 512))
	var busy *BusyError
	if !errors.As(err, &busy) || busy.RetryAfter != 2500*time.Millisecond {
		t.Fatalf("busy line: %v, want a BusyError of 2.5s", err)
	}
	// TLS bytes, and bytes that only look like a busy line, pass through
	// untouched.
	for _, data := range [][]byte{
		append([]byte{22, 3, 3, 0, 4}, bytes.Repeat([]byte{'x'}, 600)...),
		[]byte("pact-journal is not busy at all, this is just text\n"),
		[]byte("pizza"),
		bytes.Repeat([]byte{'p'}, 200),
	} {
		got, err := io.ReadAll(serve(data))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("passthrough of %q: got %q, %v", data, got, err)
		}
	}
}

// FuzzParseBusy: the busy line is untrusted input (anyone on the path can
// write it). Parsing never panics, accepts only what FormatBusy writes,
// caps the retry-after, and the connection wrapper either returns a
// BusyError or passes every byte through.
func FuzzParseBusy(f *testing.F) {
	f.Add(FormatBusy(1234 * time.Millisecond))
	f.Add([]byte("pact-journal busy: retry after 99999999 ms\n"))
	f.Add([]byte{22, 3, 1, 0, 1, 1})
	f.Add([]byte("p\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ra, err := ParseBusy(data)
		if err == nil {
			if ra < 0 || ra > MaxBusyRetryAfter || len(data) > MaxBusyLine || data[len(data)-1] != '\n' {
				t.Fatalf("ParseBusy(%q) accepted %v", data, ra)
			}
			if !bytes.Equal(FormatBusy(ra), data) && ra != MaxBusyRetryAfter && !bytes.Contains(data, []byte(" 0")) {
				t.Fatalf("ParseBusy(%q) = %v, which formats as %q", data, ra, FormatBusy(ra))
			}
		}
		got, err := io.ReadAll(serve(data))
		var busy *BusyError
		if errors.As(err, &busy) {
			if busy.RetryAfter < 0 || busy.RetryAfter > MaxBusyRetryAfter {
				t.Fatalf("BusyError out of bounds: %v", busy.RetryAfter)
			}
			return
		}
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("passthrough of %q: got %q, %v", data, got, err)
		}
	})
}
