package main

import (
	"bytes"
	"fmt"
	"strings"
)

// testProgram writes testdata/ztypes.c: the C test of every typed routine,
// each row of the table tested in each family it takes part in, with the
// TEST_* macros of testdata/types.h. Being generated from the same rows
// as the library, it covers every type the header declares.
func testProgram() []byte {
	var b, calls bytes.Buffer
	fmt.Fprintf(&b, "/* ztypes: every typed routine, each type in each of its families. %s */\n#include \"types.h\"\n\n", banner)
	call := func(f string, a ...any) { fmt.Fprintf(&calls, "    "+f+"();\n", a...) }
	for _, t := range types {
		if t.rma {
			fmt.Fprintf(&b, "TEST_RMA(%s, %s)\nTEST_COLL(%s, %s)\n", t.name, t.c, t.name, t.c)
			call("test_rma_%s", t.name)
			call("test_coll_%s", t.name)
		}
		switch {
		case t.inSet("std"):
			fmt.Fprintf(&b, "TEST_AMO_STD(%s, %s)\n", t.name, t.c)
			call("test_amo_std_%s", t.name)
		case t.inSet("ext"):
			fmt.Fprintf(&b, "TEST_AMO_EXT(%s, %s)\n", t.name, t.c)
			call("test_amo_ext_%s", t.name)
		}
		if t.bitwise {
			fmt.Fprintf(&b, "TEST_AMO_BIT(%s, %s)\n", t.name, t.c)
			call("test_amo_bit_%s", t.name)
		}
		if t.sync {
			fmt.Fprintf(&b, "TEST_SYNC(%s, %s)\n", t.name, t.c)
			call("test_sync_%s", t.name)
		}
		for _, o := range redOps {
			op, expr := o.name, strings.ToUpper(o.name)+"_EXPR"
			if t.red&o.op != 0 {
				fmt.Fprintf(&b, "TEST_RED(%s, %s, %s, %s)\n", t.name, t.c, op, expr)
				call("test_red_%s_%s", t.name, op)
			}
			if t.toAll&o.op != 0 {
				fmt.Fprintf(&b, "TEST_TO_ALL(%s, %s, %s, %s)\n", t.name, t.c, op, expr)
				call("test_to_all_%s_%s", t.name, op)
			}
		}
		if t.red&opSum != 0 {
			fmt.Fprintf(&b, "TEST_SCAN(%s, %s)\n", t.name, t.c)
			call("test_scan_%s", t.name)
		}
	}
	fmt.Fprintf(&b, "\nint main(void) {\n    setup();\n%s    teardown(\"ztypes\");\n    return 0;\n}\n", calls.String())
	return b.Bytes()
}
