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
	answers []amAnswerOf // active message answers, from the handler
}

// amAnswerOf is an active message answer, or why it could not be received.
type amAnswerOf struct {
	data []byte
	err  error
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
		func(_ any, _, data []byte, p *ucp.AMRecvParam) ucs.Status {
			return amData(w, data, p, func(data []byte, err error) {
				c.answers = append(c.answers, amAnswerOf{data: bytes.Clone(data), err: err})
			})
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
	if err := c.waitEP(r, err); err != nil {
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
	if err := c.waitEP(sr, err); err != nil {
		if rr != nil {
			rr.Cancel()
			c.waitEP(rr, nil)
		}
		return err
	}
	if err := c.waitEP(rr, nil); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("the echo differs")
	}
	return nil
}

// waitEP waits for r (if any) as wait does, but gives up, cancelling it,
// when the endpoint to the server fails first: a tag receive is the
// worker's, and would wait for a server that is gone forever.
func (c *client) waitEP(r *ucp.Request, err error) error {
	if err != nil || r == nil {
		return err
	}
	defer r.Free()
	for !r.IsCompleted() {
		if err := c.ep.Status(); err != nil {
			r.Cancel()
			return fmt.Errorf("the connection to the server failed: %w", err)
		}
		if c.w.Progress() == 0 {
			c.w.Idle()
		}
	}
	return r.Status()
}

// amRound sends msg as an active message and checks the server's answer,
// msg reversed.
func (c *client) amRound(round int, msg []byte) error {
	hdr := binary.LittleEndian.AppendUint32(nil, uint32(round))
	r, err := c.ep.AMSendNBX(amRequest, hdr, msg, new(ucp.RequestParam).SetAMSendFlags(ucp.AMSendFlagReply))
	if err := c.waitEP(r, err); err != nil {
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
	a := c.answers[0]
	c.answers = c.answers[1:]
	if a.err != nil {
		return fmt.Errorf("the answer: %w", a.err)
	}
	got := a.data
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
