//go:build unix && !linux

package pgserver

import "syscall"

// sysProcAttr runs a PostgreSQL binary in its own process group, as uid:gid
// when uid >= 0. Without Linux's parent-death signal, a test process killed
// before it can clean up leaves its server running.
func sysProcAttr(uid, gid int) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if uid >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return attr
}

// children is not implemented here: Kill then reaches only the postmaster's
// process group.
func children(pid int) []int { return nil }
