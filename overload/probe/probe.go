package probe

import (
	"log/slog"
	"time"
)

// Config says where a Probe reads from. The zero value reads the caller's
// own /proc, /sys and network namespace.
type Config struct {
	// ProcRoot is where procfs is mounted; "" means "/proc". An agent in a
	// container reads the host's memory and load from a bind mount of the
	// host's /proc (e.g. "/host/proc").
	//
	// The network files under it (/proc/sys/net/netfilter, the thread's
	// net/netstat and net/stat/nf_conntrack) show the network namespace of
	// the thread that opens them, whatever the mount: to read the host's
	// from a container without host networking, set NetNS too (e.g.
	// "/host/proc/1/ns/net").
	ProcRoot string

	// SysRoot is where sysfs is mounted; "" means "/sys". Link speeds are
	// read from SysRoot/class/net/IF/speed. A sysfs shows the links of the
	// network namespace that mounted it: with NetNS set, SysRoot must be a
	// sysfs mounted from inside that namespace (as `ip netns exec` does),
	// else the probe finds the links do not match (index or address) and
	// reports their speed as unknown rather than another namespace's.
	SysRoot string

	// NetNS is the path of a network namespace to read the network
	// sources from: conntrack, listen queues and links, e.g.
	// "/var/run/netns/x" or "/proc/PID/ns/net". "" means the caller's.
	// Each Read enters it on a thread of its own, which is thrown away
	// afterwards. Entering a namespace needs CAP_SYS_ADMIN; without it the
	// network inputs are missing from every reading, with a note.
	NetNS string

	// LinkSpeedMbps holds operator-given link speeds in Mbit/s, by link
	// name. A speed given here is used even when the kernel reports one:
	// the operator knows the contracted rate (a 10 Gbit/s NIC on a
	// 1 Gbit/s plan). A link with no speed here and none in sysfs has an
	// unknown speed: its bandwidth check is skipped, never guessed.
	LinkSpeedMbps map[string]uint64

	// Node is copied into every Reading's Node.
	Node string

	// Timeout bounds each netlink request; 0 means 2 s. A context
	// deadline, when earlier, bounds it too.
	Timeout time.Duration

	// Logger receives debug records about degraded sources; nil discards.
	Logger *slog.Logger
}

// defaultTimeout bounds a netlink request when Config.Timeout is 0.
const defaultTimeout = 2 * time.Second

// withDefaults returns cfg with its documented defaults filled in.
func (cfg Config) withDefaults() Config {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	speeds := make(map[string]uint64, len(cfg.LinkSpeedMbps))
	for k, v := range cfg.LinkSpeedMbps {
		speeds[k] = v
	}
	cfg.LinkSpeedMbps = speeds
	return cfg
}
