package tcp

import (
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/goshmem/goshmem/internal/jobkey"
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
	// that wait for Progress before the receiver stops reading. A deeper
	// queue only lets the reader run further ahead of the handlers, which
	// then find the data out of cache: tcp tag_bw of 64 KiB messages
	// (eager, pinned to one core each) went from 0.7-0.85 GB/s with 16 MiB
	// to 1.2-1.8 GB/s with 1 MiB, and AM and 8-byte tag bandwidths did not
	// change.
	DefaultRxQueueLen = 1 << 20
	// DefaultMaxPoll is the number of active messages one Progress call
	// delivers at most.
	DefaultMaxPoll = 64
	// DefaultConnTimeout bounds the connection and handshake of EPCreate.
	DefaultConnTimeout = 10 * time.Second
	// DefaultHandshakeTimeout bounds the handshake of an accepted
	// connection: a client that means it answers in a few round trips.
	DefaultHandshakeTimeout = 3 * time.Second
	// DefaultMaxHandshakes is the number of accepted connections an iface
	// authenticates at once; the oldest (of the source with the most) is
	// dropped for a new one beyond it.
	DefaultMaxHandshakes = 256
	// DefaultPassiveDelay is how long Progress may go uncalled before the
	// iface's poller reads the sockets itself (poller.go).
	DefaultPassiveDelay = time.Millisecond
	// DefaultTxBatch is how many bytes of small frames an EP gathers
	// before it writes them (batch.go).
	DefaultTxBatch = 16 << 10
	// DefaultPeerTimeout is how long an EP waits without a byte from its
	// peer before it fails, when neither PEER_TIMEOUT nor
	// GOSHMEM_FAILURE_TIMEOUT says otherwise.
	DefaultPeerTimeout = 10 * time.Second

	// maxShort is the largest short operation: the put data, or the 8-byte
	// header and payload of an active message.
	maxShort = 256
	// minSegSize bounds SEG_SIZE and RX_SEG_SIZE from below.
	minSegSize = maxShort
	// maxSegSize bounds them from above.
	maxSegSize = 16 << 20
)

// EnvFailureTimeout is the environment variable the peer timeout is taken
// from when PEER_TIMEOUT (UCX_TCP_PEER_TIMEOUT) is not set: the job's
// failure timeout that the launcher sets, a Go duration.
const EnvFailureTimeout = "GOSHMEM_FAILURE_TIMEOUT"

// minPeerTimeout bounds the peer timeout from below: a shorter one would
// take a busy peer for a dead one.
const minPeerTimeout = 100 * time.Millisecond

// maxPassiveDelay bounds PASSIVE_DELAY: passive progress also carries the
// heartbeats, which a peer waits for.
const maxPassiveDelay = 10 * time.Second

// EnvKey is the environment variable the job key is taken from when
// KEY (UCX_TCP_KEY) is not set: jobkey.Env, the launcher's job key.
const EnvKey = jobkey.Env

