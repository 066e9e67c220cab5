package core_test

import (
	"os"
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
			// The SQS side and the PostgreSQL side know nothing of each other; the adapter
			// (worker/inboxhandler) joins them, and the outbox publishes without the worker.
			for _, rule := range [][2]string{{"/worker", "/inbox"}, {"/inbox", "/worker"}, {"/outbox", "/worker"}} {
				if pkg == module+rule[0] && (imp == module+rule[1] || strings.HasPrefix(imp, module+rule[1]+"/")) {
					t.Errorf("%s imports %s", pkg, imp)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d packages; the listing looks wrong:\n%s", checked, out)
	}
}

// TestCoreDocNamesItsPackages keeps internal/core's package doc true: it names every package of
// the lower layer.
func TestCoreDocNamesItsPackages(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		n++
		if !strings.Contains(string(doc), e.Name()) {
			t.Errorf("internal/core's doc.go does not name its package %s", e.Name())
		}
	}
	if n == 0 {
		t.Fatal("no packages under internal/core")
	}
}
