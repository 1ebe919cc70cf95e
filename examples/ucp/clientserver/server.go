package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	"github.com/goshmem/goshmem/ucp"
	"github.com/goshmem/goshmem/ucs"
)

// server serves its clients from one goroutine: the listener's, the
// endpoints' and the receives' callbacks, which run from Progress, only
// note what happened, and the loop of runServer acts on it. A message of
// any size up to maxSize is served; a client that sends a larger one, or
// a message the server cannot receive, is told nothing and dropped from
// nothing: the server notes it and goes on.
type server struct {
	w       *ucp.Worker
	l       *ucp.Listener
	pending []*ucp.ConnRequest       // from the connection handler
	clients map[uint32]*ucp.Endpoint // by client id
	answers []answer                 // active message answers to send
	tagged  []tagged                 // tagged messages received
	polls   []ucp.StreamPollEP       // endpoints with stream data
	failed  []uint32                 // clients whose endpoints failed
	done    int                      // clients that said goodbye
}

type answer struct {
	ep   *ucp.Endpoint
	data []byte
}

// tagged is a tagged message received, or the error that ended its
// receive.
type tagged struct {
	tag  uint64
	data []byte
	err  error
}

func runServer(ctx *ucp.Context, addr netip.AddrPort, clients int) error {
	s, err := newServer(ctx, addr)
	if err != nil {
		return err
	}
	defer s.destroy()
	fmt.Printf("listening on %v\n", s.l.Query().SockAddr)
	for clients == 0 || s.done < clients {
		if s.w.Progress() == 0 {
			s.w.Idle()
		}
		s.serve()
	}
	fmt.Printf("served %d clients\n", s.done)
	return nil
}

// newServer returns a server listening on addr, with a worker of its own.
func newServer(ctx *ucp.Context, addr netip.AddrPort) (*server, error) {
	w, err := ctx.NewWorker(nil)
	if err != nil {
		return nil, err
	}
	s := &server{w: w, clients: map[uint32]*ucp.Endpoint{}}
	err = w.SetAMRecvHandler(new(ucp.AMHandlerParam).SetID(amRequest).SetFlags(ucp.AMFlagWholeMsg).SetCB(s.onAM))
	if err == nil {
		s.l, err = w.NewListener(new(ucp.ListenerParams).SetSockAddr(addr).SetConnHandler(
			func(r *ucp.ConnRequest, _ any) { s.pending = append(s.pending, r) }, nil))
	}
	if err != nil {
		w.Destroy()
		return nil, err
	}
	return s, nil
}

// destroy destroys the server's listener and worker.
func (s *server) destroy() {
	s.l.Destroy()
	s.w.Destroy()
}

// serve acts on what the callbacks noted since the last call.
func (s *server) serve() {
	s.accept()
	s.recvTagged()
	s.serveTagged()
	s.sendAnswers()
	s.serveStreams()
	s.dropFailed()
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

// recvTagged starts the receive of every tagged message that came, of
// any client, into a buffer of its size; the receive's callback notes it
// for serveTagged. A message larger than maxSize is received into nothing
// (it fails as truncated), so that no client makes the server allocate
// more.
func (s *server) recvTagged() {
	for {
		var info ucp.TagRecvInfo
		m := s.w.TagProbeNB(0, 0, true, &info)
		if m == nil {
			return
		}
		var buf []byte
		if info.Length <= maxSize {
			buf = make([]byte, info.Length)
		}
		// Always a request, whose callback notes the message, even when
		// the data is there already.
		r, err := s.w.TagMsgRecvNBX(buf, m, new(ucp.RequestParam).SetOpAttrFlags(ucp.OpAttrFlagNoImmCmpl).
			SetTagRecvCallback(func(_ *ucp.Request, st error, _ *ucp.TagRecvInfo, _ any) {
				s.tagged = append(s.tagged, tagged{tag: info.SenderTag, data: buf, err: st})
			}))
		switch {
		case err != nil:
			s.tagged = append(s.tagged, tagged{tag: info.SenderTag, err: err})
		case r != nil:
			r.Free() // its callback still runs
		}
	}
}

// serveTagged echoes the tagged messages received, or says goodbye to
// their clients. Each is taken off s.tagged before it is acted on: the
// Close of a goodbye waits for its flush, progressing the worker, and the
// receives that complete meanwhile note their messages on s.tagged.
func (s *server) serveTagged() {
	for len(s.tagged) > 0 {
		m := s.tagged[0]
		s.tagged = s.tagged[1:]
		id, round := uint32(m.tag>>32), m.tag&(replyBit-1)
		ep := s.clients[id]
		switch {
		case m.err != nil:
			fmt.Printf("a tagged message from client %d: %v\n", id, m.err)
		case ep == nil:
			fmt.Printf("a tagged message from unknown client %d\n", id)
		case round == bye:
			delete(s.clients, id)
			ep.Close(ucp.CloseModeFlush)
			s.done++
		default:
			r, err := ep.TagSendNBX(m.data, m.tag|replyBit, nil)
			if r != nil {
				r.Free() // it completes by itself; a failure shows on the endpoint
			} else if err != nil {
				fmt.Printf("echo to client %d: %v\n", id, err)
			}
		}
	}
}

// onAM notes an active message's answer, its data reversed, for the
// sender's reply endpoint; the data of a rendezvous message is received
// first (amData).
func (s *server) onAM(_ any, _, data []byte, p *ucp.AMRecvParam) ucs.Status {
	if p.RecvAttr&ucp.AMRecvAttrFieldReplyEP == 0 {
		return ucs.OK // no way to answer
	}
	ep := p.ReplyEP
	return amData(s.w, data, p, func(data []byte, err error) {
		if err != nil {
			fmt.Printf("active message: %v\n", err)
			return
		}
		a := bytes.Clone(data)
		slices.Reverse(a)
		s.answers = append(s.answers, answer{ep: ep, data: a})
	})
}

// sendAnswers sends the active message answers.
func (s *server) sendAnswers() {
	for len(s.answers) > 0 {
		a := s.answers[0]
		s.answers = s.answers[1:]
		r, err := a.ep.AMSendNBX(amAnswer, nil, a.data, nil)
		if r != nil {
			r.Free()
		} else if err != nil {
			fmt.Printf("answer: %v\n", err)
		}
	}
}

// dropFailed closes the endpoints of clients that failed.
func (s *server) dropFailed() {
	for len(s.failed) > 0 {
		id := s.failed[0]
		s.failed = s.failed[1:]
		if ep := s.clients[id]; ep != nil {
			delete(s.clients, id)
			ep.Close(ucp.CloseModeForce)
		}
	}
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
