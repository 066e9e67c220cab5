package core_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sqsinbox/sqsinbox"

// TestLayers keeps the import graph reading top to bottom: the public packages import nothing of
// internal/ but internal/core, and internal/core imports nothing of the module outside itself.
// (No server is needed; it runs `go list`.)
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		pkg, imports := f[0], f[1:]
		inCore := strings.HasPrefix(pkg, module+"/internal/core")
		public := !strings.Contains(pkg, "/internal") && !strings.HasPrefix(pkg, module+"/examples")
		if !inCore && !public {
			continue
		}
		checked++
		for _, imp := range imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			switch {
			case inCore && !strings.HasPrefix(imp, module+"/internal/core"):
				t.Errorf("%s (lower layer) imports %s", pkg, imp)
			case public && strings.Contains(imp, "/internal/") && !strings.HasPrefix(imp, module+"/internal/core"):
				t.Errorf("%s (public) imports the upper layer %s", pkg, imp)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d packages; the listing looks wrong:\n%s", checked, out)
	}
}
