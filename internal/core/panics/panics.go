// Package panics turns a panic at a handler boundary into an error with the stack attached. The
// worker, the inbox and the HTTP middleware share it; worker.PanicError and inbox.PanicError are
// aliases of [Error].
package panics

import (
	"fmt"
	"runtime/debug"
)

// Error is the error a panicking handler becomes.
type Error struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

func (e *Error) Error() string {
	return fmt.Sprintf("handler panicked: %v\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value if it is an error.
func (e *Error) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Recovered returns the *Error for v, a value recover returned, with the current stack. Call it
// in the deferred function that recovered.
func Recovered(v any) *Error { return &Error{Value: v, Stack: debug.Stack()} }

// Call runs fn and returns its error, or an *Error if it panicked. The panic never crosses to the
// caller's goroutine.
func Call(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &Error{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}
