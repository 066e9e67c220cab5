package inbox

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Step names the part of a claim-and-run that a [Hooks] call observes.
type Step string

const (
	// StepClaim is the claim: for [Inbox.Run], BEGIN, the transaction's settings and the claim's
	// INSERT, which travel in one round trip; for [Inbox.RunTx], the INSERT in the caller's
	// transaction.
	StepClaim Step = "claim"
	// StepCommit is [Inbox.Run]'s COMMIT of the claim and the function's writes. [Inbox.RunTx]
	// has none: its caller commits.
	StepCommit Step = "commit"
)

// StepOutcome says how a step ended.
type StepOutcome string

// Outcomes of a step.
const (
	// ClaimFresh means the claim was inserted: the event is new to the handler, and the function
	// runs.
	ClaimFresh StepOutcome = "fresh"
	// ClaimDuplicate means the claim existed (committed by an earlier delivery, or by the
	// transaction this one waited for): the event was processed before.
	ClaimDuplicate StepOutcome = "duplicate"
	// ClaimBlocked means another transaction held an uncommitted claim of the same event for
	// longer than Config.LockTimeout ([ErrClaimBlocked]).
	ClaimBlocked StepOutcome = "blocked"
	// Committed means COMMIT succeeded.
	Committed StepOutcome = "committed"
	// CommitUnknown means the connection failed during COMMIT: whether it happened is unknown
	// ([ErrCommitUnknown]).
	CommitUnknown StepOutcome = "unknown"
	// StepFailed means the step failed with Err.
	StepFailed StepOutcome = "failed"
)

// StepInfo describes one step of a claim-and-run to [Hooks]. Hooks must not keep it after Done
// returns.
type StepInfo struct {
	// Step is the step.
	Step Step
	// Handler is the handler the event is claimed for.
	Handler string
	// Key is the event key as given to Run. It is the producer's id of the event, but a key taken
	// from a body field can hold personal data: a hook that exports it should let its user choose.
	Key string
	// InTx is true for [Inbox.RunTx]'s claim, made in the caller's transaction.
	InTx bool

	// Outcome is how the step ended. Set before Done.
	Outcome StepOutcome
	// Duration is how long the step took. Set before Done.
	Duration time.Duration
	// Err is the step's error, as Run returns it, or nil. Set before Done.
	Err error
	// SQLState is the SQLSTATE of a PostgreSQL error in Err (55P03 for a blocked claim), or "".
	// Set before Done.
	SQLState string

	start time.Time
}

// Hooks observe the claims and commits of [Inbox.Run] and [Inbox.RunTx], for tracing and metrics
// (the workerotel package records them as OpenTelemetry spans). Either func may be nil. Both are
// called on the goroutine that called Run, so they must be fast; they must not use the
// transaction. With Config.Hooks nil, Run pays one nil check per step and allocates nothing.
type Hooks struct {
	// Start is called before each step. It returns the context the step's statements run with
	// (derived from ctx, for example holding a span, so that a pgx tracer's spans nest in it),
	// which is then passed to Done. The function of Run does not see it: it runs with Run's ctx.
	Start func(ctx context.Context, s *StepInfo) context.Context
	// Done is called after each step, with the context Start returned and s's Outcome, Duration
	// and Err set.
	Done func(ctx context.Context, s *StepInfo)
}

// start begins the observation of a step; on a nil *Hooks it returns ctx and nil.
func (h *Hooks) start(ctx context.Context, step Step, handler, key string, inTx bool) (_ context.Context, s *StepInfo) {
	if h != nil {
		ctx, s = h.begin(ctx, step, handler, key, inTx)
	}
	return ctx, s
}

func (h *Hooks) begin(ctx context.Context, step Step, handler, key string, inTx bool) (context.Context, *StepInfo) {
	s := &StepInfo{Step: step, Handler: handler, Key: key, InTx: inTx, start: time.Now()}
	if h.Start != nil {
		ctx = h.Start(ctx, s)
	}
	return ctx, s
}

// claimed ends the observation of a claim that inserted rows rows, or failed with err.
func (h *Hooks) claimed(ctx context.Context, s *StepInfo, rows int64, err error) {
	if h != nil {
		h.claimDone(ctx, s, rows, err)
	}
}

func (h *Hooks) claimDone(ctx context.Context, s *StepInfo, rows int64, err error) {
	switch {
	case errors.Is(err, ErrClaimBlocked):
		s.Outcome = ClaimBlocked
	case err != nil:
		s.Outcome = StepFailed
	case rows == 0:
		s.Outcome = ClaimDuplicate
	default:
		s.Outcome = ClaimFresh
	}
	h.done(ctx, s, err)
}

// committed ends the observation of a COMMIT that failed with err, or succeeded.
func (h *Hooks) committed(ctx context.Context, s *StepInfo, err error) {
	if h != nil {
		h.commitDone(ctx, s, err)
	}
}

func (h *Hooks) commitDone(ctx context.Context, s *StepInfo, err error) {
	switch {
	case errors.Is(err, ErrCommitUnknown):
		s.Outcome = CommitUnknown
	case err != nil:
		s.Outcome = StepFailed
	default:
		s.Outcome = Committed
	}
	h.done(ctx, s, err)
}

func (h *Hooks) done(ctx context.Context, s *StepInfo, err error) {
	s.Duration = time.Since(s.start)
	s.Err = err
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		s.SQLState = pgErr.Code
	}
	if h.Done != nil {
		h.Done(ctx, s)
	}
}
