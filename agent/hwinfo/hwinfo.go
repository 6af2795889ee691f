// Package hwinfo reads a node's hardware identity from the host: the MAC
// addresses of its physical Ethernet NICs and the system serial from DMI.
// The result is normalised with internal/hwid, so the agent reports exactly
// what an operator registered.
//
// Everything is read from sysfs (Config.SysRoot, "/sys" by default), which
// keeps the package free of netlink and ioctls and lets tests point it at a
// fake tree.
//
// # NICs
//
// Every entry of {SysRoot}/class/net is looked at, in name order. An
// interface is taken only if all of these hold:
//
//   - it is not "lo";
//   - {IF}/device exists: only interfaces backed by a device (PCI, virtio,
//     USB ...) have one; bridges, veth pairs, bonds, VLANs, tun/tap, docker0
//     and other software interfaces do not, and their addresses are made up;
//   - {IF}/type is 1 (ARPHRD_ETHER). InfiniBand (type 32) has 20-byte
//     addresses that are not MACs, and other link types have no MAC at all;
//   - {IF}/addr_assign_type is 0 (NET_ADDR_PERM), meaning the kernel read the
//     address from the hardware. 1 (NET_ADDR_RANDOM) is a random address the
//     driver made up, new at every boot. 2 (NET_ADDR_STOLEN) was copied from
//     another device. 3 (NET_ADDR_SET) was set by software after the driver
//     loaded (udev MACAddressPolicy, NetworkManager cloned MACs, bonding,
//     ip link set address): it may equal the hardware's address, but it is
//     chosen by the image's configuration, so it is not evidence of which
//     machine this is, and sysfs does not expose the permanent address
//     behind it;
//   - {IF}/address holds a six-octet, non-zero, unicast address.
//
// Bond members are the exception. Enslaving a NIC makes the bonding driver
// overwrite its address with the bond's (addr_assign_type becomes 3), but it
// keeps the original in {IF}/bonding_slave/perm_hwaddr. When that file
// exists it is used instead of {IF}/address, whatever addr_assign_type says;
// the bond itself has no device link and is skipped.
//
// # System serial
//
// The serial is the first usable value of {SysRoot}/class/dmi/id/
// product_serial, board_serial and chassis_serial. Firmware fills unset
// fields with placeholders such as "To Be Filled By O.E.M."; these are
// ignored, since every node of a model would otherwise report the same
// "serial". The files are readable by root only: a permission error (or any
// other read error) is recorded in the Report and the next file is tried;
// a node without a serial still enrolls by MAC.
//
// # Overrides
//
// Config.MACs and Config.BMCSerial (the agent's --mac and --bmc-serial
// flags) replace what would have been read: with MACs set no NIC is looked
// at, with BMCSerial set DMI is not read.
package hwinfo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pact-hpc/pact/internal/hwid"
)

// Sentinel errors. Callers match with errors.Is.
var (
	// ErrInvalidConfig wraps every problem Config.Validate finds.
	ErrInvalidConfig = errors.New("hwinfo: invalid config")
	// ErrNoHardwareIdentity means no usable MAC address was found. The
	// wrapped error names the directory read and tells the operator to
	// pass --mac.
	ErrNoHardwareIdentity = errors.New("hwinfo: no physical NIC with a usable hardware address found")
)

// DefaultSysRoot is where sysfs is mounted.
const DefaultSysRoot = "/sys"

// Sources recorded in a Report when a value came from Config, not the host.
const (
	SourceMACFlag       = "--mac"
	SourceBMCSerialFlag = "--bmc-serial"
)

// Config says where to read from and what to override.
type Config struct {
	// SysRoot is where sysfs is mounted; tests point it at a temp dir tree.
	SysRoot string
	// MACs, if non-empty, are used instead of reading NICs (--mac flags).
	MACs []string
	// BMCSerial, if non-empty, is used instead of DMI (--bmc-serial flag).
	BMCSerial string
	// TPMEKHash is optional and passed through after normalisation. With a
	// TPM (agent.Config.TPMDevice) the agent reports the TPM's own EK hash
	// instead.
	TPMEKHash string
}

