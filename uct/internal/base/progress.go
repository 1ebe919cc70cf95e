package base

import "github.com/goshmem/goshmem/uct"

// ProgressReg is an iface's registration with its worker's progress.
// Embedded in the iface, it gives it uct.ProgressController's methods.
// The zero value is not registered: Register, Unregister, ProgressEnable
// and ProgressDisable then do nothing.
type ProgressReg struct {
	worker *uct.Worker
	id     int
}

// Register adds p (the iface) to worker's progress, enabled; a nil worker
// registers nothing.
func (r *ProgressReg) Register(worker *uct.Worker, p uct.Progresser) {
	if worker != nil {
		r.worker, r.id = worker, worker.ProgressAdd(p)
	}
}

// Unregister removes the iface from its worker's progress (on Close).
func (r *ProgressReg) Unregister() {
	if r.worker != nil {
		r.worker.ProgressUnregister(r.id)
	}
}

// ProgressEnable makes the iface's progress one its worker calls on every
// Progress again (uct.ProgressController).
func (r *ProgressReg) ProgressEnable() {
	if r.worker != nil {
		r.worker.SetProgressEnabled(r.id, true)
	}
}

// ProgressEnabled reports whether the iface is in its worker's progress
// and enabled (uct.ProgressController).
func (r *ProgressReg) ProgressEnabled() bool {
	return r.worker != nil && r.worker.ProgressEnabled(r.id)
}

// ProgressDisable makes the iface's progress one its worker calls only now
// and then, until its first event or ProgressEnable
// (uct.ProgressController).
func (r *ProgressReg) ProgressDisable() {
	if r.worker != nil {
		r.worker.SetProgressEnabled(r.id, false)
	}
}
