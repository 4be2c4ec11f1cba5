package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/proofkit/nodekit/internal/procfile"
)

// errMalformed marks a file whose content the probe cannot use.
var errMalformed = errors.New("malformed")

// maxFileSize bounds a kernel file read whole; the probe's are a few
// hundred bytes, /proc/net/stat/nf_conntrack a line per CPU.
const maxFileSize = 4 << 20

// readFile reads a small kernel file whole, refusing anything but a
// regular file and anything over maxFileSize (see procfile.Read).
func readFile(ctx context.Context, path string) ([]byte, error) {
	b, _, err := procfile.Read(ctx, path, maxFileSize)
	if errors.Is(err, procfile.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", err, errMalformed)
	}
	return b, err
}

// memoryUsedPercent returns (MemTotal − MemAvailable) / MemTotal × 100 from
// fs's meminfo.
func memoryUsedPercent(fs procfs.FS) (float64, error) {
	mi, err := fs.Meminfo()
	if err != nil {
		return 0, fmt.Errorf("meminfo: %w", err)
	}
	return usedPercent(mi)
}

// usedPercent checks meminfo's two fields and computes the used share.
func usedPercent(mi procfs.Meminfo) (float64, error) {
	switch {
	case mi.MemTotal == nil:
		return 0, fmt.Errorf("meminfo: no MemTotal: %w", errMalformed)
	case mi.MemAvailable == nil:
		return 0, fmt.Errorf("meminfo: no MemAvailable (kernel older than 3.14?): %w", errMalformed)
	case *mi.MemTotal == 0:
		return 0, fmt.Errorf("meminfo: MemTotal is 0: %w", errMalformed)
	case *mi.MemAvailable > *mi.MemTotal:
		return 0, fmt.Errorf("meminfo: MemAvailable %d kB above MemTotal %d kB: %w",
			*mi.MemAvailable, *mi.MemTotal, errMalformed)
	}
	used := *mi.MemTotal - *mi.MemAvailable
	return float64(used) / float64(*mi.MemTotal) * 100, nil
}

// load15 returns the 15-minute load average from fs's loadavg.
func load15(fs procfs.FS) (float64, error) {
	la, err := fs.LoadAvg()
	if err != nil {
		return 0, fmt.Errorf("loadavg: %w", err)
	}
	// Above 2^22 (the most tasks Linux allows, pid_max's ceiling) no
	// load is true: the platform would refuse the whole reading for it.
	if math.IsNaN(la.Load15) || math.IsInf(la.Load15, 0) || la.Load15 < 0 || la.Load15 > 1<<22 {
		return 0, fmt.Errorf("loadavg: 15-minute load %v: %w", la.Load15, errMalformed)
	}
	return la.Load15, nil
}

// listenCounters returns TcpExt ListenOverflows and ListenDrops from a
// process's (or thread's) net/netstat, which shows the counters of that
// task's network namespace.
func listenCounters(p procfs.Proc) (overflows, drops uint64, err error) {
	ns, err := p.Netstat()
	if err != nil {
		return 0, 0, fmt.Errorf("netstat: %w", err)
	}
	if ns.TcpExt.ListenOverflows == nil || ns.TcpExt.ListenDrops == nil {
		return 0, 0, fmt.Errorf("netstat: no TcpExt ListenOverflows/ListenDrops: %w", errMalformed)
	}
	o, err := counter(*ns.TcpExt.ListenOverflows)
	if err != nil {
		return 0, 0, fmt.Errorf("netstat: ListenOverflows: %w", err)
	}
	d, err := counter(*ns.TcpExt.ListenDrops)
	if err != nil {
		return 0, 0, fmt.Errorf("netstat: ListenDrops: %w", err)
	}
	return o, d, nil
}

// counter converts a counter procfs parsed as a float back to an integer.
func counter(f float64) (uint64, error) {
	if math.IsNaN(f) || f < 0 || f >= math.MaxUint64 || f != math.Trunc(f) {
		return 0, fmt.Errorf("value %v is not a counter: %w", f, errMalformed)
	}
	return uint64(f), nil
}

// ctStatColumns are the columns of /proc/net/stat/nf_conntrack that count
// connections dropped because the table was full, as ctnetlink's Drop,
// EarlyDrop and InsertFailed.
var ctStatColumns = [...]string{"drop", "early_drop", "insert_failed"}

