// Package idempotency is net/http middleware for the Idempotency-Key header
// (draft-ietf-httpapi-idempotency-key-header), backed by the inbox's PostgreSQL database. A
// client that retries a POST because the response was lost gets the stored response back, byte
// for byte, and the handler's effect commits at most once per (client, key).
//
//	mw, err := idempotency.New(pool, &idempotency.Config{Principal: clientOf})
//	mux.Handle("POST /payments", mw.RequireKey(createPayment))
//
// The handler does its writes through [Tx]: they commit in the same transaction as the stored
// response, or not at all.
//
// # What a request gets
//
// A covered request (POST and PATCH by default, see Config.Methods) with an Idempotency-Key:
//
//   - First attempt: the handler runs with the request's transaction in its context. Its
//     response is buffered, and stored (status, the allow-listed headers of
//     Config.ReplayHeaders, and the body) in that transaction. The client gets the response only
//     after the commit, with every header the handler set.
//   - Retry after completion: the stored response is replayed with Idempotent-Replayed: true.
//     The handler does not run. Set-Cookie and other headers not on the allow-list are not
//     replayed.
//   - Retry while the first attempt runs: 409 with Retry-After, after waiting up to Config.Wait
//     for the attempt to finish (then it is a replay).
//   - The same key with another method, route or body: 422. The stored response is untouched.
//   - A missing key on a route that requires one ([Middleware.RequireKey], Config.RequireKey), an
//     empty key, one over 255 characters, a control character, or more than one key: 400.
//   - A body over Config.MaxBodyBytes: 413, before anything is stored.
//
// The middleware's own errors are application/problem+json ([Problem]) with a "code" member
// (CodeKeyInFlight, ...). Without a key, a request passes through untouched, and [Tx] returns
// nil.
//
// # Failures
//
// If the handler panics, outlives Config.Lease, writes a response larger than
// Config.MaxResponseBytes, or answers a status that Config.Store refuses (by default every 5xx),
// the transaction rolls back: its writes and the key go together, and a retry runs the handler
// again. A panic or an oversized response becomes a 500 problem; a refused status reaches the
// client as the handler wrote it, once. If the commit's outcome is unknown (the connection broke
// during COMMIT) the client gets 500 and should retry with the same key: the retry replays if
// the commit happened, and runs if not.
//
// # Keys and clients
//
// Keys are scoped by Config.Principal, the authenticated client: two clients with the same key
// never see each other's responses. A request whose principal is empty gets 401, like one whose
// Principal returns an error: callers without an identity never share a key space. The table
// stores SHA-256 of the length-prefixed (principal, key), never the key, which can hold personal
// data; nothing is logged with it either. A key's request fingerprint is SHA-256 of the method,
// the route (Config.Route; by default the path and query) and SHA-256 of the body.
//
// # How concurrency is handled
//
// The first attempt inserts the key's row first, in the same READ COMMITTED transaction that
// then runs the handler and finally updates the row with the response. The primary key is the
// lock, as for the inbox: while that transaction is open, the row is uncommitted, and a
// concurrent retry's INSERT ... ON CONFLICT waits on it. The retry's transaction sets
// lock_timeout to Config.Wait, so the wait ends either with the first attempt's commit (the
// retry finds the stored response and replays it), its rollback (the retry inserts the row and
// runs: its turn), or a lock timeout, which is answered 409. Every committed row therefore holds
// a response, a rollback of any kind takes the in-flight row with it, and no state machine of
// row states is needed.
//
// The alternative, committing an "in flight" row in a transaction of its own before the
// handler's transaction, makes the in-flight state visible without waiting, but costs an extra
// commit (a WAL flush) per first attempt, needs a delete when the handler fails, and leaves rows
// behind that only a lease can clear. Here a crashed process's attempt vanishes as soon as the
// database notices its connection is gone.
//
// A process that hangs or loses its network keeps its connection open, so the lease bounds an
// attempt on both sides: the handler's context ends after Config.Lease ([ErrLeaseExpired]), and
// the transaction is begun with statement_timeout and idle_in_transaction_session_timeout set
// to the lease, so the database ends a session left idle in the attempt (or running one
// statement) for longer, and the key becomes claimable. Correctness never rests on the lease:
// only one transaction can hold the row.
//
// # Cost
//
// The claim is one statement: it reads the key by its primary key and, only if no committed row
// is visible, inserts it. A replay is therefore one primary-key lookup (the same buffers as a
// plain SELECT by key, checked with EXPLAIN), in a transaction that writes nothing and ends in
// ROLLBACK: three round trips (BEGIN with the settings, the claim pipelined with resetting
// lock_timeout, ROLLBACK) and no commit to flush. A first attempt adds to the handler's own
// transaction that claim (a missed lookup and an INSERT, one round trip) and one UPDATE with the
// response (one round trip); the settings ride on the BEGIN. So a first attempt costs two round
// trips more than the bare handler, and its commit writes the stored response too.
//
// # Expiry
//
// A stored key lives for Config.TTL: 24 hours by default, and never less ([MinTTL]). The expiry
// is stored with the key (expires_at, now() + TTL by the database's clock when the response is
// stored), so every process agrees on it: past it, the key is a new request, its row is taken
// over and the handler runs again. [Middleware.Purge], [Middleware.PurgeLoop], [PurgeExpired]
// and `sqsinbox purge` delete rows whose expiry has passed, with the inbox's purge machinery
// (short batches, the database's clock, one process at a time). None of them needs to know the
// TTL, so a purge run by a cron job never cuts a 72-hour TTL to 24 hours, and raising or
// lowering the TTL changes only keys stored afterwards. Publish the TTL to your API's clients:
// "Idempotency keys are kept for at least 24 hours".
//
// # Schema
//
// The idempotency_keys table is created by the inbox's migrations ([inbox.Migrate], or
// `sqsinbox migrate up`), in the inbox's schema (Config.Schema); migration 0003 adds each key's
// expires_at (rows stored before it get created_at + 24 hours). Nothing is created on first
// use; [Middleware.Check] reports a missing table, or one without expires_at, at start.
//
// # Limits
//
// Streaming responses (http.Flusher), hijacking and 1xx responses are not supported: the
// response is buffered until the commit. Requests covered by the middleware have their body read
// in full (up to Config.MaxBodyBytes) before the handler runs.
package idempotency
