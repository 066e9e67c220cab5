package sqstest

import "testing"

func TestNodeAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"v22.5.0", true},
		{"v22.23.5", true},
		{"v23.0.0", true},
		{"v22.4.9", false},
		{"v20.20.2", false},
		{"v3.100.0", false},
		{"22.5.0", true},
		{"v22.5", false},
		{"", false},
		{"v22.x.0", false},
	} {
		if got := nodeAtLeast(c.v, minNode); got != c.want {
			t.Errorf("nodeAtLeast(%q) = %t, want %t", c.v, got, c.want)
		}
	}
}
