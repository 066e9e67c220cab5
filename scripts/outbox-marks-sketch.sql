-- outbox-marks-sketch.sql: what the relay's PostgreSQL work per message would be if "sent" were the
-- delete of a row from a narrow table of pending rows instead of an UPDATE of outbox_messages.
--
-- A: the outbox as it is (migrations 0001-0003): the producer's INSERT, the claim (a heap-only
--    UPDATE of the lease), and the "sent" UPDATE, which changes sent_at: a column of
--    outbox_messages_sent_at_idx and of the partial indexes' predicates, so every index of the
--    table (the primary key and the wide UNIQUE (destination, event_id) too) gets a new entry.
-- B: the same rows in a history table (no sent-state column, no sent_at index) plus a narrow
--    outbox_pending (id, fifo, lease and retry columns), both written by the producer's one
--    statement; the claim takes pending rows and reads the bodies by id; "sent" deletes the
--    pending rows, which writes no index entry.
--
-- Both run the same 20,000 rows, one INSERT per row, claims of 100 from an id cursor (as the relay
-- does), each step its own transaction, with the relay's planner settings. Run it against a scratch
-- database (it creates and drops the schema sketch_outbox):
--
--   PGOPTIONS='-c enable_seqscan=off -c enable_bitmapscan=off' psql "$DATABASE_URL" -f scripts/outbox-marks-sketch.sql
--
-- It prints microseconds per row of each step, and per row in all, for A and B.
DROP SCHEMA IF EXISTS sketch_outbox CASCADE; CREATE SCHEMA sketch_outbox;
CREATE TABLE sketch_outbox.msgs (
    id bigserial PRIMARY KEY, event_id text NOT NULL, kind text NOT NULL, destination text NOT NULL, fifo boolean NOT NULL,
    body text NOT NULL, attributes jsonb NOT NULL DEFAULT '{}', group_id text, dedup_id text, delay_seconds integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(), available_at timestamptz NOT NULL DEFAULT now(), claimed_until timestamptz, lease_token text,
    attempts integer NOT NULL DEFAULT 0, last_error text, sent_at timestamptz, parked_at timestamptz, UNIQUE (destination, event_id)) WITH (fillfactor=50);
CREATE INDEX ON sketch_outbox.msgs (destination, group_id, id) WHERE sent_at IS NULL AND fifo;
CREATE INDEX ON sketch_outbox.msgs (sent_at);
CREATE INDEX ON sketch_outbox.msgs (fifo, id) WHERE sent_at IS NULL;
-- B: history without sent-state indexes, and a narrow pending table
CREATE TABLE sketch_outbox.hist (
    id bigserial PRIMARY KEY, event_id text NOT NULL, kind text NOT NULL, destination text NOT NULL, fifo boolean NOT NULL,
    body text NOT NULL, attributes jsonb NOT NULL DEFAULT '{}', group_id text, dedup_id text, delay_seconds integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(), UNIQUE (destination, event_id));
CREATE TABLE sketch_outbox.pending (id bigint PRIMARY KEY, fifo boolean NOT NULL, available_at timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz, lease_token text, attempts integer NOT NULL DEFAULT 0, last_error text, parked_at timestamptz) WITH (fillfactor=50);
CREATE INDEX ON sketch_outbox.pending (fifo, id);
DO $$
DECLARE cur_a bigint := 0; cur_b bigint := 0; t0 timestamptz; i int; n int := 20000; ids bigint[]; tok text; nid bigint;
  ins_a numeric; claim_a numeric; sent_a numeric; ins_b numeric; claim_b numeric; sent_b numeric;
