package inbox

import (
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestParseUUIDAndTraceID (no server): UUIDs in text form, either case, round-trip; anything
// else (wrong length, misplaced dashes, a non-hex digit) is refused; trace ids are 32 hex digits.
func TestParseUUIDAndTraceID(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"5b1c2e0a-8f3d-4c2b-9a7e-1d2c3b4a5f60", "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"} {
		id, ok := parseUUID(s)
		if !ok || formatUUID(pgtype.UUID{Bytes: id, Valid: true}) != s {
			t.Errorf("parseUUID(%q) = %x, %v; want it back", s, id, ok)
		}
	}
	if id, ok := parseUUID("5B1C2E0A-8F3D-4C2B-9A7E-1D2C3B4A5F60"); !ok || hex.EncodeToString(id[:]) != "5b1c2e0a8f3d4c2b9a7e1d2c3b4a5f60" {
		t.Errorf("upper case: %x, %v", id, ok)
	}
	for _, s := range []string{"", "not-a-uuid", "5b1c2e0a8f3d4c2b9a7e1d2c3b4a5f60", "5b1c2e0a-8f3d-4c2b-9a7e-1d2c3b4a5f6", "5b1c2e0a-8f3d-4c2b-9a7e-1d2c3b4a5f6g",
		"5b1c2e0a8-f3d-4c2b-9a7e-1d2c3b4a5f60", "5b1c2e0a-8f3d-4c2b-9a7e-1d2c3b4a5f60x"} {
		if _, ok := parseUUID(s); ok {
			t.Errorf("parseUUID(%q) accepted", s)
		}
	}
	if b := parseTraceID("4bf92f3577b34da6a3ce929d0e0e4736"); hex.EncodeToString(b) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("parseTraceID = %x", b)
	}
	for _, s := range []string{"", "xyz", "4bf92f3577b34da6a3ce929d0e0e473", "4bf92f3577b34da6a3ce929d0e0e473g"} {
		if b := parseTraceID(s); b != nil {
			t.Errorf("parseTraceID(%q) = %x; want nil", s, b)
		}
	}
}