var ifaceConfigTable = []ucs.ConfigField{
	{Name: "KEY", Default: "", Doc: "Job key authenticating tcp connections, standard base64 of 16, 24 or 32 bytes; empty: " + jobkey.Env + ", or else a random key of this process"},
	{Name: "CONN_TIMEOUT", Default: DefaultConnTimeout.String(), Doc: "Time allowed to connect and authenticate a tcp connection"},
	{Name: "HANDSHAKE_TIMEOUT", Default: DefaultHandshakeTimeout.String(), Doc: "Time an accepted tcp connection has to authenticate"},
	{Name: "MAX_HANDSHAKES", Default: "256", Doc: "Accepted tcp connections authenticating at once; beyond it the oldest of the source address with the most is closed"},
	{Name: "MAX_HANDSHAKES_PER_SOURCE", Default: "auto", Doc: "Accepted tcp connections of one source address (an IPv6 /64) authenticating at once; beyond it the oldest of that source is closed; auto: half of MAX_HANDSHAKES"},
	{Name: "PEER_TIMEOUT", Default: "", Doc: "Time an EP waits without hearing from its peer before it fails (the peer's goroutines answer while it computes); must be the same in every process of a job; empty: " + EnvFailureTimeout + ", or else " + DefaultPeerTimeout.String() + "; inf: never"},
	{Name: "KEEPIDLE", Default: "auto", Doc: "Idle time before the kernel's first tcp keepalive probe; auto: half the peer timeout"},
	{Name: "KEEPINTVL", Default: "auto", Doc: "Time between tcp keepalive probes; auto: a tenth of the peer timeout"},
	{Name: "KEEPCNT", Default: "auto", Doc: "Unanswered tcp keepalive probes before the connection fails; auto: 5"},
	{Name: "PASSIVE_DELAY", Default: DefaultPassiveDelay.String(), Doc: "Time without a progress call after which the iface's poller goroutine reads the sockets itself, so that a process that computes still answers gets and atomics (at most 10s; 0: the poller always reads too, and every frame wakes it)"},
	{Name: "SEG_SIZE", Default: "8k", Doc: "Largest tcp bcopy operation, in bytes"},
	{Name: "RX_SEG_SIZE", Default: "64k", Doc: "Largest tcp active message (AM zcopy), in bytes; must be the same in every process of a job"},
	{Name: "TX_BATCH", Default: "16k", Doc: "Bytes of small frames an EP gathers into one write while operations follow each other without a progress call; they go out at the next progress call, flush, larger frame or reply, or after PASSIVE_DELAY (0: every frame is written at once)"},
	{Name: "TX_QUEUE_LEN", Default: "4m", Doc: "Bytes an EP queues for sending before operations return no resource"},
	{Name: "RX_QUEUE_LEN", Default: "1m", Doc: "Bytes of received active messages waiting for progress before the receiver pushes back"},
	{Name: "MAX_POLL", Default: "64", Doc: "Active messages one progress call delivers at most"},
}

// ifaceConfig is a parsed iface configuration.
type ifaceConfig struct {
	key         jobkey.HandshakeKey // derived from the job key
	connTimeout time.Duration
	hsTimeout   time.Duration // HANDSHAKE_TIMEOUT
	// passiveDelay is PASSIVE_DELAY.
	passiveDelay time.Duration
	maxHS        int // MAX_HANDSHAKES
	maxHSSource  int // MAX_HANDSHAKES_PER_SOURCE
	// peerTimeout is PEER_TIMEOUT; 0 for inf.
	peerTimeout time.Duration
	// keepIdle, keepIntvl and keepCnt are the kernel's keepalive
	// settings (KEEPIDLE, KEEPINTVL, KEEPCNT); 0 for the system's.
	keepIdle, keepIntvl time.Duration
	keepCnt             int
	segSize             int
	rxSegSize           int
	txQueueLen          int
	txBatch             int // TX_BATCH
	rxQueueLen          int
	maxPoll             int
}

