package pgtest

import "syscall"

// helperProcAttr runs the helper in a process group of its own, so that
// Ctrl-C reaches the tests (which then stop it in order) and not it, and
// with SIGTERM as its parent-death signal: a test process that dies without
// cleaning up still has its server stopped.
func helperProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
