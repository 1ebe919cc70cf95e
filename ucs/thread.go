package ucs

import "fmt"

// ThreadMode is the thread-safety level of a worker or context
// (ucs_thread_mode_t).
type ThreadMode int

// The thread modes, from least to most safe.
const (
	// ThreadModeSingle: only one goroutine (the one that created the object)
	// may use it.
	ThreadModeSingle ThreadMode = iota
	// ThreadModeSerialized: many goroutines may use it, one at a time.
	ThreadModeSerialized
	// ThreadModeMulti: many goroutines may use it at once.
	ThreadModeMulti
)

func (m ThreadMode) String() string {
	switch m {
	case ThreadModeSingle:
		return "single"
	case ThreadModeSerialized:
		return "serialized"
	case ThreadModeMulti:
		return "multi"
	}
	return fmt.Sprintf("ThreadMode(%d)", int(m))
}

// MemoryType is the kind of memory a buffer lives in (ucs_memory_type_t).
type MemoryType int

// Memory types. Only MemoryTypeHost is backed by goshmem's transports today;
// the others exist so that parameters can name them and be rejected clearly.
const (
	MemoryTypeHost MemoryType = iota
	MemoryTypeCUDA
	MemoryTypeCUDAManaged
	MemoryTypeROCM
	MemoryTypeROCMManaged
	MemoryTypeRDMA
	MemoryTypeZE
	MemoryTypeUnknown
)

var memoryTypeNames = [...]string{"host", "cuda", "cuda-managed", "rocm", "rocm-managed", "rdma", "ze", "unknown"}

func (t MemoryType) String() string {
	if t >= 0 && int(t) < len(memoryTypeNames) {
		return memoryTypeNames[t]
	}
	return fmt.Sprintf("MemoryType(%d)", int(t))
}
