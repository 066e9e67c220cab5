DROP TABLE {{schema}}.ledger;
