// Package jobkey owns the job key: the environment variable that carries
// it (GOSHMEM_KEY), the one rule by which every package decodes it, and the
// proofs with which two processes show each other that they hold it (the
// handshakes of uct/tcp's connections and connection manager, and of
// benchmarks/ucpperf's socket).
//
// It imports no transport, so that bootstrap, which links none, and every
// transport can use it.
package jobkey

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/goshmem/goshmem/ucs"
)

// Env is the environment variable that carries the job key: the launcher
// sets it in every PE, memberlist encrypts the bootstrap traffic with it,
// and tcp connections authenticate with it (unless UCX_TCP_KEY, which has
// the same form, names another).
const Env = "GOSHMEM_KEY"

// Size is the size in bytes of the keys New makes (AES-256).
const Size = 32

// New returns a fresh random key of Size bytes.
func New() ([]byte, error) {
	k := make([]byte, Size)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("jobkey: making a job key: %w", err)
	}
	return k, nil
}

// Encode returns the form of key that Env carries: standard base64, padded.
func Encode(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// Check checks that k is 16, 24 or 32 bytes long (an AES-128, -192 or -256
// key, as memberlist needs); otherwise the error wraps ucs.ErrInvalidParam.
func Check(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("a job key is 16, 24 or 32 bytes, not %d: %w", len(k), ucs.ErrInvalidParam)
}

// Decode decodes a key by the one rule of every key variable (GOSHMEM_KEY,
// UCX_TCP_KEY): standard base64 (RFC 4648, the alphabet with + and /, with
// its = padding, as base64(1) and Encode write it) of 16, 24 or 32 bytes.
// Space around it (a trailing newline) is ignored, and so are line breaks
// within it, as base64 decoders do. Anything else fails with an error
// wrapping ucs.ErrInvalidParam that never repeats the text: it is a secret.
func Decode(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("a job key is standard base64 with its padding: %w", ucs.ErrInvalidParam)
	}
	if err := Check(k); err != nil {
		return nil, err
	}
	return k, nil
}

// Lookup returns the job key of a component: value, the component's own
// setting (UCX_TCP_KEY's, named name), when it is not blank, or else Env's.
// It returns a nil key and an empty name when neither is set. A key that
// Decode refuses fails with an error that names the variable it came from,
// never its value, and wraps ucs.ErrInvalidParam.
func Lookup(value, name string) (key []byte, from string, err error) {
	if strings.TrimSpace(value) == "" {
		value, name = os.Getenv(Env), Env
		if strings.TrimSpace(value) == "" {
			return nil, "", nil
		}
	}
	if key, err = Decode(value); err != nil {
		return nil, name, fmt.Errorf("%s: %w", name, err)
	}
	return key, name, nil
}
