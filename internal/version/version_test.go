package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/parley-dev/parley", Version: "v0.3.1-0.20261130120000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"},
			{Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-30T12:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		link Info
		want Info
		line string
	}{
		{
			name: "build info", bi: bi,
			want: Info{Version: bi.Main.Version, Revision: "0123456789abcdef0123456789abcdef01234567",
				Time: "2026-11-30T12:00:00Z", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"},
			line: "parley v0.3.1-0.20261130120000-0123456789ab+dirty (commit 0123456789ab, 2026-11-30T12:00:00Z, modified) go1.26.8 linux/arm64",
		},
		{
			name: "release override", bi: bi, link: Info{Version: "v1.2.3"},
			want: Info{Version: "v1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567",
				Time: "2026-11-30T12:00:00Z", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"},
			line: "parley v1.2.3 (commit 0123456789ab, 2026-11-30T12:00:00Z, modified) go1.26.8 linux/arm64",
		},
		{
			name: "release build without .git", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
				Settings: []debug.BuildSetting{{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}},
			link: Info{Version: "v1.2.3", Revision: "fedcba9876543210", Time: "2026-12-01T00:00:00Z"},
			want: Info{Version: "v1.2.3", Revision: "fedcba9876543210", Time: "2026-12-01T00:00:00Z", GoVersion: "go1.26.8", Platform: "linux/amd64"},
			line: "parley v1.2.3 (commit fedcba987654, 2026-12-01T00:00:00Z) go1.26.8 linux/amd64",
		},
		{
			name: "no vcs", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
				Settings: []debug.BuildSetting{{Key: "GOOS", Value: "darwin"}, {Key: "GOARCH", Value: "amd64"}}},
			want: Info{Version: "(devel)", GoVersion: "go1.26.8", Platform: "darwin/amd64"},
			line: "parley (devel) go1.26.8 darwin/amd64",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(tc.bi, tc.link)
			if got != tc.want {
				t.Errorf("fromBuildInfo = %+v\nwant %+v", got, tc.want)
			}
			if s := got.String(); s != tc.line {
				t.Errorf("String() = %q\nwant %q", s, tc.line)
			}
		})
	}
	if got := fromBuildInfo(nil, Info{}); got.Version != "(devel)" || got.GoVersion == "" || got.Platform == "" {
		t.Errorf("fromBuildInfo(nil) = %+v, want (devel) with the runtime's Go version and platform", got)
	}
}
