DROP TABLE {{schema}}.payments;
