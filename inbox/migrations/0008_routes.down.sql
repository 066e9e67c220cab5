DROP TABLE {{schema}}.inbox_routes;
