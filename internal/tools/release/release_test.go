package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/deploytest"
)

func TestDebVersion(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"v0.5.0", "0.5.0"},
		{"v0.5.0-3-gabc1234", "0.5.0+3.gabc1234"},
		{"v0.5.0-3-gabc1234-dirty", "0.5.0+3.gabc1234.dirty"},
		{"v0.5.0-dirty", "0.5.0+dirty"},
		{"v0.5.0-rc.1", "0.5.0~rc.1"},
		{"v0.5.0-rc.1-2-gabc1234", "0.5.0~rc.1+2.gabc1234"},
		{"v0.0.0-20261203091000-3f1d395abcde", "0.0.0+20261203091000.3f1d395abcde"},
		{"v0.0.0-20261203091000-3f1d395abcde-dirty", "0.0.0+20261203091000.3f1d395abcde.dirty"},
	} {
		if got := debVersion(c.in); got != c.want {
			t.Errorf("debVersion(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestDebVersionOrder: dpkg orders the versions as Go does.
func TestDebVersionOrder(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("skipping: no dpkg")
	}
	order := []string{"v0.0.0-20261203091000-3f1d395abcde", "v0.5.0-rc.1", "v0.5.0-rc.1-2-gabc1234", "v0.5.0", "v0.5.0-3-gabc1234", "v0.5.1"}
	for i := 1; i < len(order); i++ {
		a, b := debVersion(order[i-1]), debVersion(order[i])
		if err := exec.Command("dpkg", "--compare-versions", a, "lt", b).Run(); err != nil {
			t.Errorf("dpkg orders %s (from %s) not before %s (from %s)", a, order[i-1], b, order[i])
		}
	}
}

func TestArArchive(t *testing.T) {
	got := arArchive(time.Unix(1700000000, 0), [2][]byte{[]byte("debian-binary"), []byte("2.0\n")}, [2][]byte{[]byte("odd"), []byte("x")})
	want := "!<arch>\n" +
		"debian-binary   1700000000  0     0     100644  4         `\n2.0\n" +
		"odd             1700000000  0     0     100644  1         `\nx\n"
	if string(got) != want {
		t.Errorf("arArchive:\n%q\nwant\n%q", got, want)
	}
}

func TestWithDirs(t *testing.T) {
	var got []string
	for _, e := range withDirs([]entry{{path: "usr/bin/x"}, {path: "etc/x/"}, {path: "usr/share/doc/x/copyright"}}, true) {
		got = append(got, e.path)
	}
	slices.Sort(got)
	want := []string{"", "etc/", "etc/x/", "usr/", "usr/bin/", "usr/bin/x", "usr/share/", "usr/share/doc/", "usr/share/doc/x/", "usr/share/doc/x/copyright"}
	if !slices.Equal(got, want) {
		t.Errorf("withDirs = %q, want %q", got, want)
	}
}

// TestRelease runs the release twice, as `go run ./internal/tools/release
// -out DIR` does, and checks that the two give the same bytes, that
// SHA256SUMS holds, that each .deb is what dpkg-deb (and lintian, where
// installed) reads as a package with the binary, its units and its
// conffile, and that each tarball's binary prints the version its file
// is named with.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: builds every binary for two architectures twice")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("skipping: no git")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root := "../../.."
	if err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Run(); err != nil {
		t.Skipf("skipping: not in a git checkout: %v", err)
	}
	// The command, as the acceptance check runs it, built once: in this
	// test's process the archives' compression would run under -race,
	// ten times slower.
	tool := filepath.Join(t.TempDir(), "release")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dirs := [2]string{t.TempDir(), t.TempDir()}
	var names [2][]string
	for i, dir := range dirs {
		start := time.Now()
		cmd := exec.CommandContext(ctx, tool, "-out", dir)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("release -out %s: %v\n%s", dir, err, stderr.Bytes())
		}
		for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
			names[i] = append(names[i], filepath.Base(l))
		}
		t.Logf("release %d: %d files in %v", i+1, len(names[i]), time.Since(start).Round(time.Second))
	}
	if !slices.Equal(names[0], names[1]) {
		t.Fatalf("the two runs wrote different files:\n%q\n%q", names[0], names[1])
	}
	if len(names[0]) != 3*2*2+1 {
		t.Errorf("%d files, want a tarball and a .deb of 3 binaries for 2 architectures and SHA256SUMS: %q", len(names[0]), names[0])
	}
	for _, n := range names[0] {
		a, _ := os.ReadFile(filepath.Join(dirs[0], n))
		b, _ := os.ReadFile(filepath.Join(dirs[1], n))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: %d and %d bytes, not the same bytes in two runs", n, len(a), len(b))
		}
	}
	checkSums(t, dirs[0], names[0])

	b, err := readBuild(ctx, root, "")
	if err != nil {
		t.Fatal(err)
	}
	var debs []string
	for _, bin := range binaries {
		for _, arch := range []string{"amd64", "arm64"} {
			deb := filepath.Join(dirs[0], debName(bin.name, b.version, arch))
			if arch == "amd64" {
				debs = append(debs, deb)
			}
			t.Run(bin.name+"/"+arch, func(t *testing.T) {
				tgz := filepath.Join(dirs[0], tarballName(bin.name, b.version, arch))
				checkTarball(t, tgz, bin, arch, b.version)
				checkDeb(t, deb, bin, arch, b.version)
			})
		}
	}
	lintian(t, debs)
}

