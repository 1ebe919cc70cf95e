package shmem

import "testing"

// TestCollArgsDescribe: a call's arguments are named as its routine's form
// says (a count of bytes for the Mem routines, the root of a broadcast,
// the strides of alltoalls), whatever the routine is called.
func TestCollArgsDescribe(t *testing.T) {
	for _, tt := range []struct {
		a    collArgs
		want string
	}{
		{collArgs{nelems: 10, size: 8}, "10 elements of 8 bytes"},
		{collArgs{nelems: -1, size: 4}, "elements of 4 bytes"},
		{collArgs{nelems: 10, size: 1, form: formBytes}, "10 bytes"},
		{collArgs{nelems: 3, size: 8, root: 0, form: formRoot}, "3 elements of 8 bytes, root 0"},
		{collArgs{nelems: 3, size: 1, root: 2, form: formBytes | formRoot}, "3 bytes, root 2"},
		{collArgs{nelems: 2, size: 4, dst: 3, sst: 1, form: formStrides}, "2 elements of 4 bytes, strides dst 3 and sst 1"},
	} {
		if got := tt.a.describe(); got != tt.want {
			t.Errorf("%+v: describe = %q, want %q", tt.a, got, tt.want)
		}
	}
}
