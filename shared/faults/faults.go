// Package faults holds Rally's fault-order tests, in the spirit of Jepsen:
// random interleavings of writes and faults (batches redelivered whole or
// in halves, parked and redriven in any order, processors crashing between
// any two writes, Redis outages, erasures in between) run against
// DynamoDB Local and redis-server through the real handlers, processors,
// dead-letter archive and erasure job; every derived value is then
// compared with a plain model of the operations. A bug found by hand is
// pinned as a named case the generator must also be able to produce.
//
// The package has no code of its own besides this comment: its tests
// drive several features at once, which no single feature's tests may.
package faults
