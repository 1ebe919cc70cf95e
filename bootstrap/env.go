package bootstrap

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/goshmem/goshmem/ucs"
)

// The environment variables of the launcher contract. goshmem-run sets all
// of them for every PE it starts.
const (
	EnvJobID     = "GOSHMEM_JOBID"      // job id: 1 to 64 bytes of [A-Za-z0-9._-]
	EnvRank      = "GOSHMEM_RANK"       // this PE's rank, 0 <= rank < size
	EnvSize      = "GOSHMEM_SIZE"       // number of PEs in the job
	EnvSeed      = "GOSHMEM_SEED"       // host:port of the seed memberlist node
	EnvKey       = "GOSHMEM_KEY"        // job key, standard base64 of 16, 24 or 32 bytes
	EnvLocalRank = "GOSHMEM_LOCAL_RANK" // rank among the PEs of this host
	EnvLocalSize = "GOSHMEM_LOCAL_SIZE" // number of PEs on this host
)

// EnvDebug, when set to a non-empty value other than "0", routes
// memberlist's log of a PE to standard error.
const EnvDebug = "GOSHMEM_DEBUG"

var contractVars = []string{EnvJobID, EnvRank, EnvSize, EnvSeed, EnvKey, EnvLocalRank, EnvLocalSize}

// Env describes a PE's place in its job, as the launcher hands it over in
// the environment.
type Env struct {
	JobID     string
	Rank      int
	Size      int
	LocalRank int
	LocalSize int
	Seed      string // host:port of the seed; empty only for a singleton
	Key       []byte // memberlist encryption key: 16, 24 or 32 bytes
}

// singletonEnv is the job of a program started without the launcher.
var singletonEnv = Env{JobID: "singleton", Size: 1, LocalSize: 1}

// EnvFromOS reads the launcher contract from the process environment.
//
// When none of the contract variables is set, the process was not started
// by the launcher: EnvFromOS returns false and no error, and the program is
// a job of one PE. When some are set, all must be present and well formed;
// otherwise the error names the offending variable and wraps
// ucs.ErrInvalidParam.
func EnvFromOS() (Env, bool, error) {
	return envFromLookup(os.LookupEnv)
}

func envFromLookup(lookup func(string) (string, bool)) (Env, bool, error) {
	found := false
	for _, v := range contractVars {
		if _, ok := lookup(v); ok {
			found = true
			break
		}
	}
	if !found {
		return Env{}, false, nil
	}
	var e Env
	var err error
	get := func(name string) string {
		if err != nil {
			return ""
		}
		s, ok := lookup(name)
		if !ok {
			err = fmt.Errorf("bootstrap: %s is not set (the other launcher variables are): %w", name, ucs.ErrInvalidParam)
		}
		return s
	}
	bad := func(name, val, why string) {
		if err == nil {
			err = fmt.Errorf("bootstrap: %s=%q: %s: %w", name, val, why, ucs.ErrInvalidParam)
		}
	}
	num := func(name string) int {
		s := get(name)
		if err != nil {
			return 0
		}
		n, perr := strconv.Atoi(s)
		if perr != nil {
			bad(name, s, "not an integer")
		}
		return n
	}

	e.JobID = get(EnvJobID)
	if err == nil && !validJobID(e.JobID) {
		bad(EnvJobID, e.JobID, "want 1 to 64 characters of [A-Za-z0-9._-]")
	}
	e.Size = num(EnvSize)
	if err == nil && (e.Size < 1 || e.Size > maxRanks) {
		bad(EnvSize, strconv.Itoa(e.Size), "out of range [1, "+strconv.Itoa(maxRanks)+"]")
	}
	e.Rank = num(EnvRank)
	if err == nil && (e.Rank < 0 || e.Rank >= e.Size) {
		bad(EnvRank, strconv.Itoa(e.Rank), "out of range [0, "+EnvSize+")")
	}
	e.LocalSize = num(EnvLocalSize)
	if err == nil && (e.LocalSize < 1 || e.LocalSize > e.Size) {
		bad(EnvLocalSize, strconv.Itoa(e.LocalSize), "out of range [1, "+EnvSize+"]")
	}
	e.LocalRank = num(EnvLocalRank)
	if err == nil && (e.LocalRank < 0 || e.LocalRank >= e.LocalSize) {
		bad(EnvLocalRank, strconv.Itoa(e.LocalRank), "out of range [0, "+EnvLocalSize+")")
	}
	e.Seed = get(EnvSeed)
	if err == nil {
		if _, _, serr := net.SplitHostPort(e.Seed); serr != nil {
			bad(EnvSeed, e.Seed, "want host:port")
		}
	}
	key := get(EnvKey)
	if err == nil {
		e.Key, err = DecodeKey(key)
		if err != nil {
			err = fmt.Errorf("bootstrap: %s: %w", EnvKey, err)
		}
	}
	if err != nil {
		return Env{}, false, err
	}
	return e, true, nil
}

// Environ returns the launcher contract for e as "NAME=value" strings,
// suitable for exec.Cmd.Env. EnvFromOS in a process started with them
// returns e.
func (e Env) Environ() []string {
	return []string{
		EnvJobID + "=" + e.JobID,
		EnvRank + "=" + strconv.Itoa(e.Rank),
		EnvSize + "=" + strconv.Itoa(e.Size),
		EnvSeed + "=" + e.Seed,
		EnvKey + "=" + EncodeKey(e.Key),
		EnvLocalRank + "=" + strconv.Itoa(e.LocalRank),
		EnvLocalSize + "=" + strconv.Itoa(e.LocalSize),
	}
}

func validJobID(s string) bool {
	if len(s) < 1 || len(s) > maxJobID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// KeySize is the size in bytes of the keys NewKey makes (AES-256).
const KeySize = 32

// NewKey returns a fresh random job key of KeySize bytes.
func NewKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("bootstrap: making a job key: %w", err)
	}
	return k, nil
}

// EncodeKey returns the form of key used in GOSHMEM_KEY: standard base64.
func EncodeKey(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// DecodeKey decodes a key in the form EncodeKey gives. The key must be 16,
// 24 or 32 bytes long (AES-128, -192 or -256); otherwise the error wraps
// ucs.ErrInvalidParam.
func DecodeKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: key is not base64: %w", ucs.ErrInvalidParam)
	}
	if err := checkKey(k); err != nil {
		return nil, err
	}
	return k, nil
}

func checkKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("bootstrap: key is %d bytes, want 16, 24 or 32: %w", len(k), ucs.ErrInvalidParam)
}

// newJobID returns a random job id.
func newJobID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand.Read panics rather than fail)
	return fmt.Sprintf("%x", b[:])
}
