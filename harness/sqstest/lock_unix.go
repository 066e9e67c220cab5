//go:build unix

package sqstest

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on the file at path (creating it), waiting for it, so that
// test binaries running at once install a tool one at a time. The returned function releases it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil // closing the file releases the lock
}
