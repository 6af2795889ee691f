// Package dist holds what installs pact on a host, and its tests: the
// systemd units (systemd/), the user they run as (sysusers.d/), example
// settings (etc/), and the .deb/.rpm package definition (nfpm.yaml, built
// by `make package`). It has no Go code of its own; the tests check the
// files against the binaries and against systemd-analyze, dpkg-deb and
// rpm.
package dist
