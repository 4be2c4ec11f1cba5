package cmdkit

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Origins says where each flag's value came from: the command line, the
// environment, or the flag's default. Errors about a flag name it as the
// operator gave it (Name), so a bad value set in a unit's Environment= is
// found there.
type Origins struct {
	prefix string
	cli    map[string]bool
	env    map[string]bool
}

// ParseEnv is FromEnv, and returns where each value came from. fs must
// have been parsed.
func ParseEnv(fs *flag.FlagSet, prefix string, lookupEnv func(string) (string, bool)) (Origins, error) {
	o := Origins{prefix: prefix, cli: map[string]bool{}, env: map[string]bool{}}
	fs.Visit(func(f *flag.Flag) { o.cli[f.Name] = true })
	if err := FromEnv(fs, prefix, lookupEnv); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) {
		if !o.cli[f.Name] {
			o.env[f.Name] = true
		}
	})
	return o, nil
}

// Given says whether the flag was set, on the command line or in the
// environment.
func (o Origins) Given(flagName string) bool { return o.cli[flagName] || o.env[flagName] }

// FromEnv says whether the flag's value came from the environment.
func (o Origins) FromEnv(flagName string) bool { return o.env[flagName] }

// Name is the flag as an error names it: "-node", or
// "PROOFKIT_AGENT_NODE (-node)" when its value came from the environment.
func (o Origins) Name(flagName string) string {
	if o.env[flagName] {
		return EnvName(o.prefix, flagName) + " (-" + flagName + ")"
	}
	return "-" + flagName
}

// Errorf is an error about a flag's value in the one wording both
// binaries use: the flag as Name gives it, the value (quoted when it is a
// string), then what is wrong or wanted.
func (o Origins) Errorf(flagName string, value any, format string, args ...any) error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	return fmt.Errorf("%s %s: %s", o.Name(flagName), v, fmt.Sprintf(format, args...))
}

// Swallowed finds a flag whose value is one of fs's own flags ("-node
// -once" sets the node to "-once" and runs without -once): a value is
// missing there, not a name. It returns an error naming the first such
// flag, or nil.
func Swallowed(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		v := f.Value.String()
		name, _, _ := strings.Cut(strings.TrimLeft(v, "-"), "=")
		if err == nil && strings.HasPrefix(v, "-") && name != "" && fs.Lookup(name) != nil {
			err = fmt.Errorf("-%s %q: a value is missing (%s is a flag)", f.Name, v, v)
		}
	})
	return err
}

// ParseError is err, an error of fs.Parse, with what the flag wants added
// when the flag package said only "parse error" ("invalid value \"soon\"
// for flag -interval: parse error (want a duration such as 30s or
// 1m30s)"): the same words FromEnv adds for a variable.
func ParseError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	_, rest, ok := strings.Cut(msg, "flag -")
	if !ok || !strings.Contains(msg, "parse error") {
		return err
	}
	name, _, _ := strings.Cut(rest, ":")
	f := fs.Lookup(name)
	if f == nil {
		return err
	}
	if w := want(f); w != "" {
		return fmt.Errorf("%w%s", err, w)
	}
	return err
}

// NewFlagSet returns the flag set a command declares its flags in: a bad
// flag comes back as an error, for the command to print as one line,
// and nothing is printed on its own (-h prints the flags where the
// command says so).
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// UsageError is a bad flag or environment value, as opposed to a
// failure at run time: a command exits 2 on it.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Parse parses args into fs the way both commands do. flag.ErrHelp comes
// back as it is, for the command to print its help; a bad flag or a
// positional argument is a UsageError. When done reports true after the
// command line is parsed (-version given), the environment is not read
// and Parse returns at once; otherwise the environment fills what the
// command line did not give (ParseEnv), and a flag that swallowed the
// next flag as its value is refused (Swallowed).
func Parse(fs *flag.FlagSet, args []string, prefix string, lookupEnv func(string) (string, bool), done func() bool) (Origins, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Origins{}, err
		}
		return Origins{}, UsageError{Msg: ParseError(fs, err).Error()}
	}
	if fs.NArg() > 0 {
		return Origins{}, UsageError{Msg: fmt.Sprintf("unexpected argument %q (flags only)", fs.Arg(0))}
	}
	if done != nil && done() {
		return Origins{}, nil
	}
	origins, err := ParseEnv(fs, prefix, lookupEnv)
	if err != nil {
		return Origins{}, UsageError{Msg: err.Error()}
	}
	if err := Swallowed(fs); err != nil {
		return Origins{}, UsageError{Msg: err.Error()}
	}
	return origins, nil
}
