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

// ProgressEnable puts the iface back in its worker's progress
// (uct.ProgressController).
func (r *ProgressReg) ProgressEnable() {
	if r.worker != nil {
		r.worker.SetProgressEnabled(r.id, true)
	}
}

// ProgressDisable takes the iface out of its worker's progress until
// ProgressEnable (uct.ProgressController).
func (r *ProgressReg) ProgressDisable() {
	if r.worker != nil {
		r.worker.SetProgressEnabled(r.id, false)
	}
}
