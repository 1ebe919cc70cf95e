package base

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// testFormat is a versioned format: header, a pid, 4 reserved bytes, a
// range.
var testFormat = Format{Name: "test: key", Size: 32, Magic: 0x54534554, Versions: []uint16{1, 2}, Err: ucs.ErrInvalidParam}

type testKey struct {
	pid          uint32
	addr, length uint64
}

func (k *testKey) fields() []any { return []any{&k.pid, Zero(4), &k.addr, &k.length} }

func TestFormatRoundTrip(t *testing.T) {
	in := testKey{pid: 7, addr: 0x1000, length: 64}
	b := testFormat.Encode(2, in.fields()...)
	var out testKey
	v, err := testFormat.Decode(b, append(out.fields(), CheckPid(&out.pid), CheckRange(&out.addr, &out.length))...)
	if err != nil || v != 2 || out != in {
		t.Fatalf("decode of %x = %+v, version %d, %v; want %+v, 2", b, out, v, err, in)
	}
	if !bytes.Equal(testFormat.Encode(2, out.fields()...), b) {
		t.Fatalf("re-encoding differs")
	}
}

func TestFormatRejects(t *testing.T) {
	good := testFormat.Encode(1, uint32(7), Zero(4), uint64(0x1000), uint64(64))
	mod := func(off int, v byte) []byte {
		b := bytes.Clone(good)
		b[off] = v
		return b
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"short", good[:31]},
		{"long", append(bytes.Clone(good), 0)},
		{"magic", mod(0, 0)},
		{"version 0", mod(4, 0)},
		{"version 3", mod(4, 3)},
		{"header reserved", mod(6, 1)},
		{"field reserved", mod(13, 1)},
		{"pid 0", mod(8, 0)},
		{"pid too large", mod(11, 0x40)},
		{"zero length", func() []byte { b := bytes.Clone(good); clear(b[24:]); return b }()},
		{"range above MaxAddr", mod(23, 0x10)},
	}
	for _, tt := range tests {
		var k testKey
		if _, err := testFormat.Decode(tt.b, append(k.fields(), CheckPid(&k.pid), CheckRange(&k.addr, &k.length))...); !errors.Is(err, ucs.ErrInvalidParam) {
			t.Errorf("%s: err = %v, want ErrInvalidParam", tt.name, err)
		}
	}
}

func TestFormatWithoutHeader(t *testing.T) {
	f := Format{Name: "test: address", Size: 12, Err: ucs.ErrInvalidAddr}
	b := f.Encode(0, uint32(5), uint64(9))
	var (
		pid uint32
		id  uint64
	)
	if _, err := f.Decode(b, &pid, &id, CheckNonZero("id", &id)); err != nil || pid != 5 || id != 9 {
		t.Fatalf("decode = %d, %d, %v", pid, id, err)
	}
	if _, err := f.Decode(make([]byte, 12), &pid, &id, CheckNonZero("id", &id)); !errors.Is(err, ucs.ErrInvalidAddr) {
		t.Fatalf("zero id: err = %v", err)
	}
}

// countingArg counts how often its message is formatted.
type countingArg struct{ n *int }

func (c countingArg) String() string { *c.n++; return "arg" }

// TestFormatErrorLazy checks that a refusal is formatted only when its
// message is asked for, and then reads as fmt would have made it, and that
// it wraps the format's status: the refusals of Decode, of Errorf and of
// SplitEPAddr alike. A decoder's work then does not depend on what it
// refused (the digits of a length), which kept its fuzz targets stalled in
// minimization.
func TestFormatErrorLazy(t *testing.T) {
	formatted := 0
	arg := countingArg{&formatted}
	_, decodeErr := testFormat.Decode(make([]byte, 1000))
	_, _, splitErr := SplitEPAddr("test", make([]byte, 3), 16)
	errorfErr := testFormat.Errorf("field %v", arg)
	if formatted != 0 {
		t.Errorf("Errorf formatted its message before anyone asked")
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
		is   error
	}{
		{"Errorf", errorfErr, "test: key: field arg: " + ucs.ErrInvalidParam.Error(), ucs.ErrInvalidParam},
		{"Decode", decodeErr, "test: key: 1000 bytes, want 32: " + ucs.ErrInvalidParam.Error(), ucs.ErrInvalidParam},
		{"SplitEPAddr", splitErr, "test: ep address: 3 bytes, want 24: " + ucs.ErrInvalidAddr.Error(), ucs.ErrInvalidAddr},
	} {
		var fe *FormatError
		if !errors.As(tt.err, &fe) {
			t.Fatalf("%s: %T %v, want a *FormatError", tt.name, tt.err, tt.err)
		}
		if !errors.Is(tt.err, tt.is) {
			t.Errorf("%s: %v does not wrap %v", tt.name, tt.err, tt.is)
		}
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	if formatted != 1 {
		t.Errorf("the argument was formatted %d times, want once", formatted)
	}
}
