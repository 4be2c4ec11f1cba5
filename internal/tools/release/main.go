// Command release builds nodekit's release files from the commit checked
// out: for linux/amd64 and linux/arm64, a tarball and a Debian package of
// each binary (proofkit-agent, pinproxy, and the reference platform as
// proofkit-platform), and SHA256SUMS over all of them.
//
// From the module root:
//
//	go run ./internal/tools/release -out dist
//
// writes, for version v0.5.0 on amd64:
//
//	pinproxy-v0.5.0-linux-amd64.tar.gz   the binary, LICENSE, README.md, the systemd
//	                                     units, the /etc/default file, a FROM scratch Dockerfile
//	pinproxy_0.5.0_amd64.deb             /usr/bin/pinproxy, its units under
//	                                     /lib/systemd/system, /etc/default/pinproxy,
//	                                     pinproxy(8) made of its -help
//	SHA256SUMS                           sha256sum -c SHA256SUMS checks them
//
// The version is `git describe --tags --match 'v[0-9]*'`'s, or with no
// such tag a Go pseudo-version (v0.0.0-20261203091000-3f1d395abcde) from
// the commit; a tree with uncommitted changes adds -dirty. It is stamped
// into each binary (internal/buildinfo, so -version prints it) and names
// the tarballs; a package's version is the Debian form of it: v dropped,
// "-N-gHASH" after a tag as "+N.gHASH", a pseudo-version's "-" as "+",
// any other "-" (a pre-release, v0.5.0-rc.1) as "~", so dpkg orders them
// as Go does.
//
// The same commit built with the same Go release (each binary's -version
// names it) gives the same bytes: the binaries are built with
// -trimpath, without VCS stamping (the commit is given by -X) or build
// ID, cgo off; every archive's entries are sorted, owned by root (0:0),
// dated at the commit's time, and gzip records no name or time.
//
// A package installs the binary, its units and its settings file (a
// conffile under /etc/default holding what an operator must give), makes
// the system user its unit runs as, and starts nothing: the operator
// edits the settings and runs systemctl enable --now. On an upgrade a
// running service is carried over: pinproxy with its in-place upgrade
// (SIGUSR2: no connection is closed), the others restarted.
//
// Flags: -out DIR (required), -version (instead of git's), -arch (a comma
// list, default amd64,arm64), -bin (a comma list of binaries, default
// all).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("release: ")
	var c config
	var arch, bins string
	flag.StringVar(&c.Out, "out", "", "directory to write the release files to (required)")
	flag.StringVar(&c.Version, "version", "", "version to stamp and name the files with (default: from git describe)")
	flag.StringVar(&arch, "arch", "amd64,arm64", "Linux architectures, a comma list")
	flag.StringVar(&bins, "bin", "", "binaries to release, a comma list (default: all)")
	flag.Parse()
	if c.Out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	c.Arches = strings.Split(arch, ",")
	if bins != "" {
		c.Binaries = strings.Split(bins, ",")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	files, err := release(ctx, c)
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range files {
		fmt.Println(filepath.Join(c.Out, f))
	}
}

// config is one run's settings; Root "" is the working directory, which
// must be the module's root.
type config struct {
	Out      string
	Version  string   // "" means git's
	Arches   []string // GOARCH values
	Binaries []string // names from binaries; nil means all
	Root     string
}

// A binary is what the release ships of one command.
type binary struct {
	name        string // as installed: /usr/bin/NAME
	pkg         string // the main package
	description string // the package's one-line summary, then its text
	units       []string
	etc         map[string]string // conffile path → file in examples/deploy (/etc/default/NAME is added)
	etcDirs     []string          // directories postinst makes 0700, the user's, for the operator's secrets
	user        string            // the system user postinst makes; "" runs as root
	groupDir    string            // a directory of etcDirs root keeps and the user's group may read (0750)
	// upgrade is the postinst's command for a service running during an
	// upgrade.
	upgrade string
	// next is what postinst tells the operator after the first install.
	next string
}

