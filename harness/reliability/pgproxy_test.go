package reliability

import "testing"

// TestIsCommit: the proxy recognises the simple-protocol COMMIT that pgx sends, and nothing else.
func TestIsCommit(t *testing.T) {
	t.Parallel()
	for q, want := range map[string]bool{
		"commit\x00":          true,
		"COMMIT\x00":          true,
		" commit ; \x00":      true,
		"end\x00":             true,
		"rollback\x00":        false,
		"commit prepared 'x'": false,
		"SELECT 'commit'\x00": false,
		"":                    false,
	} {
		if got := isCommit([]byte(q)); got != want {
			t.Errorf("isCommit(%q) = %v, want %v", q, got, want)
		}
	}
}
