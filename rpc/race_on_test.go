//go:build race

package rpc_test

// raceEnabled: the race detector is on; sync.Pool then drops a share of
// what is put back, so allocation counts mean nothing.
const raceEnabled = true
