package cmdkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestFromEnv(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a := fs.String("listen-addr", "", "")
	b := fs.Duration("dial-timeout", time.Second, "")
	if err := fs.Parse([]string{"-listen-addr", "cli"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"X_LISTEN_ADDR": "env", "X_DIAL_TIMEOUT": "3s"}
	look := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := FromEnv(fs, "X_", look); err != nil {
		t.Fatal(err)
	}
	if *a != "cli" || *b != 3*time.Second {
		t.Fatalf("listen-addr %q dial-timeout %v; want the flag to win and the env to fill in", *a, *b)
	}
	env["X_DIAL_TIMEOUT"] = "soon"
	fs2 := flag.NewFlagSet("x", flag.ContinueOnError)
	fs2.Duration("dial-timeout", time.Second, "")
	_ = fs2.Parse(nil)
	err := FromEnv(fs2, "X_", look)
	if err == nil || !strings.Contains(err.Error(), `X_DIAL_TIMEOUT="soon"`) || !strings.Contains(err.Error(), "want a duration") {
		t.Fatalf("error %v does not name the variable, the value and what is wanted", err)
	}
}

// A flag named version is never read from the environment.
func TestFromEnvLeavesVersion(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	v := fs.Bool("version", false, "")
	_ = fs.Parse(nil)
	look := func(k string) (string, bool) { return map[string]string{"X_VERSION": "true"}[k], k == "X_VERSION" }
	if err := FromEnv(fs, "X_", look); err != nil || *v {
		t.Fatalf("X_VERSION=true: version %v, err %v; want it left alone", *v, err)
	}
}

func TestLoggerDurations(t *testing.T) {
	var b bytes.Buffer
	NewLogger(&b, true, nil).Info("x", "lasted", 90*time.Second, "any", any(2*time.Millisecond))
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["lasted"] != "1m30s" || m["any"] != "2ms" {
		t.Fatalf("logged %s; want durations as strings", b.String())
	}
}

func TestParseLogFlags(t *testing.T) {
	tests := []struct {
		format, level string
		want          slog.Level
		err           string
	}{
		{"text", "info", slog.LevelInfo, ""},
		{"json", "debug", slog.LevelDebug, ""},
		{"json", "WARN", slog.LevelWarn, ""},
		{"logfmt", "info", 0, `-log-format "logfmt": want text or json`},
		{"text", "loud", 0, `-log-level "loud": want debug, info, warn or error`},
	}
	for _, tt := range tests {
		got, err := ParseLogFlags(tt.format, tt.level)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("ParseLogFlags(%q, %q) = %v, want %q", tt.format, tt.level, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseLogFlags(%q, %q) = %v, %v; want %v", tt.format, tt.level, got, err, tt.want)
		}
	}
}

func TestParseEnvOrigins(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("node", "", "")
	fs.String("listen", "", "")
	fs.String("state-dir", "", "")
	if err := fs.Parse([]string{"-node", "n1"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"X_LISTEN": ":1", "X_NODE": "ignored"}
	o, err := ParseEnv(fs, "X_", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if !o.Given("node") || o.FromEnv("node") || !o.FromEnv("listen") || o.Given("state-dir") {
		t.Fatalf("origins %+v: want node from the command line, listen from the environment, state-dir not given", o)
	}
	if got := o.Name("listen"); got != "X_LISTEN (-listen)" {
		t.Errorf("Name(listen) = %q", got)
	}
	if got := o.Errorf("node", "a b", "want %s", "letters").Error(); got != `-node "a b": want letters` {
		t.Errorf("Errorf = %q", got)
	}
	if got := o.Errorf("listen", 3, "no").Error(); got != `X_LISTEN (-listen) 3: no` {
		t.Errorf("Errorf = %q", got)
	}
}

func TestSwallowed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("node", "", "")
	fs.Bool("once", false, "")
	if err := fs.Parse([]string{"-node", "-once"}); err != nil {
		t.Fatal(err)
	}
	if err := Swallowed(fs); err == nil || err.Error() != `-node "-once": a value is missing (-once is a flag)` {
		t.Fatalf("Swallowed = %v", err)
	}
	fs2 := flag.NewFlagSet("x", flag.ContinueOnError)
	fs2.String("node", "", "")
	if err := fs2.Parse([]string{"-node", "-n1"}); err != nil {
		t.Fatal(err)
	}
	if err := Swallowed(fs2); err != nil {
		t.Fatalf("Swallowed of a value that is no flag = %v", err)
	}
}

func TestProbe(t *testing.T) {
	var fail error
	h := Probe(func() error { return fail })
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Fatalf("healthy: %d %q", rec.Code, rec.Body.String())
	}
	fail = errors.New("no reading for 2m")
	rec = httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 503 || rec.Body.String() != "no reading for 2m\n" {
		t.Fatalf("unhealthy: %d %q", rec.Code, rec.Body.String())
	}
}

func TestParseError(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Duration("interval", time.Second, "")
	fs.Int("queue-max", 1, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-interval", "soon"}, `invalid value "soon" for flag -interval: parse error (want a duration such as 30s or 1m30s)`},
		{[]string{"-queue-max", "many"}, `invalid value "many" for flag -queue-max: parse error (want an integer)`},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
	} {
		err := fs.Parse(tt.args)
		if got := ParseError(fs, err).Error(); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.args, got, tt.want)
		}
	}
}

// TestNewFlagSet: a bad flag is an error for the command to print, and
// the flag set prints nothing of its own.
func TestNewFlagSet(t *testing.T) {
	fs := NewFlagSet("cmd")
	fs.Int("n", 0, "a number")
	if err := fs.Parse([]string{"-n", "x"}); err == nil {
		t.Fatal("-n x parsed")
	}
	if err := fs.Parse([]string{"-nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("-nope: %v, want an error naming the flag", err)
	}
	var ue error = UsageError{Msg: "-n x: want a number"}
	if ue.Error() != "-n x: want a number" {
		t.Errorf("UsageError says %q", ue.Error())
	}
}

// TestParse: a positional argument is a UsageError, and done (-version)
// stops before the environment is read.
func TestParse(t *testing.T) {
	newFS := func() (*flag.FlagSet, *bool, *int) {
		fs := NewFlagSet("cmd")
		return fs, fs.Bool("version", false, ""), fs.Int("n", 1, "")
	}
	env := func(string) (string, bool) { return "x", true } // every value bad
	fs, _, _ := newFS()
	if _, err := Parse(fs, []string{"extra"}, "CMD_", env, nil); !errors.As(err, new(UsageError)) {
		t.Errorf("a positional argument: %v, want a UsageError", err)
	}
	fs, version, _ := newFS()
	if _, err := Parse(fs, []string{"-version"}, "CMD_", env, func() bool { return *version }); err != nil {
		t.Errorf("-version read the environment: %v", err)
	}
	fs, _, _ = newFS()
	if _, err := Parse(fs, nil, "CMD_", env, nil); !errors.As(err, new(UsageError)) {
		t.Errorf("CMD_N=x: %v, want a UsageError", err)
	}
}