// processKey is the job key of a process with no key configured: its ifaces
// reach each other, and no other process.
var processKey = sync.OnceValue(func() []byte {
	k, err := jobkey.New()
	if err != nil {
		panic("uct/tcp: " + err.Error())
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
	jobKey, _, err := jobkey.Lookup(get("KEY"), name("KEY"))
	if err != nil {
		return c, fmt.Errorf("uct/tcp: %w", err)
	}
	if jobKey == nil {
		jobKey = processKey()
	}
	c.key = deriveKey(jobKey)
	c.connTimeout = DefaultConnTimeout
	if s := get("CONN_TIMEOUT"); s != "" {
		if c.connTimeout, err = ucs.ParseDuration(s); err != nil || c.connTimeout == 0 {
			return c, fmt.Errorf("uct/tcp: %s=%q: %w", name("CONN_TIMEOUT"), s, ucs.ErrInvalidParam)
		}
	}
	c.hsTimeout = DefaultHandshakeTimeout
	if s := get("HANDSHAKE_TIMEOUT"); s != "" {
		if c.hsTimeout, err = ucs.ParseDuration(s); err != nil || c.hsTimeout == 0 {
			return c, fmt.Errorf("uct/tcp: %s=%q: %w", name("HANDSHAKE_TIMEOUT"), s, ucs.ErrInvalidParam)
		}
	}
	c.passiveDelay = DefaultPassiveDelay
	if s := get("PASSIVE_DELAY"); s != "" {
		if c.passiveDelay, err = ucs.ParseDuration(s); err != nil || c.passiveDelay > maxPassiveDelay {
			return c, fmt.Errorf("uct/tcp: %s=%q: not a time of at most %v: %w", name("PASSIVE_DELAY"), s, maxPassiveDelay, ucs.ErrInvalidParam)
		}
	}
	if err := c.parseLiveness(get, name); err != nil {
		return c, err
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
		{"TX_BATCH", &c.txBatch, DefaultTxBatch, 0, 1 << 20},
		{"RX_QUEUE_LEN", &c.rxQueueLen, DefaultRxQueueLen, 1, math.MaxInt32},
		{"MAX_POLL", &c.maxPoll, DefaultMaxPoll, 1, math.MaxInt32},
		{"MAX_HANDSHAKES", &c.maxHS, DefaultMaxHandshakes, 1, math.MaxInt32},
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
	c.maxHSSource = max(c.maxHS/2, 1)
	if s := get("MAX_HANDSHAKES_PER_SOURCE"); s != "" && !strings.EqualFold(s, "auto") {
		v, err := ucs.ParseSize(s)
		if err != nil || v < 1 || v > uint64(c.maxHS) {
			return c, fmt.Errorf("uct/tcp: %s=%q outside [1, %s=%d]: %w", name("MAX_HANDSHAKES_PER_SOURCE"), s, name("MAX_HANDSHAKES"), c.maxHS, ucs.ErrInvalidParam)
		}
		c.maxHSSource = int(v)
	}
	if c.segSize > c.rxSegSize {
		return c, fmt.Errorf("uct/tcp: %s=%d above %s=%d: %w", name("SEG_SIZE"), c.segSize, name("RX_SEG_SIZE"), c.rxSegSize, ucs.ErrInvalidParam)
	}
	return c, nil
}

// parseLiveness reads PEER_TIMEOUT and the keepalive settings.
func (c *ifaceConfig) parseLiveness(get, name func(string) string) error {
	c.peerTimeout = DefaultPeerTimeout
	from, s := name("PEER_TIMEOUT"), get("PEER_TIMEOUT")
	if s == "" {
		from, s = EnvFailureTimeout, strings.TrimSpace(os.Getenv(EnvFailureTimeout))
	}
	if s != "" {
		d, err := ucs.ParseDuration(s)
		switch {
		case err != nil:
			return fmt.Errorf("uct/tcp: %s=%q: %w", from, s, ucs.ErrInvalidParam)
		case d == math.MaxInt64:
			d = 0 // inf: never
		case d < minPeerTimeout:
			return fmt.Errorf("uct/tcp: %s=%q below %v: %w", from, s, minPeerTimeout, ucs.ErrInvalidParam)
		}
		c.peerTimeout = d
	}
	if c.peerTimeout > 0 {
		c.keepIdle, c.keepIntvl, c.keepCnt = c.peerTimeout/2, c.peerTimeout/10, 5
	}
	for _, f := range []struct {
		name string
		dst  *time.Duration
	}{{"KEEPIDLE", &c.keepIdle}, {"KEEPINTVL", &c.keepIntvl}} {
		s := get(f.name)
		if s == "" || strings.EqualFold(s, "auto") {
			continue
		}
		d, err := ucs.ParseDuration(s)
		if err != nil || d < time.Second && d != 0 || d == math.MaxInt64 {
			// The kernel counts keepalive times in whole seconds.
			return fmt.Errorf("uct/tcp: %s=%q: not a time of at least 1s: %w", name(f.name), s, ucs.ErrInvalidParam)
		}
		*f.dst = d
	}
	if s := get("KEEPCNT"); s != "" && !strings.EqualFold(s, "auto") {
		v, err := ucs.ParseSize(s)
		if err != nil || v < 1 || v > 127 {
			return fmt.Errorf("uct/tcp: %s=%q outside [1, 127]: %w", name("KEEPCNT"), s, ucs.ErrInvalidParam)
		}
		c.keepCnt = int(v)
	}
	return nil
}
