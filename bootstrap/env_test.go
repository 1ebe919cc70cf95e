package bootstrap

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func lookupFrom(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func goodVars() map[string]string {
	return map[string]string{
		EnvJobID:     "job-1",
		EnvRank:      "2",
		EnvSize:      "4",
		EnvSeed:      "127.0.0.1:7946",
		EnvKey:       EncodeKey(bytes.Repeat([]byte{7}, 32)),
		EnvLocalRank: "0",
		EnvLocalSize: "2",
	}
}

func TestEnvFromLookup(t *testing.T) {
	e, ok, err := envFromLookup(lookupFrom(goodVars()))
	if err != nil || !ok {
		t.Fatalf("good environment: %v, %v", ok, err)
	}
	want := Env{JobID: "job-1", Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Seed: "127.0.0.1:7946", Key: bytes.Repeat([]byte{7}, 32)}
	if e.JobID != want.JobID || e.Rank != want.Rank || e.Size != want.Size || e.LocalRank != want.LocalRank ||
		e.LocalSize != want.LocalSize || e.Seed != want.Seed || !bytes.Equal(e.Key, want.Key) {
		t.Errorf("got %+v, want %+v", e, want)
	}

	if _, ok, err := envFromLookup(lookupFrom(nil)); ok || err != nil {
		t.Errorf("empty environment: got %v, %v; want false, nil", ok, err)
	}

	tests := []struct {
		name, variable, value string // value "-" unsets it
	}{
		{"missing seed", EnvSeed, "-"},
		{"missing rank", EnvRank, "-"},
		{"missing local size", EnvLocalSize, "-"},
		{"rank not a number", EnvRank, "two"},
		{"rank too large", EnvRank, "4"},
		{"rank negative", EnvRank, "-1"},
		{"size zero", EnvSize, "0"},
		{"local rank too large", EnvLocalRank, "2"},
		{"local size larger than size", EnvLocalSize, "5"},
		{"seed without port", EnvSeed, "127.0.0.1"},
		{"key not base64", EnvKey, "!!!"},
		{"key too short", EnvKey, EncodeKey([]byte("short"))},
		{"job id empty", EnvJobID, ""},
		{"job id with space", EnvJobID, "a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := goodVars()
			if tt.value == "-" {
				delete(vars, tt.variable)
			} else {
				vars[tt.variable] = tt.value
			}
			_, ok, err := envFromLookup(lookupFrom(vars))
			if ok || !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("got %v, %v; want an error wrapping ucs.ErrInvalidParam", ok, err)
			}
			if !strings.Contains(err.Error(), tt.variable) {
				t.Errorf("error %q does not name %s", err, tt.variable)
			}
		})
	}
}

func TestEnvironRoundTrip(t *testing.T) {
	want := Env{JobID: "j", Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Seed: "[::1]:9", Key: bytes.Repeat([]byte{1}, 16)}
	vars := map[string]string{}
	for _, kv := range want.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	got, ok, err := envFromLookup(lookupFrom(vars))
	if !ok || err != nil || got.JobID != want.JobID || got.Rank != want.Rank || got.Seed != want.Seed || !bytes.Equal(got.Key, want.Key) {
		t.Errorf("Environ round trip: got %+v, %v, %v; want %+v", got, ok, err, want)
	}
}

func TestNewKey(t *testing.T) {
	a, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewKey()
	if len(a) != KeySize || bytes.Equal(a, b) {
		t.Errorf("NewKey: %d bytes, two keys equal: %v", len(a), bytes.Equal(a, b))
	}
	if k, err := DecodeKey(EncodeKey(a)); err != nil || !bytes.Equal(k, a) {
		t.Errorf("DecodeKey(EncodeKey(k)) = %x, %v", k, err)
	}
}

// FuzzEnv checks that parsing the environment never panics, and that what
// parses survives Environ.
func FuzzEnv(f *testing.F) {
	g := goodVars()
	f.Add(g[EnvJobID], g[EnvRank], g[EnvSize], g[EnvSeed], g[EnvKey], g[EnvLocalRank], g[EnvLocalSize])
	f.Add("x", "0", "1", "h:1", "", "0", "1")
	f.Add("j", "-0", "+1", ":", "AAAA", "0", "1")
	f.Fuzz(func(t *testing.T, job, rank, size, seed, key, lrank, lsize string) {
		vars := map[string]string{EnvJobID: job, EnvRank: rank, EnvSize: size, EnvSeed: seed,
			EnvKey: key, EnvLocalRank: lrank, EnvLocalSize: lsize}
		e, ok, err := envFromLookup(lookupFrom(vars))
		if err != nil {
			if ok || !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("got %v, %v", ok, err)
			}
			return
		}
		if err := checkEnv(e); err != nil {
			t.Fatalf("parsed env %+v fails checkEnv: %v", e, err)
		}
		again := map[string]string{}
		for _, kv := range e.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			again[k] = v
		}
		e2, ok, err := envFromLookup(lookupFrom(again))
		if !ok || err != nil || e2.Rank != e.Rank || e2.Size != e.Size || e2.Seed != e.Seed || !bytes.Equal(e2.Key, e.Key) {
			t.Fatalf("Environ of %+v does not parse back: %+v, %v", e, e2, err)
		}
	})
}
