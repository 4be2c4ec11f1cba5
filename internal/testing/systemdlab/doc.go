// Package systemdlab boots a Debian system with systemd as PID 1 in a
// container of a test's own dockerd (dockerlab), so tests install the
// release's packages with dpkg and drive their units with systemctl as
// an operator would.
//
//	d := dockerlab.Start(t)
//	m := systemdlab.Boot(t, d) // skips t, with the reason, without mmdebstrap or the mirror
//	m.Copy(t, "pinproxy_0.5.0_amd64.deb", "/var/tmp/pinproxy.deb") // not /tmp: a tmpfs docker cp does not reach
//	m.Run(t, "dpkg", "-i", "/var/tmp/pinproxy.deb")
//	m.Run(t, "systemctl", "start", "pinproxy")
//
// The root filesystem is built from Debian's packages with mmdebstrap
// (minbase, systemd, adduser; about 200 MB, 1.5 minutes from
// deb.debian.org here) and kept as a tarball in $NODEKIT_ROOTFS_CACHE when
// that is set (CI keeps it between runs), else in the test's temporary
// directory. The container has a network namespace of its own with only
// loopback; InNetns runs code in it, so the test's own listeners and
// clients talk to the services inside.
//
// Debian 12: systemd 252 still runs on a host with cgroup v1, as some CI
// machines are; later releases need cgroup v2.
package systemdlab
