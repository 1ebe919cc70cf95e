// Command clientserver is a UCP server that serves many clients at once,
// and its client, as UCX's client-server example is: the server listens
// on a socket address (a ucp.Listener), each client connects to it with
// an endpoint made from that address, and the two then talk through ucp
// alone, over whatever lanes ucp wired between their workers (shared
// memory on one host, tcp between hosts).
//
//	clientserver -listen 127.0.0.1:13337 [-clients N]  # the server
//	clientserver -connect 127.0.0.1:13337 -id 7        # a client
//
// Each client runs -iters rounds of every service (-services;
// "tag,am,stream" by default): in a tag round it sends -size bytes (1 to
// 1 MiB) with a tag made of its id and the round, and the server, which
// probes for the tagged messages of every client and receives each into a
// buffer of its size, echoes them back with the reply bit set; in an am
// round it sends an active message asking for a reply endpoint, and the
// server answers through that endpoint with the bytes reversed (both
// handlers receive a rendezvous message's data with AMRecvDataNBX); in a
// stream round it sends -size bytes on the endpoint's stream and the
// server, which polls for the endpoints that have stream data, echoes the
// bytes back on the stream. A client whose server fails gets the error of
// its endpoint, whatever it waits for.
// Then it says goodbye (a last tagged message) and closes its endpoint.
// The server serves messages of any size up to 1 MiB, whatever its own
// -size; a larger or broken one is reported and dropped.
// The server accepts a client whose id is not in use and rejects one whose
// id is (the client fails with "rejected"); it serves until killed, or
// until -clients clients have said goodbye.
//
// Security: a server with a key (UCX_TCP_KEY, or GOSHMEM_KEY) accepts
// only clients that prove they have it, and tcp lanes need it on both
// sides anyway; set the same key in both. Without a key the server can
// listen only on a loopback address.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"

	// ucp links no transport: all of them.
	_ "github.com/goshmem/goshmem/uct/transports"
)

// Tags: the client's id in the high 32 bits, the round in the low ones;
// the server's echo has replyBit set; bye is the round of the goodbye.
const (
	replyBit = 1 << 31
	bye      = replyBit - 1
)

// Active message ids: the request and the server's answer.
const (
	amRequest = 1
	amAnswer  = 2
)

// maxSize is the largest message a client sends, and the server takes.
const maxSize = 1 << 20

func main() {
	listen := flag.String("listen", "127.0.0.1:13337", "address the server listens on")
	connect := flag.String("connect", "", "address of the server: run as a client")
	id := flag.Uint("id", 1, "the client's id (non-zero, unique among the server's clients)")
	clients := flag.Int("clients", 0, "the server exits after this many clients said goodbye (0: never)")
	iters := flag.Int("iters", 10, "rounds of each service a client runs")
	size := flag.Int("size", 1024, fmt.Sprintf("bytes per message of a client (at most %d)", maxSize))
	services := flag.String("services", "tag,am,stream", "services a client uses: "+strings.Join(serviceNames(), ","))
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("clientserver: ")
	if *size < 1 || *size > maxSize {
		log.Fatalf("-size %d: not in [1, %d]", *size, maxSize)
	}
	ctx, err := ucp.Init(new(ucp.Params).SetFeatures(ucp.FeatureTag|ucp.FeatureAM|ucp.FeatureStream).SetName("clientserver"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ctx.Cleanup()
	if *connect != "" {
		addr, err := netip.ParseAddrPort(*connect)
		if err != nil {
			log.Fatalf("-connect: %v", err)
		}
		if *id == 0 || *id >= 1<<32 {
			log.Fatalf("-id %d: not in [1, 2^32)", *id)
		}
		err = runClient(ctx, addr, uint32(*id), strings.Split(*services, ","), *iters, *size)
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	addr, err := netip.ParseAddrPort(*listen)
	if err != nil {
		log.Fatalf("-listen: %v", err)
	}
	if err := runServer(ctx, addr, *clients); err != nil {
		log.Fatal(err)
	}
}

// A service is one kind of exchange: the client's side of a round
// (client.go); the server serves every kind in its loop (server.go).
type service struct {
	round func(c *client, round int, msg []byte) error
}

var services = map[string]service{
	"tag":    {round: (*client).tagRound},
	"am":     {round: (*client).amRound},
	"stream": {round: (*client).streamRound},
}

func serviceNames() []string {
	var n []string
	for k := range services {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// lanes describes an endpoint's lanes.
func lanes(a ucp.EPAttr) string {
	var s []string
	for _, l := range a.Lanes {
		s = append(s, fmt.Sprintf("%s:%s/%s", l.Usage, l.Transport, l.Device))
	}
	return strings.Join(s, " ")
}

// amData hands the data of an active message to done, from the receive
// handler that got p: at once for eager data (valid during the call only),
// or, for a rendezvous message (whose data is still at the sender), once
// it is received into a buffer of its own. A rendezvous message larger
// than maxSize is dropped: done gets an error. It returns the handler's
// status.
func amData(w *ucp.Worker, data []byte, p *ucp.AMRecvParam, done func(data []byte, err error)) ucs.Status {
	if p.RecvAttr&ucp.AMRecvAttrFlagRNDV == 0 {
		done(data, nil)
		return ucs.OK
	}
	if p.Length > maxSize {
		done(nil, fmt.Errorf("an active message of %d bytes, more than %d: dropped", p.Length, maxSize))
		return ucs.OK // which drops it
	}
	buf := make([]byte, p.Length)
	r, err := w.AMRecvDataNBX(p.Desc, buf, new(ucp.RequestParam).SetOpAttrFlags(ucp.OpAttrFlagNoImmCmpl).
		SetCallback(func(_ *ucp.Request, st error, _ any) { done(buf, st) }))
	if err != nil {
		done(nil, err)
	} else {
		r.Free() // its callback still runs
	}
	return ucs.OK
}

func init() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-listen ADDR [-clients N]] | -connect ADDR -id ID [-iters N] [-size N] [-services tag,am,stream]\n", os.Args[0])
		flag.PrintDefaults()
	}
}
