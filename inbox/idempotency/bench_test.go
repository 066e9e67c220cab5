package idempotency_test

func printBenchTable() {}
