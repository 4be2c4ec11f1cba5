// Command apicheck records the exported API of the module's packages in
// a text file per package, the way the Go project keeps api/*.txt, and
// fails when the API differs from what the files record, so that a
// change an importer would feel is always a decision.
//
// From the module root:
//
//	go run ./internal/tools/apicheck          # check: list differences, exit 1 if any
//	go run ./internal/tools/apicheck -write   # record the API as it is now
//
// Each package's file is api/<path>.txt, the path relative to the module
// with "/" as "-" (api/overload.txt, api/overload-probe.txt), one line
// per exported name, sorted, each naming the package by its path in the
// module:
//
//	pkg overload, const ReadingVersion = 2
//	pkg overload/probe, func New(Config) (*Probe, error)
//	pkg overload, func NewTracker(string, Limits) *Tracker
//	pkg overload, method (*Tracker) Observe(Reading) (Result, error)
//	pkg overload, type Reading struct, At time.Time
//
// The API is read from the compiler's export data (go list -export) for
// linux/amd64 with cgo off, so it is the same on every machine. A method
// is listed with the receiver it has in the type's method set: (T) for a
// value's, (*T) for one only a pointer has; methods promoted from
// embedded fields are listed too. Struct tags are not recorded.
//
// Flags: -write, -dir (where the files are, default api), -C (the module
// root, default .). Arguments name the packages, relative to the module
// root; by default the packages whose API is kept.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// defaultPackages are the packages whose API is kept, relative to the
// module root.
var defaultPackages = []string{"overload", "overload/probe", "pinproxy", "pinproxy/handover", "routing", "pricing", "sysctl", "agent"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("apicheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	write := fs.Bool("write", false, "record the API in the files instead of checking it")
	dir := fs.String("dir", "api", "the directory of the API files, relative to the module root")
	root := fs.String("C", ".", "the module root")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: apicheck [-write] [-dir api] [-C root] [package ...]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	pkgs := fs.Args()
	if len(pkgs) == 0 {
		pkgs = defaultPackages
	}
	apis, err := load(*root, pkgs)
	if err != nil {
		fmt.Fprintf(stderr, "apicheck: %v\n", err)
		return 1
	}
	apiDir := *dir
	if !filepath.IsAbs(apiDir) {
		apiDir = filepath.Join(*root, apiDir)
	}
	changed := false
	for _, p := range pkgs {
		file := filepath.Join(apiDir, fileName(p))
		lines := apis[p]
		if *write {
			if err := writeLines(file, lines); err != nil {
				fmt.Fprintf(stderr, "apicheck: %v\n", err)
				return 1
			}
			continue
		}
		recorded, err := readLines(file)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "apicheck: %v\n", err)
			return 1
		}
		added, removed := diff(recorded, lines)
		if err != nil {
			fmt.Fprintf(stdout, "%s: no such file: the API of %s is not recorded\n", filepath.Join(*dir, fileName(p)), p)
		} else if len(added)+len(removed) > 0 {
			fmt.Fprintf(stdout, "%s: the API of %s differs from the file:\n", filepath.Join(*dir, fileName(p)), p)
		}
		for _, l := range removed {
			fmt.Fprintf(stdout, "-%s\n", l)
		}
		for _, l := range added {
			fmt.Fprintf(stdout, "+%s\n", l)
		}
		changed = changed || err != nil || len(added)+len(removed) > 0
	}
	if changed {
		fmt.Fprintf(stdout, "a change of the exported API must be recorded: go run ./internal/tools/apicheck -write\n")
		return 1
	}
	return 0
}

// fileName is the API file of package p: "overload/probe" is
// "overload-probe.txt".
func fileName(p string) string {
	return strings.ReplaceAll(strings.Trim(filepath.ToSlash(p), "./"), "/", "-") + ".txt"
}

// load returns the API lines of each package (a directory relative to
// root), from export data that go list builds for linux/amd64.
func load(root string, pkgs []string) (map[string][]string, error) {
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{.Dir}}\t{{if .Error}}{{.Error}}{{end}}"}
	for _, p := range pkgs {
		args = append(args, "./"+strings.TrimPrefix(filepath.ToSlash(p), "./"))
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	byDir := map[string]string{} // directory → import path
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 4)
		if len(f) != 4 {
			continue
		}
		if f[3] != "" {
			return nil, fmt.Errorf("package %s: %s", f[0], f[3])
		}
		exports[f[0]] = f[1]
		byDir[f[2]] = f[0]
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	apis := map[string][]string{}
	for _, p := range pkgs {
		dir := filepath.Join(absRoot, filepath.FromSlash(p))
		path, ok := byDir[dir]
		if !ok {
			return nil, fmt.Errorf("package %s: not found by go list in %s", p, dir)
		}
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("package %s: %v", p, err)
		}
		apis[p] = api(strings.Trim(filepath.ToSlash(p), "./"), pkg)
	}
	return apis, nil
}

