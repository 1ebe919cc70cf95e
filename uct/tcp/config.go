package tcp

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/goshmem/goshmem/ucs"
)

// Iface configuration defaults (see IfaceConfigTable).
const (
	// DefaultSegSize is the largest bcopy operation (put or active
	// message), in bytes.
	DefaultSegSize = 8 << 10
	// DefaultRxSegSize is the largest active message, header included: the
	// limit of AM zcopy, and what a receiver accepts.
	DefaultRxSegSize = 64 << 10
	// DefaultTxQueueLen is the number of bytes an EP queues for its writer
	// before operations fail with ucs.ErrNoResource.
	DefaultTxQueueLen = 4 << 20
	// DefaultRxQueueLen is the number of bytes of received active messages
	// that wait for Progress before the receiver stops reading.
	DefaultRxQueueLen = 16 << 20
	// DefaultMaxPoll is the number of active messages one Progress call
	// delivers at most.
	DefaultMaxPoll = 64
	// DefaultConnTimeout bounds the connection and handshake of EPCreate,
	// and the handshake of an accepted connection.
	DefaultConnTimeout = 10 * time.Second

	// maxShort is the largest short operation: the put data, or the 8-byte
	// header and payload of an active message.
	maxShort = 256
	// minSegSize bounds SEG_SIZE and RX_SEG_SIZE from below.
	minSegSize = maxShort
	// maxSegSize bounds them from above.
	maxSegSize = 16 << 20
)

// EnvKey is the environment variable the job key is taken from when
// KEY (UCX_TCP_KEY) is not set: the launcher's job key, standard base64.
const EnvKey = "GOSHMEM_KEY"

var ifaceConfigTable = []ucs.ConfigField{
	{Name: "KEY", Default: "", Doc: "Job key authenticating tcp connections, standard base64 of at least 16 bytes; empty: " + EnvKey + ", or else a random key of this process"},
	{Name: "CONN_TIMEOUT", Default: DefaultConnTimeout.String(), Doc: "Time allowed to connect and authenticate a tcp connection"},
	{Name: "SEG_SIZE", Default: "8k", Doc: "Largest tcp bcopy operation, in bytes"},
	{Name: "RX_SEG_SIZE", Default: "64k", Doc: "Largest tcp active message (AM zcopy), in bytes; must be the same in every process of a job"},
	{Name: "TX_QUEUE_LEN", Default: "4m", Doc: "Bytes an EP queues for sending before operations return no resource"},
	{Name: "RX_QUEUE_LEN", Default: "16m", Doc: "Bytes of received active messages waiting for progress before the receiver pushes back"},
	{Name: "MAX_POLL", Default: "64", Doc: "Active messages one progress call delivers at most"},
}

// ifaceConfig is a parsed iface configuration.
type ifaceConfig struct {
	key         []byte // handshake key, derived from the job key
	connTimeout time.Duration
	segSize     int
	rxSegSize   int
	txQueueLen  int
	rxQueueLen  int
	maxPoll     int
}

// processKey is the job key of a process with no key configured: its ifaces
// reach each other, and no other process.
var processKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic("uct/tcp: no randomness: " + err.Error())
	}
	return k
})

// parseConfig reads config (nil for the defaults).
func parseConfig(config *ucs.Config) (ifaceConfig, error) {
	get := func(name string) string {
		if config == nil {
			return ""
		}
		return strings.TrimSpace(config.Get(name))
	}
	name := func(n string) string {
		if config == nil {
			return n
		}
		return config.Prefix() + n
	}
	var c ifaceConfig
	var err error
	jobKey := processKey()
	if s, from := get("KEY"), name("KEY"); s != "" || os.Getenv(EnvKey) != "" {
		if s == "" {
			s, from = strings.TrimSpace(os.Getenv(EnvKey)), EnvKey
		}
		k, derr := base64.StdEncoding.DecodeString(s)
		if derr != nil || len(k) < 16 {
			// The key itself is secret: never print it.
			return c, fmt.Errorf("uct/tcp: %s is not standard base64 of at least 16 bytes: %w", from, ucs.ErrInvalidParam)
		}
		jobKey = k
	}
	c.key = deriveKey(jobKey)
	c.connTimeout = DefaultConnTimeout
	if s := get("CONN_TIMEOUT"); s != "" {
		if c.connTimeout, err = ucs.ParseDuration(s); err != nil || c.connTimeout == 0 {
			return c, fmt.Errorf("uct/tcp: %s=%q: %w", name("CONN_TIMEOUT"), s, ucs.ErrInvalidParam)
		}
	}
	sizes := []struct {
		name   string
		dst    *int
		def    int
		lo, hi int
	}{
		{"SEG_SIZE", &c.segSize, DefaultSegSize, minSegSize, maxSegSize},
		{"RX_SEG_SIZE", &c.rxSegSize, DefaultRxSegSize, minSegSize, maxSegSize},
		{"TX_QUEUE_LEN", &c.txQueueLen, DefaultTxQueueLen, 1, math.MaxInt32},
		{"RX_QUEUE_LEN", &c.rxQueueLen, DefaultRxQueueLen, 1, math.MaxInt32},
		{"MAX_POLL", &c.maxPoll, DefaultMaxPoll, 1, math.MaxInt32},
	}
	for _, f := range sizes {
		*f.dst = f.def
		s := get(f.name)
		if s == "" {
			continue
		}
		v, err := ucs.ParseSize(s)
		if err != nil {
			return c, fmt.Errorf("uct/tcp: %s: %w", name(f.name), err)
		}
		if v < uint64(f.lo) || v > uint64(f.hi) {
			return c, fmt.Errorf("uct/tcp: %s=%d outside [%d, %d]: %w", name(f.name), v, f.lo, f.hi, ucs.ErrInvalidParam)
		}
		*f.dst = int(v)
	}
	if c.segSize > c.rxSegSize {
		return c, fmt.Errorf("uct/tcp: %s=%d above %s=%d: %w", name("SEG_SIZE"), c.segSize, name("RX_SEG_SIZE"), c.rxSegSize, ucs.ErrInvalidParam)
	}
	return c, nil
}
