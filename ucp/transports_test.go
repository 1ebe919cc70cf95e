package ucp

// The tests select among every transport.
import _ "github.com/goshmem/goshmem/uct/transports"
