DROP TABLE {{schema}}.charges;
