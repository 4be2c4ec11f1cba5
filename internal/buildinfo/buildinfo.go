// Package buildinfo says which build of a nodekit binary is running: the
// version, the commit and the Go version, for -version, the start-up log
// line, the User-Agent of reports and the *_build_info gauges.
//
// The version comes, in this order, from the linker
// (-ldflags "-X github.com/proofkit/nodekit/internal/buildinfo.version=v0.5.0"),
// from the module version "go install …@v0.5.0" records, or is "devel".
// The commit comes from the linker (…buildinfo.commit=abc123) or from the
// vcs.revision the go command stamps when it builds in a Git checkout.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X; empty means "read the build info".
var (
	version string
	commit  string
)

// Info describes one build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
	// Modified says the commit had uncommitted changes (vcs.modified).
	Modified bool `json:"modified,omitempty"`
}

// Read returns the running binary's Info.
func Read() Info {
	in := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	return in
}

// String is the line -version prints: "NAME v0.5.0 (commit abc123, go1.26.8)".
func (in Info) String() string {
	c := in.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if in.Modified {
		c += "+modified"
	}
	return fmt.Sprintf("%s (commit %s, %s)", in.Version, c, in.GoVersion)
}

// UserAgent is the User-Agent a binary sends: "proofkit-agent/v0.5.0".
func (in Info) UserAgent(name string) string {
	return name + "/" + in.Version
}
