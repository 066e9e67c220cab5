DROP TABLE {{schema}}.loyalty_accounts;
