package hwinfo

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/pact-hpc/pact/internal/hwid"
)

// Link types from include/uapi/linux/if_arp.h.
const (
	arphrdEther      = 1
	arphrdInfiniband = 32
)

// Values of addr_assign_type from include/uapi/linux/netdevice.h.
const (
	netAddrPerm   = 0
	netAddrRandom = 1
	netAddrStolen = 2
	netAddrSet    = 3
)

// maxAttrSize caps a sysfs read: attributes are at most one page.
const maxAttrSize = 4096

// Files an interface's MAC may come from, relative to its directory.
const (
	fromAddress  = "address"
	fromPermAddr = "bonding_slave/perm_hwaddr"
)

// dmiSerialFiles are tried in order.
var dmiSerialFiles = []string{"product_serial", "board_serial", "chassis_serial"}

var errZeroAddress = errors.New("all-zero address")

// readNICs returns the MACs of the physical Ethernet NICs under
// {sysRoot}/class/net and records every interface in rep.
func readNICs(sysRoot string, rep *Report) ([]string, error) {
	dir := filepath.Join(sysRoot, "class", "net")
	rep.MACSource = dir
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("%w: cannot list %s: %w; pass --mac to set one", ErrNoHardwareIdentity, dir, err)
	}
	for _, e := range entries {
		ifDir := filepath.Join(dir, e.Name())
		// class/net also holds plain files such as bonding_masters.
		if fi, err := os.Stat(ifDir); err != nil || !fi.IsDir() {
			continue
		}
		rep.Interfaces = append(rep.Interfaces, inspectNIC(ifDir, e.Name()))
	}
	limitMACs(rep.Interfaces)

	var macs []string
	for _, nic := range rep.Interfaces {
		if nic.Taken() {
			macs = append(macs, nic.MAC)
		}
	}
	if len(macs) == 0 {
		seen := "it is empty"
		if len(rep.Interfaces) > 0 {
			seen = "skipped " + joinInterfaces(rep.Interfaces)
		}
		return nil, fmt.Errorf("%w under %s (%s); pass --mac to set one", ErrNoHardwareIdentity, dir, seen)
	}
	return macs, nil
}

// inspectNIC decides whether one interface is taken, and with which MAC.
func inspectNIC(ifDir, name string) Interface {
	nic := Interface{Name: name}
	skip := func(format string, args ...any) Interface {
		nic.Skipped = fmt.Sprintf(format, args...)
		return nic
	}
	if name == "lo" {
		return skip("loopback")
	}
	if _, err := os.Lstat(filepath.Join(ifDir, "device")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return skip("virtual (no device link)")
		}
		return skip("cannot check device link: %v", err)
	}

	typ, err := readInt(filepath.Join(ifDir, "type"))
	switch {
	case err != nil:
		return skip("cannot read link type: %v", err)
	case typ == arphrdInfiniband:
		return skip("InfiniBand (type %d): its 20-byte address is not a MAC", typ)
	case typ != arphrdEther:
		return skip("link type %d is not Ethernet (%d)", typ, arphrdEther)
	}

	// A bond member's address is the bond's; bonding keeps the original.
	if s, err := readAttr(filepath.Join(ifDir, fromPermAddr)); !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return skip("bond member, cannot read %s: %v", fromPermAddr, err)
		}
		mac, err := parseAddress(s)
		if err != nil {
			return skip("bond member, %s: %v", fromPermAddr, err)
		}
		nic.MAC, nic.From = mac, fromPermAddr
		return nic
	}

	aat, err := readInt(filepath.Join(ifDir, "addr_assign_type"))
	switch {
	case err != nil:
		return skip("cannot read addr_assign_type: %v", err)
	case aat == netAddrRandom:
		return skip("random address (addr_assign_type 1), made up by the driver at boot")
	case aat == netAddrStolen:
		return skip("address copied from another device (addr_assign_type 2)")
	case aat == netAddrSet:
		return skip("address set by software (addr_assign_type 3), not the one read from the hardware")
	case aat != netAddrPerm:
		return skip("unknown addr_assign_type %d", aat)
	}

	s, err := readAttr(filepath.Join(ifDir, fromAddress))
	if err != nil {
		return skip("cannot read address: %v", err)
	}
	mac, err := parseAddress(s)
	if err != nil {
		return skip("%v", err)
	}
	nic.MAC, nic.From = mac, fromAddress
	return nic
}

