package hwinfo

import (
	"log/slog"
	"strings"

	"github.com/pact-hpc/pact/internal/logkey"
)

// Report says where each part of an identity came from. It holds no
// secrets and is meant to be logged: as a slog value it renders as a group
// (see LogValue), and String gives one line.
type Report struct {
	// MACSource is the directory the MACs were read from, or SourceMACFlag.
	MACSource string
	// Interfaces lists every network interface looked at, in name order.
	// It is empty when the MACs came from Config.
	Interfaces []Interface
	// BMCSerialSource is the DMI file the serial was read from,
	// SourceBMCSerialFlag, or "" when no serial was found.
	BMCSerialSource string
	// DMINotes say why DMI files were passed over, in the order tried.
	DMINotes []string
}

// Interface is one network interface and what Read made of it.
type Interface struct {
	Name string
	// MAC is the normalised address taken; "" if the interface was skipped.
	MAC string
	// From is the file the MAC was read from, relative to the interface's
	// directory: "address" or "bonding_slave/perm_hwaddr".
	From string
	// Skipped says why the interface was not taken; "" if it was.
	Skipped string
}

// Taken reports whether the interface's MAC is part of the identity.
func (i Interface) Taken() bool { return i.Skipped == "" }

// String is "eth0=52:54:00:00:00:01", "eth1=52:54:00:00:00:02 (from
// bonding_slave/perm_hwaddr)" or "lo: loopback".
func (i Interface) String() string {
	if !i.Taken() {
		return i.Name + ": " + i.Skipped
	}
	if i.From != fromAddress {
		return i.Name + "=" + i.MAC + " (from " + i.From + ")"
	}
	return i.Name + "=" + i.MAC
}

// Taken returns the interfaces whose MAC is part of the identity.
func (r Report) Taken() []Interface { return r.filter(true) }

// Skipped returns the interfaces that were passed over.
func (r Report) Skipped() []Interface { return r.filter(false) }

func (r Report) filter(taken bool) []Interface {
	var out []Interface
	for _, nic := range r.Interfaces {
		if nic.Taken() == taken {
			out = append(out, nic)
		}
	}
	return out
}

// String renders the report on one line, for example:
//
//	MACs from /sys/class/net: took eth0=52:54:00:00:00:01; skipped lo: loopback;
//	BMC serial from /sys/class/dmi/id/board_serial; DMI: product_serial: placeholder "None"
func (r Report) String() string {
	var parts []string
	if r.MACSource != "" {
		macs := "MACs from " + r.MACSource
		if taken := r.Taken(); len(taken) > 0 {
			macs += ": took " + joinInterfaces(taken)
		}
		parts = append(parts, macs)
	}
	if skipped := r.Skipped(); len(skipped) > 0 {
		parts = append(parts, "skipped "+joinInterfaces(skipped))
	}
	switch {
	case r.BMCSerialSource != "":
		parts = append(parts, "BMC serial from "+r.BMCSerialSource)
	case len(r.DMINotes) > 0:
		// DMI was read (every file passed over leaves a note) and gave nothing.
		parts = append(parts, "no BMC serial found")
	}
	if len(r.DMINotes) > 0 {
		parts = append(parts, "DMI: "+strings.Join(r.DMINotes, ", "))
	}
	return strings.Join(parts, "; ")
}

// LogValue renders the report as a slog group with the keys mac_source,
// taken, skipped, bmc_serial_source and dmi_notes; empty ones are left out.
func (r Report) LogValue() slog.Value {
	var attrs []slog.Attr
	if r.MACSource != "" {
		attrs = append(attrs, slog.String(logkey.MACSource, r.MACSource))
	}
	if taken := r.Taken(); len(taken) > 0 {
		attrs = append(attrs, slog.Any(logkey.Taken, interfaceStrings(taken)))
	}
	if skipped := r.Skipped(); len(skipped) > 0 {
		attrs = append(attrs, slog.Any(logkey.Skipped, interfaceStrings(skipped)))
	}
	if r.BMCSerialSource != "" {
		attrs = append(attrs, slog.String(logkey.BMCSerialSource, r.BMCSerialSource))
	}
	if len(r.DMINotes) > 0 {
		attrs = append(attrs, slog.Any(logkey.DMINotes, r.DMINotes))
	}
	return slog.GroupValue(attrs...)
}

var _ slog.LogValuer = Report{}

func interfaceStrings(nics []Interface) []string {
	out := make([]string, len(nics))
	for i, nic := range nics {
		out[i] = nic.String()
	}
	return out
}

func joinInterfaces(nics []Interface) string {
	return strings.Join(interfaceStrings(nics), ", ")
}
