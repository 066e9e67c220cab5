package outbox

// ClaimSQL returns the relay's claim statement and the planner settings each round runs first,
// for the tests that read the claim's plan. The claim's parameters: kinds, ClaimSize, the lease
// in seconds, the token, the id to start past, and the FIFO group to start past (destination,
// group id).
func ClaimSQL(rl *Relay) (plan, claim string) { return rl.sql.plan, rl.sql.claim }
