package handlertest_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeShowsTheHandlerTest keeps the README's handler-test block and TestPickTaskOnce the
// same code. No server is needed.
func TestReadmeShowsTheHandlerTest(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("handlertest_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const start = "<!-- handler-test: worker/inboxhandler/handlertest/handlertest_test.go -->\n```go\n"
	i := strings.Index(string(readme), start)
	if i < 0 {
		t.Fatalf("README.md has no block starting with %q", start)
	}
	block := string(readme[i+len(start):])
	block = block[:strings.Index(block, "```")]
	const marker = "// README: handler-test\n"
	want := string(src)
	want = want[strings.Index(want, marker)+len(marker):]
	want = want[:strings.Index(want, "\n}\n")+3]
	if block != want {
		t.Fatalf("README.md's handler-test block differs from TestPickTaskOnce.\nREADME:\n%s\ntest:\n%s", block, want)
	}
	if n := strings.Count(block, "\n"); n > 15 {
		t.Errorf("the README's handler test has %d lines; it must stay under 15", n)
	}
}
