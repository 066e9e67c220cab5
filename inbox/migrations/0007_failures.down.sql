DROP TABLE {{schema}}.dlq_discards;
DROP TABLE {{schema}}.inbox_failures;
