package pgserver

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

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

// children returns the pids of the processes whose parent is pid, read from
// /proc. PostgreSQL's children make themselves process group leaders, so a
// signal to the postmaster's group does not reach them.
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command (which is in parentheses and may
		// contain spaces): state, ppid, ...
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
