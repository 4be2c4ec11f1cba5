// Package dockerlab gives tests a real Docker daemon and images built
// without a registry: the host's daemon when one answers, else a dockerd
// the test starts in a temporary directory, and FROM scratch images of a
// static (CGO_ENABLED=0) binary with a shipped Dockerfile's final stage.
//
//	d := dockerlab.Start(t) // skips t, with the reason, when no dockerd can run
//	stage := dockerlab.FinalStage(t, "pinproxy.Dockerfile", text)
//	image := d.BuildScratch(t, ".", "pinproxy", "/usr/local/bin/pinproxy", nil, stage)
//	d.Run("run", "-d", "--network", "host", image)
//
// A daemon the test starts has no bridge and no iptables rules, so
// containers run with --network host (or another container's network).
package dockerlab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proofkit/nodekit/internal/testing/testkit"
)

// Daemon is a Docker daemon a test talks to through the docker CLI.
type Daemon struct {
	t    testing.TB
	Host string // DOCKER_HOST, e.g. unix:///tmp/nk-dockerd-1/docker.sock
}

// Command returns docker with args, talking to d.
func (d *Daemon) Command(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, "docker", args...)
	c.Env = append(os.Environ(), "DOCKER_HOST="+d.Host)
	return c
}

// Run runs docker with args within two minutes and returns its output,
// failing the test on an error.
func (d *Daemon) Run(args ...string) string {
	d.t.Helper()
	out, err := d.Try(args...)
	if err != nil {
		d.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Try runs docker with args within two minutes and returns its combined
// output and error.
func (d *Daemon) Try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := d.Command(ctx, args...).CombinedOutput()
	return string(out), err
}

// Start returns a running daemon: $DOCKER_HOST's or /var/run/docker.sock's
// if one answers, else one it starts with its own data root, exec root,
// pid file and socket in a temporary directory (no bridge, no iptables
// rules, the vfs storage driver), stopped at the end of the test. It
// skips t, with a one-line reason, when it is not root, the docker tools
// are missing, or no daemon can run.
func Start(t testing.TB, tools ...string) *Daemon {
	t.Helper()
	testkit.NeedRoot(t, append([]string{"docker", "dockerd"}, tools...)...)
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		d := &Daemon{t: t, Host: h}
		if _, err := d.Try("info"); err == nil {
			return d
		}
	}
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		d := &Daemon{t: t, Host: "unix:///var/run/docker.sock"}
		if _, err := d.Try("info"); err == nil {
			return d
		}
	}
	// Short: a unix socket's path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "nk-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAll(dir) })
	sock := filepath.Join(dir, "docker.sock")
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("dockerd",
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "dockerd.pid"), "-H", "unix://"+sock,
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--storage-driver=vfs")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Skipf("skipping: dockerd does not start: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	d := &Daemon{t: t, Host: "unix://" + sock}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := d.Try("info"); err == nil {
			return d
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logf.Name())
			t.Skipf("skipping: dockerd exited at start: %s", lastLine(string(b)))
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Skipf("skipping: dockerd did not answer within 60 s: %s", lastLine(string(b)))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// removeAll removes dir after lazily unmounting what dockerd left
// mounted below it (its exec root's netns/default, a nsfs mount that
// outlives the daemon and would keep the directory).
func removeAll(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mounts []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	// Deepest first.
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	for _, m := range mounts {
		exec.Command("umount", "-l", m).Run()
	}
	os.RemoveAll(dir)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// FinalStage returns a Dockerfile's final stage without its FROM and COPY
// lines, comments and blank lines (continuations joined): the EXPOSE,
// STOPSIGNAL, HEALTHCHECK, ENTRYPOINT… a test image built FROM scratch
// must share with it. name is the file's name for errors; it fails t when
// the stage has no ENTRYPOINT.
func FinalStage(t testing.TB, name, text string) []string {
	t.Helper()
	text = strings.ReplaceAll(text, "\\\n", " ")
	var stage []string
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "FROM "):
			stage = nil
		case line == "", strings.HasPrefix(line, "#"), strings.HasPrefix(line, "COPY "):
		default:
			stage = append(stage, line)
		}
	}
	if !HasInstruction(stage, "ENTRYPOINT") {
		t.Fatalf("%s: the final stage has no ENTRYPOINT: %q", name, stage)
	}
	return stage
}

// HasInstruction reports whether a stage from FinalStage holds the
// instruction (e.g. "HEALTHCHECK").
func HasInstruction(stage []string, instruction string) bool {
	for _, l := range stage {
		if strings.HasPrefix(l, instruction+" ") {
			return true
		}
	}
	return false
}

// BuildScratch builds the Go package in pkgDir as a static binary
// (CGO_ENABLED=0, -trimpath) and an image of it FROM scratch, with the
// binary at binPath, each of files (image path → host file) copied in,
// and the stage's lines after them. It returns the image's tag, removed
// at the end of the test.
func (d *Daemon) BuildScratch(t testing.TB, pkgDir, name, binPath string, files map[string]string, stage []string) string {
	t.Helper()
	ctxDir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(ctxDir, name), ".")
	build.Dir = pkgDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build of %s: %v\n%s", pkgDir, err, out)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FROM scratch\nCOPY %s %s\n", name, binPath)
	i := 0
	for dst, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		f := fmt.Sprintf("file%d", i)
		i++
		if err := os.WriteFile(filepath.Join(ctxDir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "COPY %s %s\n", f, dst)
	}
	b.WriteString(strings.Join(stage, "\n") + "\n")
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	image := fmt.Sprintf("nk-%s:%d", name, os.Getpid())
	d.Run("build", "-q", "-t", image, ctxDir)
	t.Cleanup(func() { d.Try("rmi", "-f", image) })
	return image
}
