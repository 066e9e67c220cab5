package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process a test started and means to kill: a worker or relay of a run (the test
// binary re-executed), or any program (an example's binary). Its output is kept
// in memory and in a file, and on Linux the kernel kills it when the test binary dies.
type Proc struct {
	// ID names the process in errors and in its output file.
	ID string
	// Cfg is a worker process's configuration.
	Cfg WorkerConfig
	// Log is the file that holds the process's whole output (out-<ID>.txt): kept when a test
	// fails, since a race report or a panic is longer than what the checks quote.
	Log  string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

type syncBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	full bool
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		s.full = true // the rest is in the file only
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.full
}

// Procs starts processes and keeps them, so that the test can end them all, and look at every
// one's output, at the end.
type Procs struct {
	// Dir receives each process's output file, out-<id>.txt.
	Dir string
	// Env is added to every process's environment, after the test binary's own.
	Env []string

	mu  sync.Mutex
	all []*Proc
}

// Start starts cmd as the process id, with env added to its environment after Procs.Env.
func (ps *Procs) Start(id string, cmd *exec.Cmd, env ...string) (*Proc, error) {
	p := &Proc{ID: id, Log: filepath.Join(ps.Dir, "out-"+id+".txt"), cmd: cmd,
		out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Env = append(append(cmd.Environ(), ps.Env...), env...)
	dieWithParent(cmd)
	f, err := os.Create(p.Log)
	if err != nil {
		return nil, err
	}
	w := io.MultiWriter(p.out, f)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("reliability: start %s: %w", id, err)
	}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p, nil
}

// All returns every process started, in order.
func (ps *Procs) All() []*Proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return append([]*Proc(nil), ps.all...)
}

// KillAll SIGKILLs the processes still running and waits for them.
func (ps *Procs) KillAll() {
	for _, p := range ps.All() {
		p.Kill()
	}
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
	p, err := r.procs.Start(cfg.ID, r.Env.Command(), env)
	if err != nil {
		return nil, err
	}
	p.Cfg = cfg
	return p, nil
}

// Output returns what the process wrote.
func (p *Proc) Output() string {
	s, full := p.out.String()
	if full {
		if b, err := os.ReadFile(p.Log); err == nil {
			return string(b)
		}
	}
	return s
}

// Tail returns the last n bytes of the process's output.
func (p *Proc) Tail(n int) string { return tail(p.Output(), n) }

// Getenv returns the value of key in the process's environment.
func (p *Proc) Getenv(key string) string {
	v := ""
	for _, kv := range p.cmd.Env {
		if rest, ok := strings.CutPrefix(kv, key+"="); ok {
			v = rest // the last one wins, as in the process
		}
	}
	return v
}

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
		return fmt.Errorf("reliability: process %s did not exit within %v of SIGTERM", p.ID, timeout)
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

// BuildProgram builds the Go package in dir into a binary in the directory out, with -race when
// the running binary has it, and returns the binary's path.
func BuildProgram(ctx context.Context, dir, out string) (string, error) {
	name := filepath.Base(dir)
	if abs, err := filepath.Abs(dir); err == nil {
		name = filepath.Base(abs) // "." names the directory
	}
	bin := filepath.Join(out, name)
	args := []string{"build", "-o", bin}
	if bi, ok := debug.ReadBuildInfo(); ok && slices.Contains(bi.Settings, debug.BuildSetting{Key: "-race", Value: "true"}) {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("reliability: go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, b)
	}
	return bin, nil
}

// FreeAddr returns a loopback address (127.0.0.1:port) no one listens on, for a process to
// listen on.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}
