package ucp

// ucp links no transport; its tests select among all of them.
import _ "github.com/goshmem/goshmem/uct/transports"
