// Package duration is the one duration syntax of pact's binaries: the
// pact CLI's flags, and pact-journal's and pact-agent's flags, variables
// and configuration files all read a duration with Parse, so "3d" means
// the same everywhere.
//
// The syntax is Go's (time.ParseDuration: "90s", "1h30m", "1.5h") plus
// days: "d" is 24 hours, alone ("7d") or with other units ("1d12h",
// "1.5d"). A value without "d" parses exactly as time.ParseDuration
// parses it.
package duration

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Day is the length of the unit "d". pact's days are always 24 hours:
// certificate lifetimes and TTLs are measured on the clock, not the
// calendar.
const Day = 24 * time.Hour

// ErrInvalid is wrapped by every error of Parse.
var ErrInvalid = errors.New("not a duration")

// Hint is what a message about a bad duration can tell the operator to
// write.
const Hint = "write it like 90s, 30m, 36h, 7d or 1d12h"

// Parse reads a duration: Go's syntax plus the unit "d" (24 hours).
// Surrounding space is not allowed (the callers trim). The error wraps
// ErrInvalid, quotes s and says how to write one.
func Parse(s string) (time.Duration, error) {
	rest, neg := s, false
	if rest != "" && (rest[0] == '-' || rest[0] == '+') {
		neg = rest[0] == '-'
		rest = rest[1:]
	}
	if rest == "0" {
		return 0, nil
	}
	if rest == "" {
		return 0, invalid(s, "")
	}
	type term struct{ num, unit string }
	var terms []term
	days := false
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] == '.' || ('0' <= rest[i] && rest[i] <= '9')) {
			i++
		}
		j := i
		for j < len(rest) && rest[j] != '.' && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		t := term{num: rest[:i], unit: rest[i:j]}
		switch {
		case strings.Trim(t.num, ".") == "":
			return 0, invalid(s, "a number must come before each unit")
		case t.unit == "":
			return 0, invalid(s, "a unit must follow each number ("+units+")")
		}
		days = days || t.unit == "d"
		terms = append(terms, t)
		rest = rest[j:]
	}
	if !days {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, invalid(s, why(err))
		}
		return d, nil
	}
	var total time.Duration
	for _, t := range terms {
		unit, times := t.unit, time.Duration(1)
		if unit == "d" {
			unit, times = "h", 24
		}
		d, err := time.ParseDuration(t.num + unit)
		if err != nil {
			return 0, invalid(s, why(err))
		}
		if d > math.MaxInt64/times {
			return 0, invalid(s, "too long")
		}
		d *= times
		if total > math.MaxInt64-d {
			return 0, invalid(s, "too long")
		}
		total += d
	}
	if neg {
		total = -total
	}
	return total, nil
}

const units = "units: ns, us, ms, s, m, h, d"

func invalid(s, why string) error {
	if why != "" {
		why = " (" + why + ")"
	}
	return fmt.Errorf("%s is %w%s: %s", quote(s), ErrInvalid, why, Hint)
}

// why is the part of time.ParseDuration's error an operator can act on.
func why(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "unknown unit "); i >= 0 {
		u := msg[i+len("unknown unit "):]
		if k := strings.Index(u, " in duration"); k >= 0 {
			u = u[:k]
		}
		return "unknown unit " + u + "; " + units
	}
	return ""
}

// Format writes d the way Parse reads it, in whole days when it is a
// whole number of days ("7d"), and as time.Duration.String otherwise.
func Format(d time.Duration) string {
	if d != 0 && d%Day == 0 {
		return strconv.FormatInt(int64(d/Day), 10) + "d"
	}
	return d.String()
}

// quote shows a value in a message, cut short so a huge or binary value
// cannot flood a terminal.
func quote(v string) string {
	const max = 64
	if len(v) > max {
		v = v[:max] + "..."
	}
	return strconv.Quote(v)
}

// Value is a flag (for both the flag package and spf13/pflag) holding a
// duration read with Parse.
type Value struct{ P *time.Duration }

// NewValue sets *p to def and returns a flag value for it.
func NewValue(p *time.Duration, def time.Duration) Value {
	*p = def
	return Value{P: p}
}

// Set parses s into the duration.
func (v Value) Set(s string) error {
	d, err := Parse(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*v.P = d
	return nil
}

// String is the current value, as Format writes it.
func (v Value) String() string {
	if v.P == nil {
		return ""
	}
	return Format(*v.P)
}

// Type names the kind of value in help (spf13/pflag).
func (Value) Type() string { return "duration" }
