package main

import (
	"crypto/md5"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"time"
)

// deployFile reads a file of examples/deploy.
func deployFile(root, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(root, "examples", "deploy", name))
}

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// defaultFile is the name in examples/deploy of bin's /etc/default file.
func defaultFile(bin binary) string { return bin.name + ".default" }

// tarball returns bin's tarball: a directory NAME-VERSION-linux-ARCH
// holding the binary, LICENSE, README.md, the units, the /etc/default
// file as NAME.default, the other files the units name, and the FROM
// scratch Dockerfile that builds an image of the binary with the
// directory as its context.
func tarball(root string, bin binary, arch string, b build, exe []byte) ([]byte, error) {
	entries := []entry{{path: bin.name, mode: 0o755, body: exe}}
	files := map[string]string{ // name in the tarball → file
		"LICENSE":        filepath.Join(root, "LICENSE"),
		"README.md":      filepath.Join(root, "README.md"),
		defaultFile(bin): filepath.Join(root, "examples", "deploy", defaultFile(bin)),
	}
	if df := filepath.Join(root, "examples", "deploy", "offline", bin.name+".Dockerfile"); fileExists(df) {
		files["Dockerfile"] = df
	}
	for _, u := range bin.units {
		files[u] = filepath.Join(root, "examples", "deploy", u)
	}
	for _, src := range bin.etc {
		files[src] = filepath.Join(root, "examples", "deploy", src)
	}
	for name, src := range files {
		body, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{path: name, mode: 0o644, body: body})
	}
	dir := strings.TrimSuffix(tarballName(bin.name, b.version, arch), ".tar.gz")
	return tarGz(withDirs(entries, true), b.date, dir+"/")
}

// debPackage returns bin's Debian package (format 2.0: an ar archive of
// debian-binary, control.tar.gz and data.tar.gz); man is its gzipped
// manual page.
func debPackage(root string, bin binary, arch string, b build, exe, man []byte) ([]byte, error) {
	data := []entry{
		{path: "usr/bin/" + bin.name, mode: 0o755, body: exe},
		{path: "usr/share/man/man8/" + bin.name + ".8.gz", mode: 0o644, body: man},
	}
	// The units run the binary where the package puts it.
	for _, u := range bin.units {
		text, err := deployFile(root, u)
		if err != nil {
			return nil, err
		}
		text = []byte(strings.ReplaceAll(string(text), "/usr/local/bin/", "/usr/bin/"))
		data = append(data, entry{path: "lib/systemd/system/" + u, mode: 0o644, body: text})
	}
	conffiles := map[string]string{"/etc/default/" + bin.name: defaultFile(bin)}
	for dst, src := range bin.etc {
		conffiles[dst] = src
	}
	var confList []string
	for dst, src := range conffiles {
		body, err := deployFile(root, src)
		if err != nil {
			return nil, err
		}
		data = append(data, entry{path: strings.TrimPrefix(dst, "/"), mode: 0o644, body: body})
		confList = append(confList, dst)
	}
	slices.Sort(confList)
	doc := "usr/share/doc/" + bin.name + "/"
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	changelog, err := gzipped(debChangelog(bin.name, b))
	if err != nil {
		return nil, err
	}
	data = append(data,
		entry{path: doc + "copyright", mode: 0o644, body: []byte(copyright)},
		entry{path: doc + "changelog.gz", mode: 0o644, body: changelog},
		entry{path: doc + "README.md", mode: 0o644, body: readme},
		// Go links statically by design; lintian's own Go packages are
		// recognised by their Built-Using field, which this build (not
		// Debian's golang) has no business claiming.
		entry{path: "usr/share/lintian/overrides/" + bin.name, mode: 0o644,
			body: fmt.Appendf(nil, "%s: statically-linked-binary [usr/bin/%s]\n", bin.name, bin.name)})

	var size int64
	var md5sums strings.Builder
	slices.SortFunc(data, func(x, y entry) int { return strings.Compare(x.path, y.path) })
	for _, e := range data {
		size += (int64(len(e.body)) + 1023) / 1024
		if strings.HasSuffix(e.path, "/") || slices.Contains(confList, "/"+e.path) {
			continue
		}
		fmt.Fprintf(&md5sums, "%x  %s\n", md5.Sum(e.body), e.path)
	}
	dataTar, err := tarGz(withDirs(data, true), b.date, "./")
	if err != nil {
		return nil, err
	}

	var control strings.Builder
	fmt.Fprintf(&control, "Package: %s\nVersion: %s\nArchitecture: %s\n", bin.name, debVersion(b.version), debArch[arch])
	fmt.Fprintf(&control, "Maintainer: %s\n", maintainer)
	fmt.Fprintf(&control, "Installed-Size: %d\n", size)
	if bin.user != "" {
		control.WriteString("Pre-Depends: adduser\n")
	}
	control.WriteString("Section: net\nPriority: optional\nHomepage: https://github.com/proofkit/nodekit\n")
	summary, text, _ := strings.Cut(bin.description, "\n")
	fmt.Fprintf(&control, "Description: %s\n", summary)
	for l := range strings.SplitSeq(text, "\n") {
		fmt.Fprintf(&control, " %s\n", l)
	}
	scripts := map[string]*template.Template{"postinst": postinst, "prerm": prerm, "postrm": postrm}
	ctl := []entry{
		{path: "control", mode: 0o644, body: []byte(control.String())},
		{path: "conffiles", mode: 0o644, body: []byte(strings.Join(confList, "\n") + "\n")},
		{path: "md5sums", mode: 0o644, body: []byte(md5sums.String())},
	}
	var services []string
	for _, u := range bin.units {
		if strings.HasSuffix(u, ".service") {
			services = append(services, u)
		}
	}
	vars := struct {
		User, GroupDir, Services, Units, Upgrade, Next string
		EtcDirs                                        []string
	}{bin.user, bin.groupDir, strings.Join(services, " "), strings.Join(bin.units, " "), bin.upgrade, bin.next, bin.etcDirs}
	for name, tmpl := range scripts {
		var s strings.Builder
		if err := tmpl.Execute(&s, vars); err != nil {
			return nil, err
		}
		ctl = append(ctl, entry{path: name, mode: 0o755, body: []byte(s.String())})
	}
	controlTar, err := tarGz(withDirs(ctl, true), b.date, "./")
	if err != nil {
		return nil, err
	}
	return arArchive(b.date,
		[2][]byte{[]byte("debian-binary"), []byte("2.0\n")},
		[2][]byte{[]byte("control.tar.gz"), controlTar},
		[2][]byte{[]byte("data.tar.gz"), dataTar}), nil
}

