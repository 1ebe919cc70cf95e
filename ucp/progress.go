package ucp

// Progress callbacks of a worker's users: a library that keeps work of its
// own on a worker (replies that goroutines handed over, completions to
// deliver) registers a callback that every Progress calls, so that the work
// is done by whatever progresses the worker, whoever waits there (in UCX:
// uct_worker_progress_register_safe on the worker's uct worker; ucp has no
// public counterpart, so this is the worker's own extension).

// ProgressRegister adds fn to the worker's progress and returns an id for
// ProgressUnregister. Every Progress, and so every wait of the worker
// (Flush, Request.Wait, the loops of the libraries built on it), calls fn
// once, after the transports' progress, on the goroutine that progresses:
// fn has the rules of the worker's callbacks (it may start operations, send
// included, but must not call Progress or wait). It returns the number of
// events it handled, which Progress adds to its own: a wait loop that idles
// when Progress returns 0 does not idle while fn has work. fn is called
// for every Progress, so it should return at once, allocating nothing,
// when it has nothing to do. In ThreadMulti mode several goroutines may
// progress, and call fn, at once. Registering allocates; Progress does not.
func (w *Worker) ProgressRegister(fn func() int) int { return w.uw.ProgressRegister(fn) }

// ProgressUnregister removes the callback of id, which ProgressRegister
// returned; an unknown id is ignored. A Progress running on another
// goroutine may still call the callback once.
func (w *Worker) ProgressUnregister(id int) { w.uw.ProgressUnregister(id) }

// Wake tells the worker that a registered callback has work: a goroutine
// sleeping in Idle returns at once (the next Idle returns at once when none
// sleeps), and with FeatureWakeup the event counts as one for Arm and Wait,
// as a received message does. It may be called from any goroutine,
// whatever the thread mode, and allocates nothing.
func (w *Worker) Wake() { w.notify() }
