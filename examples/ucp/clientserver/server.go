package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// server serves its clients from one goroutine: the listener's and the
// endpoints' callbacks, which run from Progress, only note what happened,
// and the loop of runServer acts on it.
type server struct {
	w       *ucp.Worker
	l       *ucp.Listener
	pending []*ucp.ConnRequest       // from the connection handler
	clients map[uint32]*ucp.Endpoint // by client id
	answers []answer                 // active message answers to send
	polls   []ucp.StreamPollEP       // endpoints with stream data
	failed  []uint32                 // clients whose endpoints failed
	buf     []byte                   // the tag receive's buffer
	recv    *ucp.Request             // the tag receive posted for any client
	done    int                      // clients that said goodbye
}

type answer struct {
	ep   *ucp.Endpoint
	data []byte
}

func runServer(ctx *ucp.Context, addr netip.AddrPort, clients, size int) error {
	w, err := ctx.NewWorker(nil)
	if err != nil {
		return err
	}
	defer w.Destroy()
	s := &server{w: w, clients: map[uint32]*ucp.Endpoint{}, buf: make([]byte, size)}
	err = w.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(amRequest).SetFlags(ucp.AMFlagWholeMsg).SetCB(s.onAM))
	if err != nil {
		return err
	}
	s.l, err = w.NewListener(new(ucp.ListenerParams).SetSockAddr(addr).SetConnHandler(
		func(r *ucp.ConnRequest, _ any) { s.pending = append(s.pending, r) }, nil))
	if err != nil {
		return err
	}
	defer s.l.Destroy()
	fmt.Printf("listening on %v\n", s.l.Query().SockAddr)
	if err := s.postRecv(); err != nil {
		return err
	}
	for clients == 0 || s.done < clients {
		if w.Progress() == 0 {
			w.Idle()
		}
		s.accept()
		if err := s.serveTag(); err != nil {
			return err
		}
		s.sendAnswers()
		s.serveStreams()
		s.dropFailed()
	}
	fmt.Printf("served %d clients\n", s.done)
	return nil
}

// accept accepts the pending requests of clients whose id is free and
// rejects the others.
func (s *server) accept() {
	for len(s.pending) > 0 {
		r := s.pending[0]
		s.pending = s.pending[1:]
		q := r.Query()
		id := uint32(q.ClientID)
		if _, dup := s.clients[id]; dup || id == 0 || q.ClientID >= 1<<32 {
			fmt.Printf("rejecting %v: client id %d is in use or invalid\n", q.ClientAddress, q.ClientID)
			s.l.Reject(r)
			continue
		}
		ep, err := s.w.NewEndpoint(new(ucp.EPParams).SetConnRequest(r).
			SetErrMode(ucp.ErrHandlingModePeer).
			SetErrHandler(func(_ any, ep *ucp.Endpoint, st error) {
				fmt.Printf("client %d failed: %v\n", id, st)
				s.failed = append(s.failed, id)
			}))
		if err != nil {
			fmt.Printf("accepting %v: %v\n", q.ClientAddress, err)
			continue
		}
		s.clients[id] = ep
		fmt.Printf("client %d from %v: lanes %s\n", id, q.ClientAddress, lanes(ep.Query()))
	}
}

// postRecv posts the receive of the next tagged message of any client.
func (s *server) postRecv() (err error) {
	s.recv, err = s.w.TagRecvNBX(s.buf, 0, 0, new(ucp.RequestParam).SetOpAttrFlags(ucp.OpAttrFlagNoImmCmpl))
	return err
}

// serveTag echoes a tagged message that came, or says goodbye to its
// client.
func (s *server) serveTag() error {
	if !s.recv.IsCompleted() {
		return nil
	}
	var info ucp.TagRecvInfo
	err := s.recv.Test(&info)
	s.recv.Free()
	if err != nil {
		return fmt.Errorf("tag receive: %w", err)
	}
	id, round := uint32(info.SenderTag>>32), info.SenderTag&(replyBit-1)
	ep := s.clients[id]
	switch {
	case ep == nil:
		fmt.Printf("a tagged message from unknown client %d\n", id)
	case round == bye:
		delete(s.clients, id)
		ep.Close(ucp.CloseModeFlush)
		s.done++
	default:
		r, err := ep.TagSendNBX(slices.Clone(s.buf[:info.Length]), info.SenderTag|replyBit, nil)
		if r != nil {
			r.Free() // it completes by itself; a failure shows on the endpoint
		} else if err != nil {
			fmt.Printf("echo to client %d: %v\n", id, err)
		}
	}
	return s.postRecv()
}

// onAM notes an active message's answer, its data reversed, for the
// sender's reply endpoint.
func (s *server) onAM(_ any, _, data []byte, p *ucp.AMRecvParam) ucs.Status {
	if p.RecvAttr&ucp.AMRecvAttrFieldReplyEP == 0 {
		return ucs.OK // no way to answer
	}
	a := bytes.Clone(data)
	slices.Reverse(a)
	s.answers = append(s.answers, answer{ep: p.ReplyEP, data: a})
	return ucs.OK
}

// sendAnswers sends the active message answers.
func (s *server) sendAnswers() {
	for _, a := range s.answers {
		r, err := a.ep.AMSendNBX(amAnswer, nil, a.data, nil)
		if r != nil {
			r.Free()
		} else if err != nil {
			fmt.Printf("answer: %v\n", err)
		}
	}
	s.answers = s.answers[:0]
}

// dropFailed closes the endpoints of clients that failed.
func (s *server) dropFailed() {
	for _, id := range s.failed {
		if ep := s.clients[id]; ep != nil {
			delete(s.clients, id)
			ep.Close(ucp.CloseModeForce)
		}
	}
	s.failed = s.failed[:0]
}

// serveStreams echoes the stream data of every endpoint that has some,
// taking it where it arrived (StreamRecvDataNB) and sending a copy back.
func (s *server) serveStreams() {
	if s.polls == nil {
		s.polls = make([]ucp.StreamPollEP, 16)
	}
	n := s.w.StreamWorkerPoll(s.polls, 0)
	for _, p := range s.polls[:n] {
		for {
			data, err := p.EP.StreamRecvDataNB()
			if err != nil || data == nil {
				break
			}
			r, err := p.EP.StreamSendNBX(bytes.Clone(data), nil)
			p.EP.StreamDataRelease(data)
			if r != nil {
				r.Free()
			} else if err != nil {
				fmt.Printf("stream echo: %v\n", err)
			}
		}
	}
}