// binaries are the release's, in order.
var binaries = []binary{
	{
		name: "proofkit-agent", pkg: "./cmd/proofkit-agent",
		description: "ProofKit node agent: overload readings, kernel sizing, /metrics\n" +
			"Tells the ProofKit platform when a node is overloaded, by the platform's\n" +
			"own rule; raises the kernel's connection table, buffers and backlogs to\n" +
			"fit the machine's memory.",
		units:   []string{"proofkit-agent.service"},
		etcDirs: []string{"/etc/proofkit-agent"},
		// Not root: the unit gives it CAP_NET_ADMIN, enough to size the
		// kernel's net.* keys at every start and read conntrack's
		// statistics. Its directory in /etc is its own: the token is read
		// there, the sysctl file written there.
		user:    "proofkit-agent",
		upgrade: "deb-systemd-invoke try-restart proofkit-agent.service",
		next: "proofkit-agent: set PROOFKIT_AGENT_REPORT_URL in /etc/default/proofkit-agent and the token in\n" +
			"/etc/proofkit-agent/token (mode 0600, owned by proofkit-agent), then: systemctl enable --now proofkit-agent",
	},
	{
		name: "pinproxy", pkg: "./cmd/pinproxy",
		description: "TCP proxy for long-lived connections, upgraded without closing one\n" +
			"Sends each connection to the least-used upstream, moves one back to an\n" +
			"upstream that answers again, and hands every connection to a new binary\n" +
			"on an upgrade.",
		units: []string{"pinproxy.service", "pinproxy.socket"},
		etc:   map[string]string{"/etc/pinproxy/upstreams": "pinproxy-upstreams"},
		user:  "pinproxy",
		// The new binary takes the listener and every connection. "--"
		// ends deb-systemd-invoke's own options; it passes kill on to
		// systemctl once policy-rc.d allows it. A proxy not running has
		// no main process to signal: nothing to hand over.
		upgrade: "deb-systemd-invoke -- kill --kill-whom=main --signal=USR2 pinproxy.service 2>/dev/null",
		next:    "pinproxy: set the upstreams in /etc/pinproxy/upstreams, then: systemctl enable --now pinproxy",
	},
	{
		name: "proofkit-platform", pkg: "./examples/platform",
		description: "ProofKit reference platform: agents' reports, admission, routes\n" +
			"Applies the overload, routing and pricing rules to agents' reports, on\n" +
			"files or PostgreSQL. An example, not a production control plane.",
		units:    []string{"proofkit-platform.service"},
		etcDirs:  []string{"/etc/proofkit-platform"},
		user:     "proofkit-platform",
		groupDir: "/etc/proofkit-platform",
		upgrade:  "deb-systemd-invoke try-restart proofkit-platform.service",
		next: "proofkit-platform: write /etc/proofkit-platform/tokens (mode 0640, group proofkit-platform) and set PLATFORM_FLAGS in\n" +
			"/etc/default/proofkit-platform, then: systemctl enable --now proofkit-platform",
	},
}

// A build is what one run stamps into every file.
type build struct {
	version string
	commit  string
	date    time.Time // the commit's: every archive entry's mtime
	dirty   bool
}

