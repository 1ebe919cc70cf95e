package shmem

// Hooks for the tests of package shmem_test.

// CtxOutstanding drives the progress of c once and returns how many of its
// non-blocking operations have not completed, so that a test can wait for
// an operation that may never complete without hanging.
func CtxOutstanding(c *Ctx) int64 {
	c.check("CtxOutstanding")
	c.worker.Progress()
	return c.pending.Load()
}

// AbandonCtx releases c without completing its operations.
func AbandonCtx(c *Ctx) {
	ctxMu.Lock()
	defer ctxMu.Unlock()
	closePeers(c.peers)
	c.worker.Destroy()
	delete(contexts, c)
	c.peers, c.worker, c.destroyed = nil, nil, true
}
