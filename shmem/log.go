package shmem

import (
	"sync/atomic"

	"github.com/goshmem/goshmem/ucs"
)

// loggerBox holds the logger SetLogger sets.
type loggerBox struct{ l ucs.Logger }

var logger atomic.Pointer[loggerBox]

// SetLogger sets the logger of the library on this PE: its warnings, the
// errors it cannot return, stall reports and the message of a fatal
// failure go there, and so do those of the layers below (ucp, the
// transports, bootstrap) from the next Init on. Call it before Init. The
// default, and what a nil l sets, is ucs.DefaultLogger(): standard error,
// at the level UCX_LOG_LEVEL names (warn by default).
func SetLogger(l ucs.Logger) { logger.Store(&loggerBox{l}) }

// lg returns the library's logger.
func lg() ucs.Logger {
	if b := logger.Load(); b != nil && b.l != nil {
		return b.l
	}
	return ucs.DefaultLogger()
}
