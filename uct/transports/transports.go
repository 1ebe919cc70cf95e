// Package transports links in every transport of goshmem: importing it
// registers the components self, posix and sysv (uct/sm), cma and tcp with
// uct.Register, for ucp to select, and with tcp the connection manager
// that ucp's listeners and socket-address endpoints use.
//
// ucp itself imports no transport, as UCX's protocol layer loads its
// transports rather than naming them: a program that uses ucp imports
// this package (or the transports it wants), as
//
//	import _ "github.com/goshmem/goshmem/uct/transports"
//
// Package shmem imports it already.
package transports

import (
	_ "github.com/goshmem/goshmem/uct/cma"
	_ "github.com/goshmem/goshmem/uct/self"
	_ "github.com/goshmem/goshmem/uct/sm"
	_ "github.com/goshmem/goshmem/uct/tcp"
)
