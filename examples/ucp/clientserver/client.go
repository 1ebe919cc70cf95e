package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// client is a connected client.
type client struct {
	w       *ucp.Worker
	ep      *ucp.Endpoint
	id      uint32
	answers [][]byte // active message answers, from the handler
}

func runClient(ctx *ucp.Context, addr netip.AddrPort, id uint32, names []string, iters, size int) error {
	for _, n := range names {
		if _, ok := services[n]; !ok {
			return fmt.Errorf("no service %q (there are %v)", n, serviceNames())
		}
	}
	w, err := ctx.NewWorker(new(ucp.WorkerParams).SetClientID(uint64(id)))
	if err != nil {
		return err
	}
	defer w.Destroy()
	c := &client{w: w, id: id}
	err = w.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(amAnswer).SetCB(
		func(_ any, _, data []byte, _ *ucp.AMRecvParam) ucs.Status {
			c.answers = append(c.answers, bytes.Clone(data))
			return ucs.OK
		}))
	if err != nil {
		return err
	}
	start := time.Now()
	c.ep, err = w.NewEndpoint(new(ucp.EPParams).SetSockAddr(addr).
		SetFlags(ucp.EPParamsFlagClientServer | ucp.EPParamsFlagSendClientID).
		SetErrMode(ucp.ErrHandlingModePeer))
	if err != nil {
		return fmt.Errorf("client %d: %w", id, err)
	}
	// The endpoint comes back connecting, as UCX's does; sends could go
	// at once and would wait. A flush waits for the connection (and fails
	// with its error), so the lanes can be printed.
	if err := c.ep.Flush(); err != nil {
		return fmt.Errorf("client %d: connect: %w", id, err)
	}
	a := c.ep.Query()
	fmt.Printf("client %d: connected %v -> %v in %v, lanes %s\n", id, a.LocalSockAddr, a.RemoteSockAddr,
		time.Since(start).Round(time.Microsecond), lanes(a))
	msg := make([]byte, size)
	for _, n := range names {
		for i := range iters {
			for j := range msg {
				msg[j] = byte(j*int(id) + i)
			}
			if err := services[n].round(c, i, msg); err != nil {
				return fmt.Errorf("client %d: %s round %d: %w", id, n, i, err)
			}
		}
		fmt.Printf("client %d: %d %s rounds of %d bytes ok\n", id, iters, n, size)
	}
	r, err := c.ep.TagSendNBX(nil, c.tag(bye), nil)
	if err := wait(r, err); err != nil {
		return fmt.Errorf("client %d: goodbye: %w", id, err)
	}
	return c.ep.Close(ucp.CloseModeFlush)
}

func (c *client) tag(round int) uint64 { return uint64(c.id)<<32 | uint64(round) }

// tagRound sends msg and checks the server's echo.
func (c *client) tagRound(round int, msg []byte) error {
	got := make([]byte, len(msg))
	rr, err := c.w.TagRecvNBX(got, c.tag(round)|replyBit, ^uint64(0), nil)
	if err != nil {
		return err
	}
	sr, err := c.ep.TagSendNBX(msg, c.tag(round), nil)
	return c.echoed(sr, err, rr, got, msg)
}

// echoed waits for the send (sr, err) of msg and then for the receive rr of
// its echo into got, and checks the echo.
func (c *client) echoed(sr *ucp.Request, err error, rr *ucp.Request, got, msg []byte) error {
	if err := wait(sr, err); err != nil {
		return err
	}
	if err := wait(rr, nil); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("the echo differs")
	}
	return nil
}

// amRound sends msg as an active message and checks the server's answer,
// msg reversed.
func (c *client) amRound(round int, msg []byte) error {
	hdr := binary.LittleEndian.AppendUint32(nil, uint32(round))
	r, err := c.ep.AMSendNBX(amRequest, hdr, msg, new(ucp.RequestParam).SetAMSendFlags(ucp.AMSendFlagReply))
	if err := wait(r, err); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); len(c.answers) == 0; {
		if err := c.ep.Status(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer in a minute")
		}
		if c.w.Progress() == 0 {
			c.w.Idle()
		}
	}
	got := c.answers[0]
	c.answers = c.answers[1:]
	want := slices.Clone(msg)
	slices.Reverse(want)
	if !bytes.Equal(got, want) {
		return fmt.Errorf("the answer differs")
	}
	return nil
}

// streamRound sends msg on the endpoint's stream and checks the server's
// echo, received whole (wait-all).
func (c *client) streamRound(_ int, msg []byte) error {
	got := make([]byte, len(msg))
	rr, _, err := c.ep.StreamRecvNBX(got, new(ucp.RequestParam).SetStreamRecvFlags(ucp.StreamRecvFlagWaitAll))
	if err != nil {
		return err
	}
	sr, err := c.ep.StreamSendNBX(msg, nil)
	return c.echoed(sr, err, rr, got, msg)
}
