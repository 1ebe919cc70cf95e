package base

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
)

// Format is the layout of a packed key or address of a transport: Size
// bytes, little-endian. A format with a Magic begins with that 32-bit word
// and, when Versions is not empty, goes on with a 16-bit version (one of
// Versions) and 16 reserved bits that must be zero. The fields that follow
// the header are read and written in order by Decode and Encode.
//
// Every transport decodes what peers send through a Format, so that a
// malformed key or address is always rejected the same way: by its length,
// its magic, its version and its reserved bits, with an error that wraps
// Err.
type Format struct {
	// Name begins every error, as "uct/sm: packed key".
	Name string
	// Size is the exact length of a packing.
	Size int
	// Magic is the first word; zero for a format without a header.
	Magic uint32
	// Versions are the versions accepted; empty for a format without
	// a version.
	Versions []uint16
	// Err is wrapped by every decoding error: ucs.ErrInvalidParam for keys,
	// ucs.ErrInvalidAddr for addresses.
	Err error
}

// Zero is a field of that many reserved bytes: Encode writes zeroes and
// Decode fails unless they are zero.
type Zero int

// A Check is a condition on the fields that Decode read, given to Decode
// after the fields: it returns nil when they meet it, and otherwise the
// error of f that says why.
type Check func(f *Format) error

// CheckPid checks that *p may be a process id (ValidPid).
func CheckPid(p *uint32) Check {
	return func(f *Format) error {
		if !ValidPid(*p) {
			return f.Errorf("pid %d", *p)
		}
		return nil
	}
}

// CheckRange checks that *addr and *length are a valid range (ValidRange).
func CheckRange(addr, length *uint64) Check {
	return func(f *Format) error {
		if !ValidRange(*addr, *length) {
			return f.Errorf("range %#x+%d", *addr, *length)
		}
		return nil
	}
}

// CheckNonZero checks that *p, the field what, is not zero.
func CheckNonZero(what string, p *uint64) Check {
	return func(f *Format) error {
		if *p == 0 {
			return f.Errorf("zero %s", what)
		}
		return nil
	}
}

// Errorf returns the error "Name: message: Err" (a *FormatError), for the
// checks that a transport makes on the fields Decode read.
func (f *Format) Errorf(format string, args ...any) error {
	return &FormatError{Name: f.Name, Err: f.Err, format: format, args: args}
}

// FormatError is the error of a packing that a decoder refused: Decode's,
// Errorf's and SplitEPAddr's. It wraps Err (errors.Is), and its message,
// "Name: why: Err", is formatted only when asked for: a decoder that
// refuses what a peer or a stranger sends, at whatever rate, spends nothing
// on messages no one reads, and its work does not depend on the values it
// refused (how many digits a length has, say). That keeps the decoders'
// fuzz targets fast: the fuzzer took inputs whose only novelty was the
// digit count of their length in the message for new coverage, and then
// spent its minimization time, quadratic in their length, on them.
type FormatError struct {
	// Name begins the message, as Format.Name.
	Name string
	// Err is the status wrapped: ucs.ErrInvalidParam for keys,
	// ucs.ErrInvalidAddr for addresses.
	Err    error
	format string
	args   []any
}

func (e *FormatError) Error() string {
	return e.Name + ": " + fmt.Sprintf(e.format, e.args...) + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *FormatError) Unwrap() error { return e.Err }

// headerLen is the length of the header of f.
func (f *Format) headerLen() int {
	switch {
	case f.Magic == 0:
		return 0
	case len(f.Versions) == 0:
		return 4
	}
	return 8
}