BEGIN
 t0 := clock_timestamp();
 FOR i IN 1..n LOOP
   INSERT INTO sketch_outbox.msgs (event_id, kind, destination, fifo, body) VALUES ('evt_'||md5(i::text), 'sqs', 'http://127.0.0.1:4566/000000000000/bench-relay-queue-abcdef', false, repeat('x',120)) ON CONFLICT (destination, event_id) DO NOTHING;
 END LOOP;
 ins_a := extract(epoch from clock_timestamp()-t0)*1e6/n; COMMIT;
 t0 := clock_timestamp();
 FOR i IN 1..n LOOP
   WITH m AS (INSERT INTO sketch_outbox.hist (event_id, kind, destination, fifo, body) VALUES ('evt_'||md5(i::text), 'sqs', 'http://127.0.0.1:4566/000000000000/bench-relay-queue-abcdef', false, repeat('x',120)) ON CONFLICT (destination, event_id) DO NOTHING RETURNING id, fifo)
   INSERT INTO sketch_outbox.pending (id, fifo) SELECT id, fifo FROM m;
 END LOOP;
 ins_b := extract(epoch from clock_timestamp()-t0)*1e6/n; COMMIT; ANALYZE sketch_outbox.msgs; ANALYZE sketch_outbox.hist; ANALYZE sketch_outbox.pending; COMMIT;
 claim_a := 0; sent_a := 0; claim_b := 0; sent_b := 0;
 FOR i IN 1..(n/100) LOOP
   tok := 'tok'||i;
   t0 := clock_timestamp();
   WITH p AS (SELECT o.id FROM sketch_outbox.msgs o WHERE o.fifo = false AND o.sent_at IS NULL AND o.parked_at IS NULL AND o.available_at <= now() AND (o.claimed_until IS NULL OR o.claimed_until < now()) AND o.id > cur_a ORDER BY o.fifo, o.id LIMIT 100 FOR UPDATE SKIP LOCKED)
   UPDATE sketch_outbox.msgs o SET claimed_until = now() + interval '60 s', lease_token = tok FROM p WHERE o.id = p.id;
   claim_a := claim_a + extract(epoch from clock_timestamp()-t0); COMMIT;
   SELECT array_agg(id), max(id) INTO ids, cur_a FROM sketch_outbox.msgs WHERE lease_token = tok;
   t0 := clock_timestamp();
   UPDATE sketch_outbox.msgs o SET sent_at = now(), claimed_until = NULL, lease_token = NULL, last_error = NULL WHERE o.id = ANY(ids) AND o.lease_token = tok;
   sent_a := sent_a + extract(epoch from clock_timestamp()-t0); COMMIT;
   t0 := clock_timestamp();
   WITH p AS (SELECT o.id FROM sketch_outbox.pending o WHERE o.fifo = false AND o.parked_at IS NULL AND o.available_at <= now() AND (o.claimed_until IS NULL OR o.claimed_until < now()) AND o.id > cur_b ORDER BY o.fifo, o.id LIMIT 100 FOR UPDATE SKIP LOCKED),
   u AS (UPDATE sketch_outbox.pending o SET claimed_until = now() + interval '60 s', lease_token = tok FROM p WHERE o.id = p.id RETURNING o.id)
   SELECT array_agg(h.id), max(h.id) INTO ids, cur_b FROM sketch_outbox.hist h WHERE h.id = ANY(ARRAY(SELECT id FROM u));
   claim_b := claim_b + extract(epoch from clock_timestamp()-t0); COMMIT;
   t0 := clock_timestamp();
   DELETE FROM sketch_outbox.pending o WHERE o.id = ANY(ids) AND o.lease_token = tok;
   sent_b := sent_b + extract(epoch from clock_timestamp()-t0); COMMIT;
 END LOOP;
 RAISE NOTICE 'A (sent_at marks): insert % claim % sent % | relay % total %', round(ins_a,1), round(claim_a*1e6/n,1), round(sent_a*1e6/n,1), round((claim_a+sent_a)*1e6/n,1), round(ins_a+(claim_a+sent_a)*1e6/n,1);
 RAISE NOTICE 'B (pending table): insert % claim % sent % | relay % total %', round(ins_b,1), round(claim_b*1e6/n,1), round(sent_b*1e6/n,1), round((claim_b+sent_b)*1e6/n,1), round(ins_b+(claim_b+sent_b)*1e6/n,1);
END $$;
DROP SCHEMA sketch_outbox CASCADE;