// limitMACs keeps the identity within hwid.MaxMACs: if more distinct MACs
// were taken, the lowest MaxMACs are kept (deterministic for a given set of
// NICs) and the interfaces with the others are marked skipped.
func limitMACs(nics []Interface) {
	distinct := map[string]struct{}{}
	for _, nic := range nics {
		if nic.Taken() {
			distinct[nic.MAC] = struct{}{}
		}
	}
	if len(distinct) <= hwid.MaxMACs {
		return
	}
	sorted := make([]string, 0, len(distinct))
	for m := range distinct {
		sorted = append(sorted, m)
	}
	sort.Strings(sorted)
	keep := make(map[string]struct{}, hwid.MaxMACs)
	for _, m := range sorted[:hwid.MaxMACs] {
		keep[m] = struct{}{}
	}
	for i := range nics {
		if _, ok := keep[nics[i].MAC]; nics[i].Taken() && !ok {
			nics[i].Skipped = fmt.Sprintf("%s is over the limit of %d MAC addresses", nics[i].MAC, hwid.MaxMACs)
			nics[i].MAC, nics[i].From = "", ""
		}
	}
}

// parseAddress parses the content of a sysfs address or perm_hwaddr file,
// which the kernel writes as colon-separated hex octets and a newline, into
// a normalised MAC. It refuses anything but six octets in that form, and
// all-zero, broadcast and other addresses hwid.NormalizeMAC rejects.
func parseAddress(s string) (string, error) {
	t := strings.TrimSpace(s)
	if len(t) != 17 || strings.Count(t, ":") != 5 {
		return "", fmt.Errorf("%w: %.40q is not six colon-separated octets", hwid.ErrInvalidMAC, t)
	}
	for i := 2; i < len(t); i += 3 {
		if t[i] != ':' {
			return "", fmt.Errorf("%w: %.40q is not six colon-separated octets", hwid.ErrInvalidMAC, t)
		}
	}
	if t == "00:00:00:00:00:00" {
		return "", errZeroAddress
	}
	return hwid.NormalizeMAC(t)
}

// readDMISerial returns the first usable DMI serial, or "" if there is none,
// and records in rep where it came from and why other files were passed over.
func readDMISerial(sysRoot string, rep *Report) string {
	dir := filepath.Join(sysRoot, "class", "dmi", "id")
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			rep.DMINotes = append(rep.DMINotes, "DMI not available: no "+dir)
		} else {
			rep.DMINotes = append(rep.DMINotes, fmt.Sprintf("DMI not available: %v", err))
		}
		return ""
	}
	for _, name := range dmiSerialFiles {
		path := filepath.Join(dir, name)
		s, err := readAttr(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			rep.DMINotes = append(rep.DMINotes, name+": absent")
			continue
		case errors.Is(err, fs.ErrPermission):
			rep.DMINotes = append(rep.DMINotes, name+": permission denied (DMI serials are readable by root only)")
			continue
		case err != nil:
			rep.DMINotes = append(rep.DMINotes, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		serial, err := hwid.NormalizeBMCSerial(s)
		if err != nil {
			rep.DMINotes = append(rep.DMINotes, fmt.Sprintf("%s: unusable: %v", name, err))
			continue
		}
		if isPlaceholder(serial) {
			rep.DMINotes = append(rep.DMINotes, fmt.Sprintf("%s: placeholder %q", name, serial))
			continue
		}
		rep.BMCSerialSource = path
		return serial
	}
	return ""
}

// readAttr reads a small sysfs attribute.
func readAttr(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttrSize+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxAttrSize {
		return "", fmt.Errorf("%s: larger than %d bytes", path, maxAttrSize)
	}
	return string(b), nil
}

func readInt(path string) (int, error) {
	s, err := readAttr(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%s: %.20q is not a number", path, strings.TrimSpace(s))
	}
	return n, nil
}
