//go:build !race

package main

// raceEnabled says whether the binary was built with -race.
const raceEnabled = false