// api returns the lines of pkg's exported API, sorted, each starting
// "pkg path, " (path: the package's path in the module).
func api(path string, pkg *types.Package) []string {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Name()
	}
	str := func(t types.Type) string { return types.TypeString(t, qual) }
	prefix := "pkg " + path + ", "
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, prefix+fmt.Sprintf(format, args...)) }
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			val := obj.Val().ExactString()
			if short := obj.Val().String(); short != val {
				val = short + " // " + val // a float, such as 0.05 // 1/20
			}
			if b, ok := obj.Type().(*types.Basic); ok && b.Info()&types.IsUntyped != 0 {
				add("const %s = %s", name, val)
			} else {
				add("const %s %s = %s", name, str(obj.Type()), val)
			}
		case *types.Var:
			add("var %s %s", name, str(obj.Type()))
		case *types.Func:
			add("func %s%s", name, signature(obj.Type().(*types.Signature), qual))
		case *types.TypeName:
			lines = append(lines, typeLines(prefix, obj, qual)...)
		}
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// typeLines returns the lines of an exported type: its kind, its exported
// fields or interface methods, and the exported methods of its method
// sets.
func typeLines(prefix string, obj *types.TypeName, qual types.Qualifier) []string {
	str := func(t types.Type) string { return types.TypeString(t, qual) }
	name := obj.Name()
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, prefix+fmt.Sprintf(format, args...)) }
	if obj.IsAlias() {
		add("type %s = %s", name, str(types.Unalias(obj.Type())))
		return lines
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		return lines
	}
	decl := name + typeParams(named.TypeParams(), qual)
	switch u := named.Underlying().(type) {
	case *types.Struct:
		add("type %s struct", decl)
		for i := range u.NumFields() {
			f := u.Field(i)
			if !f.Exported() {
				continue
			}
			if f.Embedded() {
				add("type %s struct, embedded %s", decl, str(f.Type()))
			} else {
				add("type %s struct, %s %s", decl, f.Name(), str(f.Type()))
			}
		}
	case *types.Interface:
		var names []string
		for i := range u.NumMethods() {
			m := u.Method(i)
			if !m.Exported() {
				names = append(names, "unexported methods")
				continue
			}
			names = append(names, m.Name())
			add("type %s interface, %s%s", decl, m.Name(), signature(m.Type().(*types.Signature), qual))
		}
		for i := range u.NumEmbeddeds() {
			if _, isIface := u.EmbeddedType(i).Underlying().(*types.Interface); !isIface {
				add("type %s interface, %s", decl, str(u.EmbeddedType(i)))
			}
		}
		slices.Sort(names)
		add("type %s interface { %s }", decl, strings.Join(slices.Compact(names), ", "))
		return lines
	default:
		add("type %s %s", decl, str(u))
	}
	value := types.NewMethodSet(named)
	for i := range value.Len() {
		if m := value.At(i).Obj(); m.Exported() {
			add("method (%s) %s%s", name, m.Name(), signature(m.Type().(*types.Signature), qual))
		}
	}
	ptr := types.NewMethodSet(types.NewPointer(named))
	for i := range ptr.Len() {
		m := ptr.At(i).Obj()
		if !m.Exported() || value.Lookup(m.Pkg(), m.Name()) != nil {
			continue
		}
		add("method (*%s) %s%s", name, m.Name(), signature(m.Type().(*types.Signature), qual))
	}
	return lines
}

// signature writes a function's parameters and results by type alone, as
// Go's api files do: "(string, ...int) (*T, error)".
func signature(sig *types.Signature, qual types.Qualifier) string {
	var b strings.Builder
	b.WriteString(typeParams(sig.TypeParams(), qual))
	b.WriteString("(")
	for i := range sig.Params().Len() {
		if i > 0 {
			b.WriteString(", ")
		}
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			b.WriteString("..." + types.TypeString(t.(*types.Slice).Elem(), qual))
			continue
		}
		b.WriteString(types.TypeString(t, qual))
	}
	b.WriteString(")")
	switch n := sig.Results().Len(); n {
	case 0:
	case 1:
		b.WriteString(" " + types.TypeString(sig.Results().At(0).Type(), qual))
	default:
		b.WriteString(" (")
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(types.TypeString(sig.Results().At(i).Type(), qual))
		}
		b.WriteString(")")
	}
	return b.String()
}

// typeParams writes a type parameter list, "[K comparable, V any]", or
// nothing.
func typeParams(tps *types.TypeParamList, qual types.Qualifier) string {
	if tps.Len() == 0 {
		return ""
	}
	var parts []string
	for i := range tps.Len() {
		tp := tps.At(i)
		parts = append(parts, tp.Obj().Name()+" "+types.TypeString(tp.Constraint(), qual))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// diff returns the lines of now that recorded lacks, and those of
// recorded that now lacks; both are sorted.
func diff(recorded, now []string) (added, removed []string) {
	have := map[string]bool{}
	for _, l := range recorded {
		have[l] = true
	}
	want := map[string]bool{}
	for _, l := range now {
		want[l] = true
		if !have[l] {
			added = append(added, l)
		}
	}
	for _, l := range recorded {
		if !want[l] {
			removed = append(removed, l)
		}
	}
	return added, removed
}

func readLines(file string) ([]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

func writeLines(file string, lines []string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return os.WriteFile(file, []byte(b.String()), 0o644)
}
