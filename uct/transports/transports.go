// Package transports links every goshmem transport into a program. Importing
// it, blank, registers self, sm (posix and sysv shared memory), cma and tcp
// with uct, where ucp's contexts find them:
//
//	import _ "github.com/goshmem/goshmem/uct/transports"
//
// shmem imports it, so an OpenSHMEM program has every transport. A program
// that uses ucp directly imports it, or only the transports it wants (each
// transport package registers itself when imported): ucp itself imports
// none, as UCX's core loads its transports as modules rather than
// depending on them.
package transports

import (
	_ "github.com/goshmem/goshmem/uct/cma"
	_ "github.com/goshmem/goshmem/uct/self"
	_ "github.com/goshmem/goshmem/uct/sm"
	_ "github.com/goshmem/goshmem/uct/tcp"
)
