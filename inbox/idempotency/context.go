package idempotency

import (
	"context"

	"github.com/jackc/pgx/v5"
)

type txCtxKey struct{}

// Tx returns the transaction of the request being handled: the handler's writes through it
// commit together with the stored response, or not at all. It returns nil outside the
// middleware, and for a request that carries no key (which the middleware passes through); a
// handler that also serves such requests begins its own transaction then.
//
// The handler must not commit or roll back the transaction: the middleware does.
func Tx(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txCtxKey{}).(pgx.Tx)
	return tx
}

func withTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, txCtxKey{}, tx)
}
