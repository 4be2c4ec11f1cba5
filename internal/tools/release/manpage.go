package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// manPage is bin's manual page (section 8: a daemon an administrator
// runs), made from its -help text: the usage line as the synopsis, the
// package's description and the text before the flags as the
// description, and one entry per flag with its words and default, as
// flag.PrintDefaults gives them. -help stays the reference; the page is
// what man proofkit-agent finds on a packaged install.
func manPage(bin binary, help string, b build) ([]byte, error) {
	lines := strings.Split(strings.TrimRight(help, "\n"), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "usage: ") {
		return nil, errors.New("man page: the help text does not start with a usage line")
	}
	// "usage: platform -token-file FILE [flags]": the program's name as
	// the binary prints it, which need not be the installed one.
	_, args, _ := strings.Cut(strings.TrimPrefix(lines[0], "usage: "), " ")
	summary, text, _ := strings.Cut(bin.description, "\n")

	var p strings.Builder
	fmt.Fprintf(&p, ".TH %s 8 \"%s\" \"%s\"\n", roff(strings.ToUpper(bin.name)), b.date.UTC().Format("2006-01-02"), roff(bin.name+" "+b.version))
	// Left-aligned, unhyphenated: flag names and values are not words.
	p.WriteString(".ad l\n.nh\n")
	fmt.Fprintf(&p, ".SH NAME\n%s \\- %s\n", roff(bin.name), roff(summary))
	fmt.Fprintf(&p, ".SH SYNOPSIS\n.B %s\n%s\n", roff(bin.name), roff(args))
	p.WriteString(".SH DESCRIPTION\n")
	for l := range strings.SplitSeq(text, "\n") {
		p.WriteString(roffLine(l))
	}
	i := 1
	for ; i < len(lines) && !strings.HasPrefix(lines[i], "  -"); i++ {
		switch l := lines[i]; {
		case strings.TrimSpace(l) == "":
			p.WriteString(".PP\n")
		case l == "Flags:":
		default:
			p.WriteString(roffLine(l))
		}
	}
	p.WriteString(".SH OPTIONS\n")
	for ; i < len(lines); i++ {
		l := lines[i]
		if name, ok := strings.CutPrefix(l, "  -"); ok {
			name, typ, _ := strings.Cut(name, " ")
			if typ == "" {
				fmt.Fprintf(&p, ".TP\n.B \\-%s\n", roff(name))
			} else {
				fmt.Fprintf(&p, ".TP\n.BI \\-%s \" %s\"\n", roff(name), roff(typ))
			}
			continue
		}
		p.WriteString(roffLine(strings.TrimLeft(l, " \t")))
	}
	fmt.Fprintf(&p, ".SH SEE ALSO\n/usr/share/doc/%s/README.md\n.br\nhttps://github.com/proofkit/nodekit\n", roff(bin.name))
	return []byte(p.String()), nil
}

// roff escapes s for troff: a backslash as \e, a hyphen as \- (a minus,
// which man renders and searches as the ASCII one).
func roff(s string) string {
	return strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
}

// roffLine is s as one line of text: a line troff would read as a request
// (starting with . or ') starts with \& instead.
func roffLine(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s + "\n"
}

// helpText runs exe -help with an empty environment (a variable would
// change no default, but the page must not depend on who builds it) and
// returns what it printed.
func helpText(ctx context.Context, exe string) (string, error) {
	cmd := exec.CommandContext(ctx, exe, "-help")
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		// flag's -help exits 0 with ExitOnError; a command that returns
		// flag.ErrHelp as a usage error may exit 2.
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			return "", fmt.Errorf("%s -help: %w\n%s", exe, err, out)
		}
	}
	return string(out), nil
}
