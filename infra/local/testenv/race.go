//go:build race

package testenv

// Race reports whether the tests were built with the race detector: what
// they build (function binaries) is built the same way, reusing what the
// test build compiled.
const Race = true
