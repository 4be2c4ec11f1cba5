// Package cmdkit holds what nodekit's two binaries do the same way:
// flags read also from the environment under one prefix per binary, and
// where each value came from (ParseEnv, Origins); one wording for an
// error about a flag (Origins.Errorf); the swallowed-value check
// (Swallowed); the log handler both use (durations as "1m30s", never
// nanoseconds); one HTTP server with one set of timeouts (NewServer); and
// the /healthz and /readyz handlers (Probe, which package agent's Handler
// serves too).
package cmdkit

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// EnvName is the environment variable for a flag: EnvName("PINPROXY_",
// "dial-timeout") is "PINPROXY_DIAL_TIMEOUT".
func EnvName(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// FromEnv sets every flag of fs not given on the command line from the
// environment variable EnvName(prefix, name), if it is set. fs must have
// been parsed. The error names the variable and its value.
//
// A flag named "version" is never read from the environment: deployments
// often name the release to run in PREFIX_VERSION, and read as -version
// it would make a service print a line and exit 0 (or fail to parse
// "v0.5.0") instead of running.
func FromEnv(fs *flag.FlagSet, prefix string, lookupEnv func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || f.Name == "version" || err != nil {
			return
		}
		name := EnvName(prefix, f.Name)
		if v, ok := lookupEnv(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w%s", name, v, serr, want(f))
			}
		}
	})
	return err
}

// want says what kind of value f takes, for an error: the flag package's
// own ("parse error") does not.
func want(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return " (want a duration such as 30s or 1m30s)"
	case bool:
		return " (want true or false)"
	case int, int64:
		return " (want an integer)"
	case uint, uint64:
		return " (want an integer, 0 or more)"
	case float64:
		return " (want a number)"
	}
	return ""
}

// NewLogger returns the logger both binaries use: JSON when json is true,
// else logfmt-style text, at level, with every time.Duration attribute
// written as a Go duration string ("1m30s") rather than nanoseconds.
func NewLogger(w io.Writer, json bool, level slog.Leveler) *slog.Logger {
	if json {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: ReplaceAttr}))
	}
	// The text handler writes durations as strings by itself, without
	// allocating one per attribute as ReplaceAttr does.
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// ReplaceAttr writes durations as strings; use it in a slog.HandlerOptions.
func ReplaceAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	if a.Value.Kind() == slog.KindAny {
		if d, ok := a.Value.Any().(time.Duration); ok {
			return slog.String(a.Key, d.String())
		}
	}
	return a
}

// ParseLogFlags checks the -log-format (text or json) and -log-level
// (debug, info, warn or error) flags both binaries take, and returns the
// level. The error names the flag, its value and what it wants.
func ParseLogFlags(format, level string) (slog.Level, error) {
	return Origins{}.ParseLogFlags(format, level)
}

// ParseLogFlags is the package's ParseLogFlags, its error naming the flag
// as Name does: by its variable when the value came from the environment.
func (o Origins) ParseLogFlags(format, level string) (slog.Level, error) {
	switch format {
	case "text", "json":
	default:
		return 0, o.Errorf("log-format", format, "want text or json")
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return 0, o.Errorf("log-level", level, "want debug, info, warn or error")
	}
	return l, nil
}

// UnknownVar is an environment variable with the flags' prefix that
// stands for no flag.
type UnknownVar struct {
	Name  string // the variable
	Meant string // the flag's variable it differs from only by its underscores, or ""
}

// UnknownEnv returns the variables of environ (os.Environ's form) whose
// names start with prefix and stand for no flag of fs, each with the
// variable meant where one differs only by its underscores
// (PINPROXY_DIALTIMEOUT for PINPROXY_DIAL_TIMEOUT), sorted by name. Such
// a variable, a typo in a unit's settings file, would otherwise be
// ignored in silence. PREFIX_VERSION is left to deployments (see
// FromEnv).
func UnknownEnv(fs *flag.FlagSet, prefix string, environ []string) []UnknownVar {
	known := map[string]string{} // the name without underscores → the name
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(prefix, f.Name)
		known[strings.ReplaceAll(name, "_", "")] = name
	})
	var unknown []UnknownVar
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, prefix) || name == EnvName(prefix, "version") {
			continue
		}
		if meant := known[strings.ReplaceAll(name, "_", "")]; meant != name {
			unknown = append(unknown, UnknownVar{name, meant})
		}
	}
	slices.SortFunc(unknown, func(a, b UnknownVar) int { return strings.Compare(a.Name, b.Name) })
	return unknown
}

// WarnUnknownEnv logs a warning for each variable UnknownEnv returns.
func WarnUnknownEnv(log *slog.Logger, fs *flag.FlagSet, prefix string, environ []string) {
	for _, v := range UnknownEnv(fs, prefix, environ) {
		if v.Meant != "" {
			log.Warn("environment variable names no flag; ignored", "var", v.Name, "meant", v.Meant)
		} else {
			log.Warn("environment variable names no flag; ignored", "var", v.Name)
		}
	}
}