// lintian runs lintian over the packages (one run: it takes a minute to
// start on a loaded machine) and fails t on an error; warnings are
// logged. It does nothing where lintian is not installed.
func lintian(t *testing.T, debs []string) {
	t.Helper()
	if _, err := exec.LookPath("lintian"); err != nil {
		t.Log("no lintian: the packages are not linted")
		return
	}
	// Run as an operator would, with nothing suppressed: a static Go
	// binary is the packages' own override. A missing or broken man page
	// (made of -help) fails too.
	out, _ := exec.Command("lintian", append([]string{"--tag-display-limit", "0"}, debs...)...).CombinedOutput()
	for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(l, "E: "), strings.Contains(l, "manual-page"), strings.Contains(l, "manpage"):
			t.Errorf("lintian: %s", l)
		case strings.HasPrefix(l, "W: "):
			t.Logf("lintian: %s", l)
		}
	}
}

// checkSums checks SHA256SUMS against the files, and that it names each.
func checkSums(t *testing.T, dir string, names []string) {
	t.Helper()
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(l, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: line %q: want HASH  NAME", l)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
			t.Errorf("SHA256SUMS: %s: %s, the file's is %x", name, sum, h)
		}
		listed = append(listed, name)
	}
	if want := names[:len(names)-1]; !slices.Equal(listed, want) {
		t.Errorf("SHA256SUMS lists %q, want %q", listed, want)
	}
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "-c", "SHA256SUMS")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
		}
	}
}

// checkTarball checks the tarball's files and runs its binary's
// -version (an arm64 one under qemu-aarch64 where it is installed).
func checkTarball(t *testing.T, tgz string, bin binary, arch, version string) {
	t.Helper()
	zh, entries := deploytest.Tarball(t, tgz)
	if !zh.ModTime.IsZero() || zh.Name != "" {
		t.Errorf("gzip header records time %v, name %q", zh.ModTime, zh.Name)
	}
	dir := strings.TrimSuffix(filepath.Base(tgz), ".tar.gz") + "/"
	files := map[string][]byte{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name, dir) || e.Uid != 0 || e.Gid != 0 {
			t.Errorf("%s: entry %s (uid %d gid %d): want everything under %s, owned by 0:0", tgz, e.Name, e.Uid, e.Gid, dir)
		}
		files[strings.TrimPrefix(e.Name, dir)] = e.Body
	}
	want := append([]string{bin.name, "LICENSE", "README.md", bin.name + ".default"}, bin.units...)
	for _, w := range want {
		if _, ok := files[w]; !ok {
			t.Errorf("%s lacks %s", filepath.Base(tgz), w)
		}
	}
	exe := filepath.Join(t.TempDir(), bin.name)
	if err := os.WriteFile(exe, files[bin.name], 0o755); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	switch {
	case arch == runtime.GOARCH:
		cmd = exec.Command(exe, "-version")
	case arch == "arm64":
		if _, err := exec.LookPath("qemu-aarch64"); err != nil {
			t.Log("no qemu-aarch64: the arm64 binary is not run")
			return
		}
		cmd = exec.Command("qemu-aarch64", exe, "-version")
	default:
		return
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -version: %v\n%s", bin.name, err, out)
	}
	if !strings.HasPrefix(string(out), bin.name+" "+version+" (commit ") {
		t.Errorf("%s -version prints %q, want its name and the version %s its file is named with", bin.name, out, version)
	}
}

