package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeShowsThisFile keeps the README's "your first worker" sample (main and the event
// type) and this file, which
// `go vet ./...` and `go test ./...` compile, the same code. No server is needed.
func TestReadmeShowsThisFile(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	const start = "<!-- first-worker: examples/firstworker/main.go -->\n```go\n"
	i := strings.Index(string(readme), start)
	if i < 0 {
		t.Fatalf("README.md has no block starting with %q", start)
	}
	block := string(readme[i+len(start):])
	block = block[:strings.Index(block, "```")]
	// The README shows the file from `func main` to its migrations: main and the event type.
	want := string(src)
	want = want[strings.Index(want, "func main() {"):]
	want = want[:strings.Index(want, "\n//go:embed")]
	if block != want {
		t.Fatalf("README.md's first-worker block differs from examples/firstworker/main.go's main.\nREADME:\n%s\nmain.go:\n%s", block, want)
	}
}
