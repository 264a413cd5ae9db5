//go:build unix && !linux

package pgtest

import "syscall"

// helperProcAttr runs the helper in a process group of its own, so that
// Ctrl-C reaches the tests (which then stop it in order) and not it.
// Without Linux's parent-death signal, a test process killed before it can
// clean up leaves the helper to notice that its standard input has closed.
func helperProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