// DefaultConfig reads everything from /sys.
func DefaultConfig() Config {
	return Config{SysRoot: DefaultSysRoot}
}

// Validate reports every problem at once. Each one wraps ErrInvalidConfig
// and, where there is one, the internal/hwid error behind it.
func (c Config) Validate() error {
	var errs []error
	if c.SysRoot == "" && (len(c.MACs) == 0 || c.BMCSerial == "") {
		errs = append(errs, fmt.Errorf("%w: SysRoot is empty (the default is %s); it may be empty only when both --mac and --bmc-serial are given",
			ErrInvalidConfig, DefaultSysRoot))
	}
	if len(c.MACs) > hwid.MaxMACs {
		errs = append(errs, fmt.Errorf("%w: --mac given %d times: %w (at most %d)", ErrInvalidConfig, len(c.MACs), hwid.ErrTooMany, hwid.MaxMACs))
	}
	for _, m := range c.MACs {
		if _, err := hwid.NormalizeMAC(m); err != nil {
			errs = append(errs, fmt.Errorf("%w: --mac: %w", ErrInvalidConfig, err))
		}
	}
	if c.BMCSerial != "" {
		s, err := hwid.NormalizeBMCSerial(c.BMCSerial)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: --bmc-serial: %w", ErrInvalidConfig, err))
		case isPlaceholder(s):
			errs = append(errs, fmt.Errorf("%w: --bmc-serial: %w: %q is a firmware placeholder, not a serial",
				ErrInvalidConfig, hwid.ErrInvalidBMCSerial, s))
		}
	}
	if _, err := hwid.NormalizeEKHash(c.TPMEKHash); err != nil {
		errs = append(errs, fmt.Errorf("%w: TPM EK hash: %w", ErrInvalidConfig, err))
	}
	return errors.Join(errs...)
}

// Read returns the node's normalised hardware identity and a Report saying
// where each part came from. The Report is filled as far as Read got, also
// when it returns an error, so callers should log it either way.
//
// Read fails with ErrInvalidConfig, with ErrNoHardwareIdentity when no usable
// MAC address was found, or with an internal/hwid error (wrapped) if the
// collected identity does not normalise. A missing or unreadable serial is
// not an error: Identity.BMCSerial is then empty.
func Read(cfg Config) (hwid.Identity, Report, error) {
	var rep Report
	if err := cfg.Validate(); err != nil {
		return hwid.Identity{}, rep, err
	}

	macs := cfg.MACs
	if len(macs) > 0 {
		rep.MACSource = SourceMACFlag
	} else {
		var err error
		if macs, err = readNICs(cfg.SysRoot, &rep); err != nil {
			return hwid.Identity{}, rep, err
		}
	}

	serial := cfg.BMCSerial
	if serial != "" {
		rep.BMCSerialSource = SourceBMCSerialFlag
	} else {
		serial = readDMISerial(cfg.SysRoot, &rep)
	}

	id, err := hwid.Normalize(macs, serial, cfg.TPMEKHash)
	if err != nil {
		return hwid.Identity{}, rep, fmt.Errorf("hwinfo: %w", err)
	}
	return id, rep, nil
}

// placeholders are values firmware puts in unset DMI serial fields, compared
// case-insensitively after trimming. Values made only of zeros ("0",
// "00000000") are placeholders as well; see isPlaceholder.
var placeholders = []string{
	"",
	"None",
	"Not Specified",
	"To Be Filled By O.E.M.",
	"Default string",
	"System Serial Number",
	"0123456789",
	"Not Applicable",
	"N/A",
	"Chassis Serial Number",
	"Base Board Serial Number",
	"Unknown",
}

// isPlaceholder reports whether a DMI serial is a firmware placeholder
// (case-insensitive, surrounding space ignored).
func isPlaceholder(s string) bool {
	t := strings.TrimSpace(s)
	if t != "" && strings.Trim(t, "0") == "" {
		return true
	}
	for _, p := range placeholders {
		if strings.EqualFold(t, p) {
			return true
		}
	}
	return false
}
