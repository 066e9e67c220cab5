package inboxhandler

import (
	"context"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/worker"
)

// HandleBatchWith exposes handleBatch to the tests: a batch served by several handlers.
func HandleBatchWith(ctx context.Context, ib *inbox.Inbox, b *worker.Batch, pick func(*worker.Message) (*Handler, error)) []error {
	return handleBatch(ctx, ib, b, pick)
}
