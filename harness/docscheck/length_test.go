package docscheck

import (
	"os"
	"strings"
	"testing"
)

// TestDocsStayShort (no servers) keeps the long documents to what a reader needs today: words
// counted as `wc -w` counts them. README.md is what a newcomer reads in five minutes, in order
// (what and why, the first worker, testing, deploying, operating), each part linking to its doc;
// BENCHMARKS.md holds the current tables and how to reproduce
// them (the history of each run belongs in its commit message), RELIABILITY.md the scenarios and
// their latest results, and CHANGELOG.md's newest section one line per user-facing change.
func TestDocsStayShort(t *testing.T) {
	for _, d := range []struct {
		file    string
		section bool // only the first "## " section counts
		max     int
	}{
		{"README.md", false, 1500},
		{"BENCHMARKS.md", false, 5000},
		{"RELIABILITY.md", false, 4000},
		{"CHANGELOG.md", true, 1500},
	} {
		b, err := os.ReadFile("../../" + d.file)
		if err != nil {
			t.Fatal(err)
		}
		text, what := string(b), d.file
		if d.section {
			text, what = newestSection(text), d.file+"'s newest section"
			if text == "" {
				t.Errorf("%s has no \"## \" section", d.file)
				continue
			}
		}
		if n := len(strings.Fields(text)); n > d.max {
			t.Errorf("%s has %d words; at most %d: keep today's figures and facts, and move history to the commit messages", what, n, d.max)
		}
	}
}

// newestSection returns doc's first "## " section, from its heading to the next one.
func newestSection(doc string) string {
	i := strings.Index(doc, "\n## ")
	if i < 0 {
		return ""
	}
	s := doc[i+1:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j+1]
	}
	return s
}
