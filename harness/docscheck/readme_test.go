package docscheck

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeFiguresAreBenchmarked (no servers): every ratio (0.81×, 0.92–1.08×), allocation count
// and MiB figure in the README's Performance section is a figure of BENCHMARKS.md, so that the
// README cannot quote a number the tables no longer hold.
func TestReadmeFiguresAreBenchmarked(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	bench, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	i := strings.Index(section, "\n## Performance\n")
	if i < 0 {
		t.Fatal(`README.md has no "## Performance" section`)
	}
	section = section[i+1:]
	if j := strings.Index(section[1:], "\n## "); j >= 0 {
		section = section[:j+1]
	}
	figures := regexp.MustCompile(`(\d+(?:\.\d+)?)(?:–(\d+(?:\.\d+)?))?(×| allocations| MiB)`)
	found := 0
	for _, m := range figures.FindAllStringSubmatch(section, -1) {
		for _, n := range m[1:3] {
			if n == "" {
				continue
			}
			found++
			if !regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(n) + `([^0-9]|$)`).Match(bench) {
				t.Errorf("README's Performance section says %q; BENCHMARKS.md has no %s", m[0], n)
			}
		}
	}
	if found < 10 {
		t.Errorf("found %d figures in README's Performance section; the pattern no longer reads it", found)
	}
}
