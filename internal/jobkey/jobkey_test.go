package jobkey

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

// TestDecode is the one rule of the key variables: standard base64, with
// its padding, of 16, 24 or 32 bytes, space around it ignored.
func TestDecode(t *testing.T) {
	key := func(n int) []byte { return bytes.Repeat([]byte{0xa5}, n) }
	std := func(n int) string { return base64.StdEncoding.EncodeToString(key(n)) }
	tests := []struct {
		name string
		in   string
		want int // key length; 0: refused
	}{
		{"16 bytes", std(16), 16},
		{"24 bytes", std(24), 24},
		{"32 bytes", std(32), 32},
		{"trailing newline", std(32) + "\n", 32},
		{"space around", " \t" + std(16) + " \r\n", 16},
		{"line break inside", std(32)[:20] + "\n" + std(32)[20:], 32},
		{"15 bytes", std(15), 0},
		{"17 bytes", std(17), 0},
		{"20 bytes (UCX_TCP_KEY took it once)", std(20), 0},
		{"48 bytes", std(48), 0},
		{"empty", "", 0},
		{"blank", "  \n", 0},
		{"no padding", base64.RawStdEncoding.EncodeToString(key(16)), 0},
		{"extra padding", std(16) + "=", 0},
		{"URL alphabet", base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff}, 16)), 0},
		{"space inside", std(32)[:20] + " " + std(32)[20:], 0},
		{"not base64", "this is not a key!", 0},
		{"hex", strings.Repeat("ab", 32), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Decode(tt.in)
			if tt.want == 0 {
				if err == nil || !errors.Is(err, ucs.ErrInvalidParam) {
					t.Fatalf("Decode = %d bytes, %v; want an error wrapping ucs.ErrInvalidParam", len(k), err)
				}
				if s := strings.TrimSpace(tt.in); len(s) > 4 && strings.Contains(err.Error(), s) {
					t.Errorf("the error repeats the key: %v", err)
				}
				return
			}
			if err != nil || !bytes.Equal(k, key(tt.want)) {
				t.Fatalf("Decode = %x, %v; want %d bytes of a5", k, err, tt.want)
			}
		})
	}
}

// TestLookup: the component's own setting wins, GOSHMEM_KEY is next, and a
// bad key names the variable it came from.
func TestLookup(t *testing.T) {
	own, job := Encode(bytes.Repeat([]byte{1}, 16)), Encode(bytes.Repeat([]byte{2}, 32))
	tests := []struct {
		name, value, env string
		want             byte   // the key's bytes; 0: none
		from             string // the variable named
		bad              bool
	}{
		{"neither", "", "", 0, "", false},
		{"own", own, "", 1, "UCX_TCP_KEY", false},
		{"own over the job's", own, job, 1, "UCX_TCP_KEY", false},
		{"blank own", " \n", job, 2, Env, false},
		{"the job's", "", job, 2, Env, false},
		{"bad own", "short", job, 0, "UCX_TCP_KEY", true},
		{"bad job's", "", "c2hvcnQ=", 0, Env, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(Env, tt.env)
			k, from, err := Lookup(tt.value, "UCX_TCP_KEY")
			if from != tt.from {
				t.Errorf("from %q, want %q", from, tt.from)
			}
			if tt.bad {
				if !errors.Is(err, ucs.ErrInvalidParam) || !strings.Contains(err.Error(), tt.from) {
					t.Errorf("err = %v, want ucs.ErrInvalidParam naming %s", err, tt.from)
				}
				return
			}
			if err != nil || (tt.want == 0) != (k == nil) || k != nil && k[0] != tt.want {
				t.Errorf("Lookup = %x, %v; want a key of %d", k, err, tt.want)
			}
		})
	}
}

// TestProof: a proof verifies only with the same job key, label, tag,
// nonces and parts, as received whole; a proof made for one protocol or
// one side is refused for another (no replay across labels or sides).
func TestProof(t *testing.T) {
	jk := bytes.Repeat([]byte{7}, 32)
	k := Derive(jk, LabelTCP)
	cn, sn := NewNonce(), NewNonce()
	if cn == sn {
		t.Fatal("two fresh nonces are equal")
	}
	parts := [][]byte{[]byte("hello"), []byte("challenge")}
	mac := k.Prove(ClientProof, &cn, &sn, parts...)
	other := NewNonce()
	tests := []struct {
		name   string
		key    HandshakeKey
		mac    []byte
		tag    Tag
		cn, sn *Nonce
		parts  [][]byte
		ok     bool
	}{
		{"same", k, mac[:], ClientProof, &cn, &sn, parts, true},
		{"another job key", Derive(bytes.Repeat([]byte{8}, 32), LabelTCP), mac[:], ClientProof, &cn, &sn, parts, false},
		{"no job key", Derive(nil, LabelTCP), mac[:], ClientProof, &cn, &sn, parts, false},
		{"replayed into the connection manager", Derive(jk, LabelCM), mac[:], ClientProof, &cn, &sn, parts, false},
		{"replayed into ucpperf", Derive(jk, LabelUCPPerf), mac[:], ClientProof, &cn, &sn, parts, false},
		{"reflected as the server's", k, mac[:], ServerProof, &cn, &sn, parts, false},
		{"as a confirmation", k, mac[:], ClientConfirm, &cn, &sn, parts, false},
		{"another server nonce", k, mac[:], ClientProof, &cn, &other, parts, false},
		{"another client nonce", k, mac[:], ClientProof, &other, &sn, parts, false},
		{"nonces swapped", k, mac[:], ClientProof, &sn, &cn, parts, false},
		{"a part changed", k, mac[:], ClientProof, &cn, &sn, [][]byte{[]byte("hellO"), parts[1]}, false},
		{"bytes moved between parts", k, mac[:], ClientProof, &cn, &sn, [][]byte{[]byte("hell"), []byte("ochallenge")}, false},
		{"a part left out", k, mac[:], ClientProof, &cn, &sn, parts[:1], false},
		{"truncated", k, mac[:MACLen-1], ClientProof, &cn, &sn, parts, false},
		{"empty", k, nil, ClientProof, &cn, &sn, parts, false},
		{"too long", k, append(mac[:], 0), ClientProof, &cn, &sn, parts, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.key.Verify(tt.mac, tt.tag, tt.cn, tt.sn, tt.parts...)
			if tt.ok != (err == nil) {
				t.Fatalf("Verify: %v, want success %v", err, tt.ok)
			}
			if err != nil && (!errors.Is(err, ErrAuth) || !errors.Is(err, ucs.ErrRejected)) {
				t.Errorf("Verify: %v, want ErrAuth wrapping ucs.ErrRejected", err)
			}
		})
	}
}

// TestLabelsDistinct: every protocol derives its own key.
func TestLabelsDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, l := range []string{LabelTCP, LabelCM, LabelUCPPerf} {
		k := string(Derive([]byte("k"), l))
		if o, dup := seen[k]; dup {
			t.Errorf("labels %q and %q derive the same key", l, o)
		}
		seen[k] = l
	}
}
