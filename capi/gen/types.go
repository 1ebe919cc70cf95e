package main

// ctype is a row of the type table: one C type of the OpenSHMEM 1.6
// tables (RMA, AMO, point-to-point synchronization, reductions) with the
// routine families it takes part in. Every typed routine of shmem.h, its
// C definition and the Go code that serves it come from these rows.
type ctype struct {
	name   string // TYPENAME in the routine names
	c      string // the C type
	size   int    // its size in bytes on LP64
	goType string // the Go type of the same representation ("" for long double)
	// alias: for a typedef, the row of the type it names on LP64 (int32_t
	// is int). A _Generic association takes each type once: the typedef
	// serves only the generic routines its alias row does not take (the
	// bitwise atomics and reductions of int32_t, not of int).
	alias string
	// char: the reductions fold as signed char or unsigned char, as the
	// platform's char is signed or not (the C type's own semantics).
	char    bool
	rma     bool // standard RMA types (put, get, p, g, strided, signal, collectives)
	amo     bool // standard AMO types
	ext     bool // extended AMO types beyond the standard ones (fetch, set, swap)
	bitwise bool // bitwise AMO types
	sync    bool // point-to-point synchronization types
	red     ops  // reduction operations of the team-based reductions
	toAll   ops  // operations of the deprecated active-set shmem_TYPE_OP_to_all
	legacy  ops  // deprecated atomics without "atomic" in their name (legacyAMO)
}

// ops is a set of reduction (or legacy AMO) operations.
type ops uint

const (
	opAnd ops = 1 << iota
	opOr
	opXor
	opMax
	opMin
	opSum
	opProd
)

const (
	bitOps  = opAnd | opOr | opXor
	ordOps  = opMax | opMin
	sumOps  = opSum | opProd
	allRed  = bitOps | ordOps | sumOps
	signRed = ordOps | sumOps
)

// redOps lists the reduction operations in their C spelling, in the order
// of their numbers (GSH_OP_* in the C code, the op argument in Go).
var redOps = []struct {
	op   ops
	name string
}{{opAnd, "and"}, {opOr, "or"}, {opXor, "xor"}, {opMax, "max"}, {opMin, "min"}, {opSum, "sum"}, {opProd, "prod"}}

// legacyAMO: the deprecated atomics of OpenSHMEM 1.3 (shmem_TYPE_swap,
// cswap, fadd, finc, add, inc, fetch, set) exist for int, long, long long
// (and swap, fetch, set for float and double).
const (
	lgSwap ops = 1 << iota
	lgArith
)

