package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqsinbox/sqsinbox/inbox"
	"github.com/sqsinbox/sqsinbox/inbox/idempotency"
)

// An API whose POST /payments requires an Idempotency-Key. It needs a server, so it has no
// output.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := inbox.Migrate(ctx, pool, ""); err != nil { // creates idempotency_keys
		log.Fatal(err)
	}
	mw, err := idempotency.New(pool, &idempotency.Config{
		// Where real authentication plugs in: keys are scoped by what this returns.
		Principal: func(r *http.Request) (string, error) {
			user, _, ok := r.BasicAuth()
			if !ok {
				return "", errors.New("not authenticated")
			}
			return user, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.RequireKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id int64
		// The insert commits with the stored response, or not at all.
		err := idempotency.Tx(r.Context()).QueryRow(r.Context(),
			"INSERT INTO payments (amount) VALUES (100) RETURNING id").Scan(&id)
		if err != nil {
			http.Error(w, "could not record the payment", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})))
	go func() { _ = mw.PurgeLoop(ctx) }()
	log.Fatal(http.ListenAndServe(":8080", mux))
}

func ExampleParseKey() {
	for _, v := range []string{`"8e03978e-40d5"`, `8e03978e-40d5`, `"a", "b"`, `""`} {
		key, err := idempotency.ParseKey([]string{v})
		fmt.Printf("%-16s -> %q %v\n", v, key, err)
	}
	// Output:
	// "8e03978e-40d5"  -> "8e03978e-40d5" <nil>
	// 8e03978e-40d5    -> "8e03978e-40d5" <nil>
	// "a", "b"         -> "" idempotency: more than one Idempotency-Key
	// ""               -> "" idempotency: the Idempotency-Key is empty
}
