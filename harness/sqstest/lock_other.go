//go:build !unix

package sqstest

// lockFile does nothing outside Unix: concurrent installs may then both run, and the rename
// into place still lets only a complete one be used.
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
