package sqlident

import "testing"

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sqsinbox", "_x", "a1_b2", "a23456789012345678901234567890123456789012345678901234567890123"} {
		if err := Validate("schema", name); err != nil {
			t.Errorf("Validate(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", "1abc", "Abc", "a-b", `a"b`, "a;drop table x", "a b", "public.x",
		"a234567890123456789012345678901234567890123456789012345678901234", "ä"} {
		if err := Validate("schema", name); err == nil {
			t.Errorf("Validate(%q) = nil, want an error", name)
		}
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	if got, want := Quote("s", "t"), `"s"."t"`; got != want {
		t.Fatalf("Quote = %s, want %s", got, want)
	}
}
