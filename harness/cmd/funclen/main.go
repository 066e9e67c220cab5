// Command funclen lists the longest Go functions of the repository (non-test files), longest
// first, as lines from `func` to the closing brace: the figure a review of "functions too long
// to read" starts from.
//
//	go run ./harness/cmd/funclen                 # the 25 longest, everywhere
//	go run ./harness/cmd/funclen -n 10 -skip harness/,examples/
package main

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	n := flag.Int("n", 25, "how many functions to list")
	skip := flag.String("skip", "", "comma-separated path prefixes to leave out (harness/,examples/)")
	flag.Parse()
	type fn struct {
		name  string
		lines int
	}
	var fns []fn
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || skipped(path, *skip) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				fns = append(fns, fn{path + ":" + fd.Name.Name, lines})
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(1)
	}
	slices.SortStableFunc(fns, func(a, b fn) int { return cmp.Compare(b.lines, a.lines) })
	for _, f := range fns[:min(*n, len(fns))] {
		fmt.Printf("%4d %s\n", f.lines, f.name)
	}
}

// skipped reports whether path starts with one of the comma-separated prefixes.
func skipped(path, prefixes string) bool {
	for p := range strings.SplitSeq(prefixes, ",") {
		if p != "" && strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}
