package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/internal/core/version"
)

// TestVersionIsTheRelease (no servers): `sqsinbox --version` prints the release (internal/core/version), and a
// build that sets it with -ldflags -X prints that one, with the module version beside it.
func TestVersionIsTheRelease(t *testing.T) {
	t.Parallel()
	r := cli(t, "", "--version").mustOK(t)
	if !strings.HasPrefix(r.stdout, "sqsinbox "+version.Version) || strings.Contains(r.stdout, "sqsinbox (devel)") {
		t.Errorf("--version printed %q; want sqsinbox %s first", r.stdout, version.Version)
	}
	bin := filepath.Join(t.TempDir(), "sqsinbox")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/sqsinbox/sqsinbox/internal/core/version.Version=v9.8.7", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "sqsinbox v9.8.7 (module ") {
		t.Errorf("the -X build's --version: %v, %q; want sqsinbox v9.8.7 (module ...)", err, out)
	}
}
