//go:build (amd64 || arm64) && !race

package ucs

//go:noescape
func storeRelease(p *uint64, v uint64)

//go:noescape
func storeRelease32(p *int32, v int32)
