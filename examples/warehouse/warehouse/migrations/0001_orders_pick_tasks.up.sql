-- Orders, as the warehouse knows them.
CREATE TABLE {{schema}}.orders (
    id         text        PRIMARY KEY,
    status     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One row is one box on its way to the door. There is deliberately no unique constraint on
-- order_id: only the inbox stands between a second delivery of OrderPaid and a second box.
CREATE TABLE {{schema}}.pick_tasks (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   text        NOT NULL REFERENCES {{schema}}.orders (id),
    event_id   text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX pick_tasks_order_id_idx ON {{schema}}.pick_tasks (order_id);
