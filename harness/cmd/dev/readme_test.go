package main

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeShowsTheDevSteps keeps the steps the command prints and those of README.md's
// "Running it locally" and examples/firstworker/README.md the same lines. No server is needed.
func TestReadmeShowsTheDevSteps(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"../../../README.md", "../../../examples/firstworker/README.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"make dev", migrateFirstWorker, runFirstWorker, sendExample, selectPickTasks} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s lacks the line %s", path, want)
			}
		}
	}
}
