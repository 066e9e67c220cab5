package reliability

import (
	"context"
	"errors"
)

var errTODO = errors.New("reliability: not written yet")

func runCommitCut(ctx context.Context, e *Env, s Size) (*Report, error)         { return nil, errTODO }
func runSQSOutage(ctx context.Context, e *Env, s Size) (*Report, error)         { return nil, errTODO }
func runDeleteFails(ctx context.Context, e *Env, s Size) (*Report, error)       { return nil, errTODO }
func runVisibilityExpires(ctx context.Context, e *Env, s Size) (*Report, error) { return nil, errTODO }
func runPoisonFake(ctx context.Context, e *Env, s Size) (*Report, error)        { return nil, errTODO }
