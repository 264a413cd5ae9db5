package pgserver

import "syscall"

// sysProcAttr runs a PostgreSQL binary in its own process group (so that
// signals sent to the test process's group do not reach it and it can be
// killed as a whole), as uid:gid when uid >= 0, and with SIGQUIT (immediate
// shutdown) as its parent-death signal, so that a test process that dies
// without cleaning up does not leave a server behind.
func sysProcAttr(uid, gid int) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if uid >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return attr
}
