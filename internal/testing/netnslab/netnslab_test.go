package netnslab

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("NK_NETNSLAB_HOLD") != "" {
		os.Exit(Hold(3, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestHolder: a holder process (this test binary re-executed) says ready
// once its connections are up and exits cleanly on Stop.
func TestHolder(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "NK_NETNSLAB_HOLD=1")
	h, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitReady(); err != nil {
		h.Stop()
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := h.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestHoldRejectsCount(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Hold(0, strings.NewReader(""), &out, &errOut); code != 2 || out.Len() != 0 || errOut.Len() == 0 {
		t.Fatalf("Hold(0) = %d, out %q, err %q; want 2, nothing, a reason", code, out.String(), errOut.String())
	}
}

func TestHoldInProcess(t *testing.T) {
	stopR, stopW := io.Pipe()
	outR, outW := io.Pipe()
	var errOut bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- Hold(4, stopR, outW, &errOut) }()
	line := make([]byte, len("ready\n"))
	if _, err := io.ReadFull(outR, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("Hold said %q, %v", line, err)
	}
	stopW.Close()
	if c := <-code; c != 0 {
		t.Fatalf("Hold = %d: %s", c, errOut.String())
	}
}
