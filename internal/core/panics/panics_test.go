package panics_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sqsinbox/sqsinbox/internal/core/panics"
)

func TestCall(t *testing.T) {
	t.Parallel()
	if err := panics.Call(func() error { return io.EOF }); !errors.Is(err, io.EOF) {
		t.Errorf("Call = %v, want the function's own error", err)
	}
	err := panics.Call(func() error { panic(io.ErrUnexpectedEOF) })
	var pe *panics.Error
	if !errors.As(err, &pe) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Call = %v, want a *panics.Error wrapping the panic value", err)
	}
	if !strings.Contains(string(pe.Stack), "panics_test.go") {
		t.Errorf("the stack does not show where the panic happened:\n%s", pe.Stack)
	}
	if err := panics.Call(func() error { panic("text") }); !strings.HasPrefix(err.Error(), "handler panicked: text") {
		t.Errorf("Call = %q", err)
	}
}