// release writes the release files into c.Out and returns their names,
// SHA256SUMS last.
func release(ctx context.Context, c config) ([]string, error) {
	root := c.Root
	if root == "" {
		root = "."
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return nil, fmt.Errorf("run from the module's root: %w", err)
	}
	bins := binaries
	if c.Binaries != nil {
		bins = nil
		for _, n := range c.Binaries {
			i := slices.IndexFunc(binaries, func(b binary) bool { return b.name == n })
			if i < 0 {
				return nil, fmt.Errorf("-bin %s: not one of proofkit-agent, pinproxy, proofkit-platform", n)
			}
			bins = append(bins, binaries[i])
		}
	}
	for _, a := range c.Arches {
		if _, ok := debArch[a]; !ok {
			return nil, fmt.Errorf("-arch %s: want amd64 or arm64", a)
		}
	}
	b, err := readBuild(ctx, root, c.Version)
	if err != nil {
		return nil, err
	}
	if b.dirty {
		log.Printf("the tree has uncommitted changes: %s; its files are not the commit's", b.version)
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "nodekit-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var names []string
	for _, bin := range bins {
		man, err := binManPage(ctx, root, bin, b, filepath.Join(tmp, runtime.GOARCH, bin.name))
		if err != nil {
			return nil, err
		}
		for _, arch := range c.Arches {
			exe := filepath.Join(tmp, arch, bin.name)
			if !fileExists(exe) {
				if err := goBuild(ctx, root, bin.pkg, arch, b, exe); err != nil {
					return nil, err
				}
			}
			body, err := os.ReadFile(exe)
			if err != nil {
				return nil, err
			}
			tgz, err := tarball(root, bin, arch, b, body)
			if err != nil {
				return nil, err
			}
			deb, err := debPackage(root, bin, arch, b, body, man)
			if err != nil {
				return nil, err
			}
			for name, data := range map[string][]byte{tarballName(bin.name, b.version, arch): tgz, debName(bin.name, b.version, arch): deb} {
				if err := os.WriteFile(filepath.Join(c.Out, name), data, 0o644); err != nil {
					return nil, err
				}
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	var sums strings.Builder
	for _, n := range names {
		f, err := os.Open(filepath.Join(c.Out, n))
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), n)
	}
	if err := os.WriteFile(filepath.Join(c.Out, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		return nil, err
	}
	return append(names, "SHA256SUMS"), nil
}

// binManPage builds bin for this machine into exe (where the release of
// that architecture finds it), runs its -help and returns the gzipped
// manual page made of it.
func binManPage(ctx context.Context, root string, bin binary, b build, exe string) ([]byte, error) {
	if err := goBuild(ctx, root, bin.pkg, runtime.GOARCH, b, exe); err != nil {
		return nil, err
	}
	help, err := helpText(ctx, exe)
	if err != nil {
		return nil, err
	}
	page, err := manPage(bin, help, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin.name, err)
	}
	return gzipped(page)
}

// tarballName is NAME-VERSION-linux-ARCH.tar.gz.
func tarballName(name, version, arch string) string {
	return fmt.Sprintf("%s-%s-linux-%s.tar.gz", name, version, arch)
}

// debName is NAME_DEBVERSION_DEBARCH.deb, as dpkg-name names it.
func debName(name, version, arch string) string {
	return fmt.Sprintf("%s_%s_%s.deb", name, debVersion(version), debArch[arch])
}

// readBuild asks git for the commit, its time, and the version unless
// one is given.
func readBuild(ctx context.Context, root, version string) (build, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
			}
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	var b build
	var err error
	if b.commit, err = git("rev-parse", "HEAD"); err != nil {
		return b, err
	}
	ct, err := git("log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return b, err
	}
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return b, fmt.Errorf("git log: commit time %q: %w", ct, err)
	}
	b.date = time.Unix(sec, 0).UTC()
	status, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return b, err
	}
	b.dirty = status != ""
	b.version = version
	if b.version == "" {
		b.version, err = git("describe", "--tags", "--match", "v[0-9]*", "--dirty")
		if err != nil {
			// No tag: a Go pseudo-version of the commit.
			b.version = fmt.Sprintf("v0.0.0-%s-%s", b.date.Format("20060102150405"), b.commit[:12])
			if b.dirty {
				b.version += "-dirty"
			}
		}
	}
	if !validVersion.MatchString(b.version) {
		return b, fmt.Errorf("version %q: want v and digits, dots and dashes (v0.5.0, v0.5.0-rc.1)", b.version)
	}
	return b, nil
}

var validVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+([-.+][0-9A-Za-z.+-]*)?$`)

var (
	describeSuffix = regexp.MustCompile(`-([0-9]+)-g([0-9a-f]+)(-dirty)?$`)
	pseudoVersion  = regexp.MustCompile(`^(v[0-9]+\.[0-9]+\.[0-9]+)-([0-9]{14})-([0-9a-f]{12})(-dirty)?$`)
)

// debVersion is version as dpkg orders it: v0.5.0 → 0.5.0,
// v0.5.0-3-gabc1234 → 0.5.0+3.gabc1234, v0.5.0-rc.1 → 0.5.0~rc.1,
// v0.0.0-20261203091000-3f1d395abcde → 0.0.0+20261203091000.3f1d395abcde.
func debVersion(version string) string {
	v := strings.TrimPrefix(version, "v")
	if m := pseudoVersion.FindStringSubmatch(version); m != nil {
		v = strings.TrimPrefix(m[1], "v") + "+" + m[2] + "." + m[3]
		if m[4] != "" {
			v += ".dirty"
		}
		return v
	}
	suffix := ""
	if m := describeSuffix.FindStringSubmatchIndex(v); m != nil {
		suffix = "+" + v[m[2]:m[3]] + ".g" + v[m[4]:m[5]]
		if m[6] >= 0 {
			suffix += ".dirty"
		}
		v = v[:m[0]]
	} else if base, ok := strings.CutSuffix(v, "-dirty"); ok {
		v, suffix = base, "+dirty"
	}
	return strings.ReplaceAll(v, "-", "~") + suffix
}

// debArch maps GOARCH to Debian's architecture names.
var debArch = map[string]string{"amd64": "amd64", "arm64": "arm64"}

// goBuild builds pkg for linux/arch into out, stamped with b.
func goBuild(ctx context.Context, root, pkg, arch string, b build, out string) error {
	const p = "github.com/proofkit/nodekit/internal/buildinfo"
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s.version=%s -X %s.commit=%s", p, b.version, p, b.commit)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-mod=readonly",
		"-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for linux/%s: %w\n%s", pkg, arch, err, out)
	}
	return nil
}
