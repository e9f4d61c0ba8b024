// Package version says which build of parley is running: the module
// version and the version-control state Go stamped into the binary
// (runtime/debug.ReadBuildInfo), with an override set by the release
// build's linker flags.
//
// It imports no other parley package.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Link-time values, set by the release build (.goreleaser.yaml) and the
// Dockerfile, whose build context has no .git for Go to read, with
//
//	-ldflags "-X github.com/parley-dev/parley/internal/version.Version=v1.2.3
//	          -X github.com/parley-dev/parley/internal/version.Commit=<sha>
//	          -X github.com/parley-dev/parley/internal/version.Date=<RFC 3339>"
//
// Each one that is empty falls back to the build info: the main module's
// version ("v1.2.3" for `go install ...@v1.2.3`, a pseudo-version or
// "(devel)" for a build from a checkout), vcs.revision and vcs.time.
var (
	// Version is the release version, e.g. "v1.2.3".
	Version string
	// Commit is the full commit hash the release was built from.
	Commit string
	// Date is the commit time, RFC 3339.
	Date string
)

// Info is what a binary knows about its own build.
type Info struct {
	// Version is the module version: Version when set at link time,
	// otherwise the build info's main module version; "(devel)" when
	// neither is known.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from (vcs.revision),
	// "" when the build did not stamp it (-buildvcs=false, no .git).
	Revision string `json:"revision,omitempty"`
	// Time is the commit time (vcs.time, RFC 3339), "" when unknown.
	Time string `json:"time,omitempty"`
	// Modified reports uncommitted changes in the work tree at build time
	// (vcs.modified).
	Modified bool `json:"modified,omitempty"`
	// GoVersion is the toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH of the binary.
	Platform string `json:"platform"`
}

// Get reads the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, Info{Version: Version, Revision: Commit, Time: Date})
}

// fromBuildInfo builds an Info from bi (nil when the binary carries none)
// and the link-time values in link (Version, Revision, Time), which win
// over the build info's.
func fromBuildInfo(bi *debug.BuildInfo, link Info) Info {
	info := Info{Version: link.Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if info.Version == "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			case "GOOS":
				info.Platform = s.Value + info.Platform[strings.IndexByte(info.Platform, '/'):]
			case "GOARCH":
				info.Platform = info.Platform[:strings.IndexByte(info.Platform, '/')+1] + s.Value
			}
		}
	}
	if link.Revision != "" {
		info.Revision, info.Modified = link.Revision, false
	}
	if link.Time != "" {
		info.Time = link.Time
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}

// String is the one line `parley --version` prints:
//
//	parley v1.2.3 (commit 0123456789ab, 2026-11-30T12:00:00Z, modified) go1.26.8 linux/amd64
//
// The parenthesis is left out when the build stamped no commit.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "parley %s", i.Version)
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		fmt.Fprintf(&b, " (commit %s", rev)
		if i.Time != "" {
			fmt.Fprintf(&b, ", %s", i.Time)
		}
		if i.Modified {
			b.WriteString(", modified")
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, " %s %s", i.GoVersion, i.Platform)
	return b.String()
}
