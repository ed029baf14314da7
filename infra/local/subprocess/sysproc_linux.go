package subprocess

import "syscall"

func sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig covers the case Stop cannot: the parent dying abruptly.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