var types = []ctype{
	{name: "float", c: "float", size: 4, goType: "float32", rma: true, ext: true, red: ordOps | sumOps, toAll: ordOps | sumOps, legacy: lgSwap},
	{name: "double", c: "double", size: 8, goType: "float64", rma: true, ext: true, red: ordOps | sumOps, toAll: ordOps | sumOps, legacy: lgSwap},
	{name: "longdouble", c: "long double", size: 16, rma: true, red: ordOps | sumOps, toAll: ordOps | sumOps},
	{name: "char", c: "char", size: 1, char: true, rma: true, red: signRed},
	{name: "schar", c: "signed char", size: 1, goType: "int8", rma: true, red: signRed},
	{name: "short", c: "short", size: 2, goType: "int16", rma: true, sync: true, red: signRed, toAll: allRed},
	{name: "int", c: "int", size: 4, goType: "int32", rma: true, amo: true, sync: true, red: signRed, toAll: allRed, legacy: lgSwap | lgArith},
	{name: "long", c: "long", size: 8, goType: "int64", rma: true, amo: true, sync: true, red: signRed, toAll: allRed, legacy: lgSwap | lgArith},
	{name: "longlong", c: "long long", size: 8, goType: "int64", rma: true, amo: true, sync: true, red: signRed, toAll: allRed, legacy: lgSwap | lgArith},
	{name: "uchar", c: "unsigned char", size: 1, goType: "uint8", rma: true, red: allRed},
	{name: "ushort", c: "unsigned short", size: 2, goType: "uint16", rma: true, sync: true, red: allRed},
	{name: "uint", c: "unsigned int", size: 4, goType: "uint32", rma: true, amo: true, bitwise: true, sync: true, red: allRed},
	{name: "ulong", c: "unsigned long", size: 8, goType: "uint64", rma: true, amo: true, bitwise: true, sync: true, red: allRed},
	{name: "ulonglong", c: "unsigned long long", size: 8, goType: "uint64", rma: true, amo: true, bitwise: true, sync: true, red: allRed},
	{name: "int8", c: "int8_t", size: 1, alias: "schar", goType: "int8", rma: true, red: allRed},
	{name: "int16", c: "int16_t", size: 2, alias: "short", goType: "int16", rma: true, red: allRed},
	{name: "int32", c: "int32_t", size: 4, alias: "int", goType: "int32", rma: true, amo: true, bitwise: true, sync: true, red: allRed},
	{name: "int64", c: "int64_t", size: 8, alias: "long", goType: "int64", rma: true, amo: true, bitwise: true, sync: true, red: allRed},
	{name: "uint8", c: "uint8_t", size: 1, alias: "uchar", goType: "uint8", rma: true, red: allRed},
	{name: "uint16", c: "uint16_t", size: 2, alias: "ushort", goType: "uint16", rma: true, red: allRed},
	{name: "uint32", c: "uint32_t", size: 4, alias: "uint", goType: "uint32", rma: true, amo: true, bitwise: true, sync: true, red: allRed},
	{name: "uint64", c: "uint64_t", size: 8, alias: "ulong", goType: "uint64", rma: true, amo: true, bitwise: true, sync: true, red: allRed},
	{name: "size", c: "size_t", size: 8, alias: "ulong", goType: "uint64", rma: true, amo: true, sync: true, red: allRed},
	{name: "ptrdiff", c: "ptrdiff_t", size: 8, alias: "long", goType: "int64", rma: true, amo: true, sync: true, red: signRed},
	{name: "complexf", c: "float _Complex", size: 8, goType: "complex64", red: sumOps, toAll: sumOps},
	{name: "complexd", c: "double _Complex", size: 16, goType: "complex128", red: sumOps, toAll: sumOps},
}

// sizes are the SIZE of the sized RMA routines (shmem_putSIZE, ...), in bits.
var sizes = []int{8, 16, 32, 64, 128}

// amoOps are the atomic operations, in the order of their numbers
// (GSH_AMO_* in C, the op of goshmem_go_amo in Go). fetch: the routine
// returns the old value; value/cond: the arguments it takes; set: the
// type families that have it ("std": the standard AMO types, "ext": with
// float and double, "bit": the bitwise ones).
var amoOps = []struct {
	name        string
	fetch       bool
	value, cond bool
	set         string
	nbi         bool // has an _nbi form (the fetching ones)
}{
	{"fetch", true, false, false, "ext", true},
	{"set", false, true, false, "ext", false},
	{"swap", true, true, false, "ext", true},
	{"compare_swap", true, true, true, "std", true},
	{"fetch_inc", true, false, false, "std", true},
	{"inc", false, false, false, "std", false},
	{"fetch_add", true, true, false, "std", true},
	{"add", false, true, false, "std", false},
	{"fetch_and", true, true, false, "bit", true},
	{"and", false, true, false, "bit", false},
	{"fetch_or", true, true, false, "bit", true},
	{"or", false, true, false, "bit", false},
	{"fetch_xor", true, true, false, "bit", true},
	{"xor", false, true, false, "bit", false},
}

func (t ctype) inSet(set string) bool {
	switch set {
	case "std":
		return t.amo
	case "ext":
		return t.amo || t.ext
	case "bit":
		return t.bitwise
	}
	return false
}
