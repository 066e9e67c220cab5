// Package version holds the release this source tree is: one place that the CLI prints and a
// release build may override.
package version

import (
	"fmt"
	"runtime/debug"
)

// Version is the release this source tree is, or the next one with "-dev" between releases
// (see CHANGELOG.md). A release build may set it:
//
//	go build -ldflags "-X github.com/sqsinbox/sqsinbox/internal/core/version.Version=v0.1.0" ./cmd/sqsinbox
var Version = "v0.1.0-dev"

// String returns Version, with the module version the binary was built from when the Go
// toolchain recorded one: "v0.1.0 (module v0.1.0)" for `go install ...@v0.1.0`, "v0.1.0-dev
// (module (devel))" for a build in a clone.
func String() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return fmt.Sprintf("%s (module %s, %s)", Version, bi.Main.Version, bi.GoVersion)
	}
	return Version
}
