package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"
)

// An entry is one file or directory of an archive.
type entry struct {
	path string // slash-separated, relative: "usr/bin/pinproxy"; a directory ends in "/"
	mode int64
	body []byte
}

// tarGz returns a gzipped tar of entries, sorted by path, each owned by
// root:root and dated mtime; gzip records no name or time. The same
// entries give the same bytes. prefix ("./" for a .deb) goes before each
// path.
func tarGz(entries []entry, mtime time.Time, prefix string) ([]byte, error) {
	entries = append([]entry(nil), entries...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for i, e := range entries {
		if i > 0 && entries[i-1].path == e.path {
			return nil, fmt.Errorf("%s: twice in one archive", e.path)
		}
		h := &tar.Header{
			Name: prefix + e.path, Mode: e.mode, Size: int64(len(e.body)),
			ModTime: mtime, Uname: "root", Gname: "root",
			Typeflag: tar.TypeReg, Format: tar.FormatGNU,
		}
		if strings.HasSuffix(e.path, "/") || e.path == "" {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.path, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// withDirs returns entries and a 0755 entry for each directory above
// them that is not there yet ("" for the root when root is true).
func withDirs(entries []entry, root bool) []entry {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.path] = true
	}
	out := append([]entry(nil), entries...)
	if root && !have[""] {
		out = append(out, entry{path: "", mode: 0o755})
		have[""] = true
	}
	for _, e := range entries {
		for d := path.Dir(strings.TrimSuffix(e.path, "/")); d != "." && d != "/"; d = path.Dir(d) {
			if !have[d+"/"] {
				have[d+"/"] = true
				out = append(out, entry{path: d + "/", mode: 0o755})
			}
		}
	}
	return out
}

// arArchive returns a Unix ar archive of members (name, body) in the
// order given, dated mtime, owned by 0:0, mode 0644: the outer layer of
// a .deb.
func arArchive(mtime time.Time, members ...[2][]byte) []byte {
	var buf bytes.Buffer
	buf.WriteString("!<arch>\n")
	for _, m := range members {
		name, body := string(m[0]), m[1]
		fmt.Fprintf(&buf, "%-16s%-12d%-6d%-6d%-8o%-10d`\n", name, mtime.Unix(), 0, 0, 0o100644, len(body))
		buf.Write(body)
		if len(body)%2 == 1 {
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes()
}

// gzipped is body gzipped as gzip -9n does: no name, no time, so the
// same body gives the same bytes.
func gzipped(body []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(body); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
