//go:build !osucoll

package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCollectivesUnavailable checks that, without the osucoll tag, the
// collective tests are listed but refuse to run with a clear message.
func TestCollectivesUnavailable(t *testing.T) {
	for _, name := range collNames {
		var out, errb bytes.Buffer
		code := run([]string{name, "-max", "64"}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), name+" is not available in this build") {
			t.Errorf("osu %s: exit %d, stderr %q; want 1 and \"not available in this build\"", name, code, errb.String())
		}
	}
	var out bytes.Buffer
	if code := run([]string{"-h"}, &out, &out); code != 0 || !strings.Contains(out.String(), "broadcast") {
		t.Errorf("osu -h: exit %d, output:\n%s\nwant 0 and the collectives listed", code, out.String())
	}
}