// parseConntrackStat parses /proc/net/stat/nf_conntrack: a header line of
// column names, then one line of hexadecimal counters per CPU. It returns,
// per line, drop + early_drop + insert_failed. A missing "drop" column is
// an error; early_drop and insert_failed count when present.
func parseConntrackStat(r io.Reader) ([]uint64, error) {
	sc := bufio.NewScanner(r)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("nf_conntrack stat: %w", err)
		}
		return nil, fmt.Errorf("nf_conntrack stat: empty: %w", errMalformed)
	}
	header := strings.Fields(sc.Text())
	var cols []int
	for i, name := range header {
		if slices.Contains(ctStatColumns[:], name) {
			cols = append(cols, i)
		}
	}
	if !slices.Contains(header, "drop") {
		return nil, fmt.Errorf("nf_conntrack stat: no drop column in header %q: %w", sc.Text(), errMalformed)
	}
	var sums []uint64
	for line := 2; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != len(header) {
			return nil, fmt.Errorf("nf_conntrack stat: line %d has %d fields, header %d: %w",
				line, len(fields), len(header), errMalformed)
		}
		var sum uint64
		for _, c := range cols {
			v, err := strconv.ParseUint(fields[c], 16, 32)
			if err != nil {
				return nil, fmt.Errorf("nf_conntrack stat: line %d, %s: %w", line, header[c], errMalformed)
			}
			sum += v
		}
		sums = append(sums, sum)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("nf_conntrack stat: %w", err)
	}
	if len(sums) == 0 {
		return nil, fmt.Errorf("nf_conntrack stat: no CPU lines: %w", errMalformed)
	}
	return sums, nil
}

// readUint reads a file holding one unsigned decimal number, as the
// nf_conntrack_count and nf_conntrack_max sysctls.
func readUint(ctx context.Context, path string) (uint64, error) {
	b, err := readFile(ctx, path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a count: %w", path, bytes.TrimSpace(b), errMalformed)
	}
	return v, nil
}

// parseSpeed parses /sys/class/net/IF/speed (Mbit/s). It returns 0, nil
// when the kernel says the speed is unknown (-1, or 0).
func parseSpeed(b []byte) (uint64, error) {
	s := string(bytes.TrimSpace(b))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("speed %q: %w", s, errMalformed)
	}
	if v <= 0 {
		return 0, nil
	}
	return uint64(v), nil
}

// linkSpeed reads a link's speed from sysfs under sysRoot, after checking
// that the sysfs entry is the link netlink reported (same index and
// address): a sysfs mounted in another network namespace may hold a
// different link of the same name. It returns 0 and a reason when the
// speed is unknown.
func linkSpeed(ctx context.Context, sysRoot string, l linkSample) (uint64, string) {
	dir := filepath.Join(sysRoot, "class", "net", l.name)
	idx, err := readUint(ctx, filepath.Join(dir, "ifindex"))
	if err != nil {
		return 0, fmt.Sprintf("no sysfs entry: %v", err)
	}
	if idx != uint64(l.index) {
		return 0, fmt.Sprintf("%s is another link (index %d, not %d): SysRoot is not of this network namespace", dir, idx, l.index)
	}
	if len(l.addr) > 0 {
		b, err := readFile(ctx, filepath.Join(dir, "address"))
		if err == nil && !strings.EqualFold(string(bytes.TrimSpace(b)), hexColon(l.addr)) {
			return 0, fmt.Sprintf("%s is another link (address %s, not %s): SysRoot is not of this network namespace",
				dir, bytes.TrimSpace(b), hexColon(l.addr))
		}
	}
	b, err := readFile(ctx, filepath.Join(dir, "speed"))
	if err != nil {
		// Loopback, ifb, tun and links without carrier give EINVAL.
		return 0, fmt.Sprintf("the kernel does not know it (%v)", err)
	}
	v, err := parseSpeed(b)
	if err != nil {
		return 0, fmt.Sprintf("%s: %v", dir, err)
	}
	if v == 0 {
		return 0, "the kernel does not know it (speed -1)"
	}
	return v, ""
}

// hexColon formats a hardware address as sysfs does ("aa:bb:cc").
func hexColon(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, len(b)*3)
	for i, c := range b {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, digits[c>>4], digits[c&0xf])
	}
	return string(out)
}

// conntrackStatFile reads /proc/net/stat/nf_conntrack as per-CPU drops.
func conntrackStatFile(ctx context.Context, path string) (map[int]uint64, error) {
	b, err := readFile(ctx, path)
	if err != nil {
		return nil, err
	}
	sums, err := parseConntrackStat(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out := make(map[int]uint64, len(sums))
	for i, s := range sums {
		out[i] = s
	}
	return out, nil
}
