package main

import (
	"strings"
	"testing"
)

// TestHelpNamesBothLayouts (no servers): `sqsinbox --help` names both layouts `inbox layout`
// switches to, generations and keytime.
func TestHelpNamesBothLayouts(t *testing.T) {
	t.Parallel()
	r := cli(t, "", "--help")
	if r.code != 0 || !strings.Contains(r.stderr, "layout generations|keytime") {
		t.Errorf("--help: exit %d; want a line naming layout generations|keytime:\n%s", r.code, r.stderr)
	}
}
