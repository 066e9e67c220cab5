package reliability

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Proc is a worker process.
type Proc struct {
	Cfg  WorkerConfig
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil // enough to tell what happened
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartProc starts a worker process of the run.
func (r *Run) StartProc(cfg WorkerConfig) (*Proc, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return r.startProc(cfg, EnvWorker+"="+string(raw))
}

// startProc starts a process of the run named by cfg.ID, with env added to its environment.
func (r *Run) startProc(cfg WorkerConfig, env string) (*Proc, error) {
	p := &Proc{Cfg: cfg, cmd: r.Env.Command(), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env)
	// Its whole output also goes to AuditDir/out-<id>.txt (kept when a test fails): a race
	// report or a panic is longer than what the checks quote.
	f, err := os.Create(filepath.Join(r.AuditDir, "out-"+cfg.ID+".txt"))
	if err != nil {
		return nil, err
	}
	w := io.MultiWriter(p.out, f)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		_ = f.Close()
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	r.procs = append(r.procs, p)
	return p, nil
}

// Output returns what the process wrote.
func (p *Proc) Output() string { return p.out.String() }

// Exited reports whether the process has exited, and its error.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Signal sends sig to the process, if it runs.
func (p *Proc) Signal(sig syscall.Signal) error {
	if ok, _ := p.Exited(); ok {
		return errors.New("reliability: process already exited")
	}
	return p.cmd.Process.Signal(sig)
}

// Kill SIGKILLs the process (waking it first if stopped) and waits for it.
func (p *Proc) Kill() {
	if ok, _ := p.Exited(); ok {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Term sends SIGTERM and waits up to timeout for the exit; it returns the exit error, or an
// error if the process did not exit in time (it is then killed).
func (p *Proc) Term(timeout time.Duration) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("reliability: worker %s did not exit within %v of SIGTERM", p.Cfg.ID, timeout)
	}
}

// Wait waits up to timeout for the process to exit by itself.
func (p *Proc) Wait(timeout time.Duration) (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(timeout):
		return false, nil
	}
}
