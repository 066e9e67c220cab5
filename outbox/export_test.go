package outbox

// ClaimSQL returns the relay's claim statement and the planner settings each round runs first,
// for the tests that read the claim's plan. The claim's parameters: kinds, ClaimSize, the lease
// in seconds, the token, the id to start past, and the FIFO group to start past (destination,
// group id).
func ClaimSQL(rl *Relay) (plan, claim string) { return rl.sql.plan, rl.sql.claim }

// MarkRoundsMidBacklog is the number of rounds that carried marks alone while a claim was coming
// for them to ride with (neither stopping nor waiting on the last reports).
func MarkRoundsMidBacklog(rl *Relay) int64 { return rl.markRoundsHungry.Load() }
