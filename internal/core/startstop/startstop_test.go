package startstop_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sqsinbox/sqsinbox/internal/core/startstop"
)

// TestLife (no server): the phases of a service, the causes its contexts end with, and the calls
// it refuses.
func TestLife(t *testing.T) {
	t.Parallel()
	errStop := errors.New("stopping")
	b := &startstop.Base{Cause: errStop, Name: "svc"}
	if b.Phase() != "new" {
		t.Fatalf("phase %q, want new", b.Phase())
	}
	if _, err := b.BeginStop(); err == nil {
		t.Fatal("Stop before Start was accepted")
	}
	if err := b.BeginStart(); err != nil {
		t.Fatal(err)
	}
	if err := b.BeginStart(); err == nil {
		t.Fatal("a second Start during the first was accepted")
	}
	b.EndStart(t.Context(), false) // a failed start
	if err := b.BeginStart(); err != nil {
		t.Fatalf("a Start after a failed one: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	b.EndStart(ctx, true)
	cancel() // Start's context ends: the service's contexts must not
	if b.Phase() != "running" || b.StopContext().Err() != nil || b.WorkContext().Err() != nil {
		t.Fatalf("phase %q, stop %v, work %v; want running, both live", b.Phase(), b.StopContext().Err(), b.WorkContext().Err())
	}
	if err := b.BeginStart(); err == nil {
		t.Fatal("Start on a running service was accepted")
	}
	first, err := b.BeginStop()
	if !first || err != nil {
		t.Fatalf("first stop: %v, %v", first, err)
	}
	if !errors.Is(context.Cause(b.StopContext()), errStop) || b.WorkContext().Err() != nil || b.Phase() != "stopping" || !b.Stopping() {
		t.Fatalf("after BeginStop: stop cause %v, work %v, phase %q", context.Cause(b.StopContext()), b.WorkContext().Err(), b.Phase())
	}
	if first, err := b.BeginStop(); first || err != nil {
		t.Fatalf("second stop: %v, %v; want not first, no error", first, err)
	}
	b.CancelWork()
	if !errors.Is(context.Cause(b.WorkContext()), errStop) {
		t.Fatalf("work cause %v", context.Cause(b.WorkContext()))
	}
	b.Finished()
	<-b.Done()
	if b.Phase() != "stopped" {
		t.Fatalf("phase %q, want stopped", b.Phase())
	}
}
