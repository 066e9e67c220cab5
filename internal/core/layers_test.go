package core_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sqsinbox/sqsinbox"

// pkg is what `go list -json` says of one package of the module.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

// listModule runs `go list -json -deps=false` over the whole module (non-test files only: the
// imports of _test.go files are not listed, so a product test may use the harness).
func listModule(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the listing looks wrong", len(pkgs))
	}
	return pkgs
}

// under reports whether the import path p is the module's folder dir or below it.
func under(p, dir string) bool {
	return p == module+"/"+dir || strings.HasPrefix(p, module+"/"+dir+"/")
}

// TestLayers keeps the import graph reading top to bottom (no server is needed; it runs `go
// list`):
//   - internal/core imports nothing of the module outside itself;
//   - the product (every package but harness/ and examples/) imports nothing of harness/ in its
//     non-test files, and of internal/ only internal/core;
//   - the harness may import anything;
//   - worker (the SQS side) and inbox (the PostgreSQL side) know nothing of each other, but for
//     the adapters that join them (worker/inboxhandler, worker/workerotel); outbox and s3payload
//     know nothing of worker, and s3payload nothing of outbox.
func TestLayers(t *testing.T) {
	never := [][2]string{{"worker", "inbox"}, {"inbox", "worker"}, {"outbox", "worker"}, {"s3payload", "worker"}, {"s3payload", "outbox"}}
	for _, p := range listModule(t) {
		core := under(p.ImportPath, "internal/core")
		product := !core && !under(p.ImportPath, "harness") && !under(p.ImportPath, "examples")
		joiner := under(p.ImportPath, "worker/inboxhandler") || under(p.ImportPath, "worker/workerotel")
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			switch {
			case core && !under(imp, "internal/core"):
				t.Errorf("%s (internal/core, the lowest layer) imports %s", p.ImportPath, imp)
			case product && under(imp, "harness"):
				t.Errorf("%s (product) imports the harness package %s outside its tests", p.ImportPath, imp)
			case product && under(imp, "internal") && !under(imp, "internal/core"):
				t.Errorf("%s (product) imports %s", p.ImportPath, imp)
			}
			for _, rule := range never {
				if under(p.ImportPath, rule[0]) && !joiner && under(imp, rule[1]) {
					t.Errorf("%s imports %s", p.ImportPath, imp)
				}
			}
		}
	}
}

// TestLayersTransitive checks what a user's binary links: the outbox and the S3 payload
// package pull in no worker, however indirectly, and the harness reaches no product binary.
func TestLayersTransitive(t *testing.T) {
	for _, c := range []struct{ pkg, never string }{
		{"outbox", "worker"},
		{"s3payload", "worker"},
		{"s3payload", "outbox"},
		{"inbox", "worker"},
	} {
		out, err := exec.Command("go", "list", "-deps", module+"/"+c.pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", c.pkg, err)
		}
		for dep := range strings.FieldsSeq(string(out)) {
			if under(dep, c.never) {
				t.Errorf("%s depends on %s (through its imports)", c.pkg, dep)
			}
		}
	}
}

// TestTopLevelLayers checks that the module's top-level folders (harness, cmd, worker, inbox,
// ...) stand on floors: each folder's non-test imports reach only folders on lower floors, so no
// import runs back up. With -v it prints the floors, top down, with each folder's lines of
// non-test Go: `go test -v -run TestTopLevelLayers ./internal/core/`.
func TestTopLevelLayers(t *testing.T) {
	top := func(p string) string { f, _, _ := strings.Cut(strings.TrimPrefix(p, module+"/"), "/"); return f }
	uses := map[string]map[string]bool{}
	lines := map[string]int{}
	for _, p := range listModule(t) {
		from := top(p.ImportPath)
		if uses[from] == nil {
			uses[from] = map[string]bool{}
		}
		for _, f := range p.GoFiles {
			b, err := os.ReadFile(p.Dir + "/" + f)
			if err != nil {
				t.Fatal(err)
			}
			lines[from] += bytes.Count(b, []byte("\n"))
		}
		for _, imp := range p.Imports {
			if to := top(imp); strings.HasPrefix(imp, module+"/") && to != from {
				uses[from][to] = true
			}
		}
	}
	// floor(f) = 1 + the highest floor f imports; a folder met again on its own path is a circle.
	floor := map[string]int{}
	var walk func(f string, path []string) int
	walk = func(f string, path []string) int {
		if n, ok := floor[f]; ok {
			return n
		}
		if i := slices.Index(path, f); i >= 0 {
			t.Fatalf("the top-level folders import each other in a circle: %s", strings.Join(append(path[i:], f), " → "))
		}
		n := 1
		for to := range uses[f] {
			n = max(n, walk(to, append(path, f))+1)
		}
		floor[f] = n
		return n
	}
	var folders []string
	for f := range uses {
		walk(f, nil)
		folders = append(folders, f)
	}
	slices.SortFunc(folders, func(a, b string) int {
		if floor[a] != floor[b] {
			return floor[b] - floor[a]
		}
		return strings.Compare(a, b)
	})
	for _, f := range folders {
		to := slices.Sorted(func(yield func(string) bool) {
			for u := range uses[f] {
				if !yield(u) {
					return
				}
			}
		})
		t.Logf("floor %d  %-10s %6d lines  → %s", floor[f], f+"/", lines[f], strings.Join(to, ", "))
	}
	if fmt.Sprint(floor["internal"]) != "1" {
		t.Errorf("internal/ stands on floor %d; it must be the ground (it imports nothing of the module)", floor["internal"])
	}
}
