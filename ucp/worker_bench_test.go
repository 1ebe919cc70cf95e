package ucp_test

import (
	"testing"

	"github.com/goshmem/goshmem/ucp"
)

// BenchmarkWorkerCreateDestroy: a worker made and destroyed, with the
// interfaces of every transport UCX_TLS selects (set it to compare them).
// shmem contexts pool their workers; this is what the first one costs.
func BenchmarkWorkerCreateDestroy(b *testing.B) {
	ctx, err := ucp.Init(new(ucp.Params).SetFeatures(ucp.FeatureRMA|ucp.FeatureAMO64), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Cleanup()
	b.ReportAllocs()
	for b.Loop() {
		w, err := ctx.NewWorker(new(ucp.WorkerParams))
		if err != nil {
			b.Fatal(err)
		}
		w.Destroy()
	}
}
