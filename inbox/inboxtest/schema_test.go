package inboxtest

import (
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/internal/core/sqlident"
)

// FuzzSchemaName: whatever a test is called, its schema's name is a valid identifier with the
// prefix, and two calls give two names. No server.
func FuzzSchemaName(f *testing.F) {
	for _, name := range []string{"", "TestX", "TestX/sub_case#01", `x"; DROP SCHEMA public CASCADE; --`,
		strings.Repeat("é", 80), strings.Repeat("a", 200), "___", "Ünïcödé/ß"} {
		f.Add(name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		a, b := schemaName(name), schemaName(name)
		if err := sqlident.Validate("schema", a); err != nil || !strings.HasPrefix(a, SchemaPrefix) {
			t.Fatalf("schemaName(%q) = %q: %v", name, a, err)
		}
		if a == b {
			t.Fatalf("schemaName(%q) gave %q twice", name, a)
		}
	})
}
