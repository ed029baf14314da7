//go:build !linux

package main

// stopWithParent has no portable equivalent; Ctrl-C still reaches the
// whole process group.
func stopWithParent() {}
