package main

import (
	"os"
	"syscall"
)

// stopWithParent asks the kernel for SIGTERM when the parent dies. `go run`
// (and so `make dev`) does not pass SIGTERM on to the program it runs;
// without this, killing it would orphan the stack and DynamoDB Local.
func stopWithParent() {
	const prSetPdeathsig = 1
	parent := os.Getppid()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetPdeathsig, uintptr(syscall.SIGTERM), 0)
	if os.Getppid() != parent {
		// The parent died before the request took effect.
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}