// checkDeb reads the package with dpkg-deb: its fields, its files and
// conffiles; and runs lintian where installed.
func checkDeb(t *testing.T, deb string, bin binary, arch, version string) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Log("no dpkg-deb: the .deb is not read")
		return
	}
	field := func(name string) string {
		out, err := exec.Command("dpkg-deb", "--field", deb, name).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg-deb --field %s: %v\n%s", name, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := field("Package"); got != bin.name {
		t.Errorf("Package: %s, want %s", got, bin.name)
	}
	if got := field("Version"); got != debVersion(version) {
		t.Errorf("Version: %s, want %s", got, debVersion(version))
	}
	if got := field("Architecture"); got != debArch[arch] {
		t.Errorf("Architecture: %s, want %s", got, debArch[arch])
	}
	if out, err := exec.Command("dpkg-deb", "--info", deb).CombinedOutput(); err != nil {
		t.Errorf("dpkg-deb --info: %v\n%s", err, out)
	}
	out, err := exec.Command("dpkg-deb", "--contents", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg-deb --contents: %v\n%s", err, out)
	}
	want := []string{"./usr/bin/" + bin.name, "./etc/default/" + bin.name,
		"./usr/share/doc/" + bin.name + "/changelog.gz", "./usr/share/doc/" + bin.name + "/copyright",
		"./usr/share/man/man8/" + bin.name + ".8.gz"}
	for _, u := range bin.units {
		want = append(want, "./lib/systemd/system/"+u)
	}
	for _, w := range want {
		if !strings.Contains(string(out), " "+w+"\n") {
			t.Errorf("dpkg-deb --contents lacks %s:\n%s", w, out)
		}
	}
	ctl := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "--control", deb, ctl).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --control: %v\n%s", err, out)
	}
	conf, _ := os.ReadFile(filepath.Join(ctl, "conffiles"))
	if !slices.Contains(strings.Fields(string(conf)), "/etc/default/"+bin.name) {
		t.Errorf("conffiles %q lacks /etc/default/%s", conf, bin.name)
	}
	data := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "--extract", deb, data).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --extract: %v\n%s", err, out)
	}
	for _, u := range bin.units {
		text, _ := os.ReadFile(filepath.Join(data, "lib/systemd/system", u))
		if strings.Contains(string(text), "/usr/local/bin") {
			t.Errorf("%s in the package still names /usr/local/bin", u)
		}
	}
	postinst, _ := os.ReadFile(filepath.Join(ctl, "postinst"))
	// Each service runs as a system user of its own, never root.
	if !strings.Contains(string(postinst), "adduser --system --group --no-create-home --home /nonexistent --quiet "+bin.name+"\n") {
		t.Errorf("postinst makes no system user %s:\n%s", bin.name, postinst)
	}
	for l := range strings.SplitSeq(string(postinst), "\n") {
		l = strings.TrimSpace(l)
		// try-restart and a signal act only on a unit already running.
		for _, starts := range []string{"systemctl enable", "systemctl start", "systemctl restart",
			"deb-systemd-helper enable", "deb-systemd-invoke start", "deb-systemd-invoke restart"} {
			if strings.HasPrefix(l, starts) {
				t.Errorf("postinst starts or enables a unit before the operator configured it: %s", l)
			}
		}
	}
}
