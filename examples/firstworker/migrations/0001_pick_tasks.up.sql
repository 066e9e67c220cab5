CREATE TABLE {{schema}}.pick_tasks (order_id text NOT NULL);
