//go:build !linux

package runtimeapi

import "syscall"

// sysProcAttr gives a function its own process group, killed as a whole.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