// Decode checks b and reads its fields. b must be Size bytes long and, for a
// format with a header, begin with Magic, one of Versions and zero reserved
// bits. The fields after the header are read in order into fields, each a
// *uint8, *uint16, *uint32, *int32 or *uint64, a []byte (filled whole), or
// a Zero (bytes that must be zero). Checks among fields run in order once
// every field is read, and the first that fails is Decode's error. Decode
// returns the version (0 for a format without one); any mismatch fails with
// an error that wraps Err. A
// field list that does not cover exactly Size bytes is a bug of the caller:
// Decode panics.
func (f *Format) Decode(b []byte, fields ...any) (version uint16, err error) {
	if len(b) != f.Size {
		return 0, f.Errorf("%d bytes, want %d", len(b), f.Size)
	}
	if f.Magic != 0 {
		if m := binary.LittleEndian.Uint32(b); m != f.Magic {
			return 0, f.Errorf("magic %#x", m)
		}
	}
	if len(f.Versions) != 0 {
		version = binary.LittleEndian.Uint16(b[4:])
		if !slices.Contains(f.Versions, version) {
			return 0, f.Errorf("version %d", version)
		}
		if binary.LittleEndian.Uint16(b[6:]) != 0 {
			return 0, f.Errorf("reserved bits set")
		}
	}
	off := f.headerLen()
	for _, field := range fields {
		switch p := field.(type) {
		case Check:
		case *uint8:
			*p = b[off]
			off++
		case *uint16:
			*p = binary.LittleEndian.Uint16(b[off:])
			off += 2
		case *uint32:
			*p = binary.LittleEndian.Uint32(b[off:])
			off += 4
		case *int32:
			*p = int32(binary.LittleEndian.Uint32(b[off:]))
			off += 4
		case *uint64:
			*p = binary.LittleEndian.Uint64(b[off:])
			off += 8
		case []byte:
			off += copy(p, b[off:off+len(p)])
		case Zero:
			for _, c := range b[off : off+int(p)] {
				if c != 0 {
					return 0, f.Errorf("reserved bits set")
				}
			}
			off += int(p)
		default:
			panic("base: " + f.Name + ": field of type " + reflect.TypeOf(field).String())
		}
	}
	if off != f.Size {
		panic(fmt.Sprintf("base: %s: fields of %d bytes, want %d", f.Name, off, f.Size))
	}
	// The checks in a second pass, rather than gathered in a slice: the
	// fields, and the checks' closures, then stay on the caller's stack.
	for _, field := range fields {
		if c, ok := field.(Check); ok {
			if err := c(f); err != nil {
				return 0, err
			}
		}
	}
	return version, nil
}

// Encode returns a new packing of Size bytes: the header with version
// (ignored by a format without versions) and the fields in order, each a
// uint8, uint16, uint32, int32 or uint64 or a pointer to one, a []byte or
// a Zero: the field list of Decode serves Encode too. A field list that
// does not cover exactly Size bytes is a bug of the caller: Encode panics.
func (f *Format) Encode(version uint16, fields ...any) []byte {
	return f.Append(nil, version, fields...)
}

// Append is Encode into dst: it appends the packing of Size bytes to dst
// and returns the extended slice, so that a caller that keeps a buffer
// packs without allocating.
func (f *Format) Append(dst []byte, version uint16, fields ...any) []byte {
	start := len(dst)
	dst = slices.Grow(dst, f.Size)[:start+f.Size]
	b := dst[start:]
	clear(b)
	if f.Magic != 0 {
		binary.LittleEndian.PutUint32(b, f.Magic)
	}
	if len(f.Versions) != 0 {
		binary.LittleEndian.PutUint16(b[4:], version)
	}
	off := f.headerLen()
	for _, field := range fields {
		// A pointer's value is read in place: boxing it again would
		// allocate.
		switch v := field.(type) {
		case uint8:
			b[off] = v
			off++
		case *uint8:
			b[off] = *v
			off++
		case uint16:
			binary.LittleEndian.PutUint16(b[off:], v)
			off += 2
		case *uint16:
			binary.LittleEndian.PutUint16(b[off:], *v)
			off += 2
		case uint32:
			binary.LittleEndian.PutUint32(b[off:], v)
			off += 4
		case *uint32:
			binary.LittleEndian.PutUint32(b[off:], *v)
			off += 4
		case int32:
			binary.LittleEndian.PutUint32(b[off:], uint32(v))
			off += 4
		case *int32:
			binary.LittleEndian.PutUint32(b[off:], uint32(*v))
			off += 4
		case uint64:
			binary.LittleEndian.PutUint64(b[off:], v)
			off += 8
		case *uint64:
			binary.LittleEndian.PutUint64(b[off:], *v)
			off += 8
		case []byte:
			off += copy(b[off:], v)
		case Zero:
			off += int(v)
		default:
			// The type by reflect: fmt would make the fields escape,
			// and every caller allocate them.
			panic("base: " + f.Name + ": field of type " + reflect.TypeOf(field).String())
		}
	}
	if off != f.Size {
		panic(fmt.Sprintf("base: %s: fields of %d bytes, want %d", f.Name, off, f.Size))
	}
	return dst
}
