package runtimeapi

import "syscall"

// sysProcAttr gives a function its own process group (killed as a whole)
// and has the kernel kill it if the local stack dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
