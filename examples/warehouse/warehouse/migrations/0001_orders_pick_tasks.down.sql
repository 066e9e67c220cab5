DROP TABLE {{schema}}.pick_tasks;
DROP TABLE {{schema}}.orders;
