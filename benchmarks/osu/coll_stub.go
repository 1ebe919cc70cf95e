//go:build !osucoll

package main

// The collective tests need the team collectives of package shmem
// (Broadcast, Collect, FCollect, SumReduce, Alltoall); coll.go, built with
// the osucoll tag, has them. Without it they are listed but refuse to run.
// collBuilt reports that this build has the collective tests.
const collBuilt = false

func init() {
	for _, name := range collNames {
		register(&command{name: name, title: collTitles[name],
			unavailable: "the shmem collectives are not in this build (coll.go needs the build tag osucoll)"})
	}
}
