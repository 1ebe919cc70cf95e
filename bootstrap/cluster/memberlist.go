package cluster

import (
	"log"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/goshmem/goshmem/bootstrap"
	"github.com/goshmem/goshmem/bootstrap/internal/wire"
)

const (
	seedName = "seed"
	// tcpTimeout bounds one stream message (dial, write, and the
	// receiver's read). DefaultLocalConfig's 1s is short for 1 MiB tables
	// sent to many PEs of an oversubscribed node.
	tcpTimeout = 10 * time.Second
	// leaveTimeout bounds the wait for a leave broadcast.
	leaveTimeout = 500 * time.Millisecond
	// gossipInterval is how often a member gossips its news (see
	// newConfig).
	gossipInterval = 20 * time.Millisecond
	// sendTries is how often a reliable message is attempted.
	sendTries = 3
)

// configHook, when set (by tests), adjusts every memberlist configuration.
var configHook func(*memberlist.Config)

func agentName(id int) string { return "agent-" + strconv.Itoa(id) }

// agentOf returns the agent id in a node name made by agentName, or -1.
func agentOf(name string) int {
	const prefix = "agent-"
	if len(name) <= len(prefix) || name[:len(prefix)] != prefix {
		return -1
	}
	id, err := strconv.Atoi(name[len(prefix):])
	if err != nil || id < 0 || agentName(id) != name {
		return -1
	}
	return id
}

// newConfig returns the memberlist configuration shared by the seed and
// the agents: DefaultLocalConfig on a random port of bindAddr, encrypted with
// key and labelled with the job id so that no other job's traffic is
// accepted, with failure detection tuned to failureTimeout for a cluster of
// about nodes members (see tuneFailureDetection).
func newConfig(name, bindAddr, jobID string, key []byte, logger *log.Logger, failureTimeout time.Duration, nodes int) *memberlist.Config {
	c := memberlist.DefaultLocalConfig()
	tuneFailureDetection(c, failureTimeout, nodes)
	c.Name = name
	c.BindAddr = bindAddr
	c.BindPort = 0
	c.AdvertisePort = 0
	c.SecretKey = key
	c.Label = "goshmem/" + jobID
	c.TCPTimeout = tcpTimeout
	// memberlist's LZW compression of gossip costs more than it saves for
	// its small messages: with 64 PEs on 2 cores it took a sixth of each
	// PE's start-up CPU (allocating its tables).
	c.EnableCompression = false
	// Gossip only goes out when there is news, and the members are the
	// agents (one per host) and the seed: gossiping often costs little
	// and gets news out fast. A leaving agent waits until its leave was
	// gossiped RetransmitMult times: at the default 100 ms that added
	// 0.15 s to every job's end.
	c.GossipInterval = gossipInterval
	c.Logger = logger
	c.LogOutput = nil
	if configHook != nil {
		configHook(c)
	}
	return c
}

// suspicionMult is memberlist's SuspicionMult for goshmem jobs.
const suspicionMult = 2

// tuneFailureDetection sets memberlist's probe interval and timeout and its
// suspicion timeouts so that memberlist declares a member that stops
// answering dead within about half of timeout (zero means
// DefaultFailureTimeout) in a cluster of nodes members: a member is probed
// within a probe interval, the probe times out after half of one, and the
// suspicion lasts suspicionMult*max(1, log10(nodes)) intervals, never longer
// (memberlist would otherwise wait up to six times longer for confirmations
// from other members). The declaration stands once the member stays
// unreachable for the other half (deathWatch). memberlist stretches its
// timeouts on a member that is itself too slow to answer in time (its
// awareness score).
func tuneFailureDetection(c *memberlist.Config, timeout time.Duration, nodes int) {
	if timeout <= 0 {
		timeout = bootstrap.DefaultFailureTimeout
	}
	scale := math.Max(1, math.Log10(float64(max(nodes, 1))))
	interval := time.Duration(float64(timeout-confirmWait(timeout)) / (suspicionMult*scale + 1.5))
	c.ProbeInterval = interval
	c.ProbeTimeout = interval / 2
	c.SuspicionMult = suspicionMult
	c.SuspicionMaxTimeoutMult = 1
}

// nodeAddr returns the host:port of a memberlist node.
func nodeAddr(n *memberlist.Node) string {
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// maxNodeName bounds the node name an agent gives (AgentConfig.Node).
const maxNodeName = 128

// nodeMeta is the metadata of a node: the host name, the agent's node name
// and its PEs, "first count" when they are consecutive (else "0 0"), each
// followed by a NUL byte, within limit.
func nodeMeta(limit int, node string, ranks []int) []byte {
	first, count := 0, 0
	if len(ranks) > 0 && ranks[len(ranks)-1]-ranks[0] == len(ranks)-1 {
		first, count = ranks[0], len(ranks)
	}
	tail := node + "\x00" + strconv.Itoa(first) + " " + strconv.Itoa(count) + "\x00"
	return []byte(wire.HostName(max(limit-len(tail)-1, 0)) + "\x00" + tail)
}

// parseNodeMeta parses what nodeMeta makes; what is malformed is left
// out.
func parseNodeMeta(b []byte) (host, node string, first, count int) {
	parts := strings.Split(string(b), "\x00")
	if len(parts) != 4 {
		return string(b), "", 0, 0
	}
	f, c, ok := strings.Cut(parts[2], " ")
	first, err1 := strconv.Atoi(f)
	count, err2 := strconv.Atoi(c)
	if !ok || err1 != nil || err2 != nil || first < 0 || count < 0 || first > wire.MaxRanks || count > wire.MaxRanks {
		first, count = 0, 0
	}
	return parts[0], parts[1], first, count
}

// nodeHost names the host of n: its metadata, else its address.
func nodeHost(n *memberlist.Node) string {
	host, _, _, _ := parseNodeMeta(n.Meta)
	return hostAt(host, n.Addr)
}

// hostAt names a host as every report does: "name (address)", or the
// address alone when the name is unknown.
func hostAt(name string, ip net.IP) string {
	if name != "" {
		return name + " (" + ip.String() + ")"
	}
	return ip.String()
}

// sendReliable sends msg to the node at addr, trying a few times.
func sendReliable(list *memberlist.Memberlist, name string, ip net.IP, port uint16, msg []byte) error {
	to := &memberlist.Node{Name: name, Addr: ip, Port: port}
	var err error
	for i := 0; i < sendTries; i++ {
		if i > 0 {
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
		}
		if err = list.SendReliable(to, msg); err == nil {
			return nil
		}
	}
	return err
}

// localIPFor returns the local address used to reach seed (host:port), so
// that a PE binds to the interface that routes to its seed (127.0.0.1 for a
// seed on the loopback). No packet is sent.
func localIPFor(seed string) (string, error) {
	c, err := net.Dial("udp", seed)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
