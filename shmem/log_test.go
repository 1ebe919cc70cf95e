package shmem

import (
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func TestSetLogger(t *testing.T) {
	defer SetLogger(nil)
	if lg() != ucs.DefaultLogger() {
		t.Error("the library's logger is not ucs.DefaultLogger() by default")
	}
	d := ucs.DiscardLogger()
	SetLogger(d)
	if lg() != d {
		t.Error("SetLogger did not set the logger")
	}
	SetLogger(nil)
	if lg() != ucs.DefaultLogger() {
		t.Error("SetLogger(nil) did not restore the default")
	}
}
