DROP TABLE {{schema}}.pick_tasks;
