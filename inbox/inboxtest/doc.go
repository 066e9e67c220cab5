// Package inboxtest gives each test a PostgreSQL schema of its own, with the inbox's tables and
// the test's own, and an [inbox.Inbox] on it, so that a handler test needs no hand-written setup:
//
//	func TestPickTaskOnce(t *testing.T) {
//		db := inboxtest.New(t, inboxtest.WithMigrations(migrations, "migrations"))
//		h, err := inboxhandler.New(db.Inbox, "warehouse", nil, pick)
//		...
//	}
//
// [New] creates a fresh schema with a generated name, applies the inbox's migrations
// ([inbox.Migrate]) and then the test's own ([WithMigrations], [WithSQL], [WithSetup], in the order
// given) inside it, and returns a [DB]: a pool whose connections have search_path set to the
// schema (so the test's unqualified table names land there, and its queries find them), the
// inbox, and the schema's name. When the test ends, the schema is dropped with everything in it
// and the pool is closed. Tests that each call New can run in parallel: they share nothing.
//
// It pairs with [github.com/sqsinbox/sqsinbox/worker/inboxhandler/handlertest], which delivers
// messages to a handler as the worker would.
//
// # Where the database comes from
//
// The environment variable TEST_DATABASE_URL names the database (a postgres:// URL, or pgx's
// key=value form); [WithDatabaseURL] names another. The fixture creates and drops schemas in it
// (it needs the CREATE privilege on the database) and changes nothing else, so one database
// serves every test, run after run, and a developer's and a CI's alike. With `make dev` running
// in the sqsinbox repository, its database will do:
//
//	export TEST_DATABASE_URL=$DATABASE_URL   # the DATABASE_URL make dev prints
//
// Any local PostgreSQL does too; with Docker instead:
//
//	docker compose -f localstack/docker-compose.yml up -d --wait   # in the sqsinbox repository
//	export TEST_DATABASE_URL='postgres://sqsinbox:sqsinbox@127.0.0.1:5433/sqsinbox?sslmode=disable'
//
// When neither names a database, or it cannot be reached, New fails the test and says so: it
// never skips. A test binary killed before its cleanups ran leaves its schemas behind; their
// names begin with [SchemaPrefix].
//
// # The test's own tables
//
// [WithMigrations] applies numbered NNNN_name.up.sql / .down.sql files, as the
// [github.com/sqsinbox/sqsinbox/migrate] package does in production: {{schema}} in a file is the
// test's schema, quoted. Unqualified names land in the test's schema too. Names qualified with a
// fixed schema (warehouse.orders) do not: they would be shared between tests.
package inboxtest