// debChangelog is the package's Debian changelog: one entry, for this
// build, dated at the commit's time, pointing at the project's own
// CHANGELOG.md for what changed.
func debChangelog(name string, b build) []byte {
	return fmt.Appendf(nil, `%s (%s) unstable; urgency=medium

  * nodekit %s,
    commit %s. What changed is in the project's changelog:
    https://github.com/proofkit/nodekit/blob/main/CHANGELOG.md

 -- %s  %s
`, name, debVersion(b.version), b.version, shortCommit(b.commit), maintainer, b.date.Format(time.RFC1123Z))
}

func shortCommit(c string) string { return c[:min(12, len(c))] }

// maintainer is the packages' Maintainer, and the changelog's author.
const maintainer = "nodekit maintainers <nodekit@proofkit.invalid>"

const copyright = `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nodekit
Source: https://github.com/proofkit/nodekit

Files: *
Copyright: 2026 The nodekit authors
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
`

// The maintainer scripts. Nothing is enabled or started: the operator
// gives the settings first. Service actions go through deb-systemd-invoke
// (init-system-helpers, essential), which obeys policy-rc.d: an image build
// that forbids starting services starts none. A service running during an upgrade is
// carried over (pinproxy hands its connections to the new binary).
var (
	postinst = template.Must(template.New("postinst").Parse(`#!/bin/sh
set -e
if [ "$1" = configure ]; then
{{- if .User}}
	if ! getent passwd {{.User}} >/dev/null; then
		adduser --system --group --no-create-home --home /nonexistent --quiet {{.User}}
	fi
{{- end}}
{{- range .EtcDirs}}
	# Made here, not shipped: the operator's secrets live in it, and a
	# mode or owner the operator gives it later is theirs to keep.
	if [ ! -d {{.}} ]; then
{{- if eq . $.GroupDir}}
		install -d -m 0750 -o root -g {{$.User}} {{.}}
{{- else if $.User}}
		install -d -m 0700 -o {{$.User}} -g {{$.User}} {{.}}
{{- else}}
		install -d -m 0700 {{.}}
{{- end}}
	fi
{{- end}}
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload >/dev/null || true
		if [ -n "$2" ]; then
			{{.Upgrade}} || true
		fi
	fi
	if [ -z "$2" ]; then
		cat <<'EOF'
{{.Next}}
EOF
	fi
fi
exit 0
`))
	prerm = template.Must(template.New("prerm").Parse(`#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	deb-systemd-invoke stop {{.Units}} >/dev/null 2>&1 || true
fi
exit 0
`))
	postrm = template.Must(template.New("postrm").Parse(`#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
{{- if .EtcDirs}}
if [ "$1" = purge ]; then
	rmdir --ignore-fail-on-non-empty{{range .EtcDirs}} {{.}}{{end}} || true
fi
{{- end}}
exit 0
`))
)
