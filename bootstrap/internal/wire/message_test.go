package wire

import (
	"bytes"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goshmem/goshmem/ucs"
)

func equalMessages(a, b *Message) bool {
	if a.Kind != b.Kind || a.JobID != b.JobID || a.Rank != b.Rank || a.Seq != b.Seq || a.Flags != b.Flags ||
		!bytes.Equal(a.Payload, b.Payload) || a.Size != b.Size || a.Count != b.Count || a.Addr != b.Addr ||
		a.FailRank != b.FailRank || a.Host != b.Host || a.Cause != b.Cause || a.Reason != b.Reason || a.Code != b.Code ||
		len(a.Entries) != len(b.Entries) || !slices.Equal(a.Agents, b.Agents) || !slices.Equal(a.Events, b.Events) {
		return false
	}
	for i := range a.Entries {
		if x, y := a.Entries[i], b.Entries[i]; x.Rank != y.Rank || x.Node != y.Node || !bytes.Equal(x.Blob, y.Blob) {
			return false
		}
	}
	return true
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range SampleMessages() {
		b := AppendMessage(nil, m)
		got, err := DecodeMessage(b)
		if err != nil {
			t.Errorf("%v message: decode: %v", m.Kind, err)
			continue
		}
		if !equalMessages(got, m) {
			t.Errorf("%v message: decoded %+v, want %+v", m.Kind, got, m)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	good := AppendMessage(nil, SampleMessages()[2])
	down := AppendMessage(nil, SampleMessages()[21])
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version", append([]byte{9}, good[1:]...)},
		{"unknown kind", append([]byte{Version, 99}, good[2:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"truncated entries", down[:len(down)-2]},
		{"huge count", func() []byte {
			m := AppendMessage(nil, &Message{Kind: KindDown, JobID: "j", Rank: 0, Seq: 1})
			m[len(m)-1] = 0xff // count 255 with no entries
			return m
		}()},
		{"rank below -1", AppendMessage(nil, &Message{Kind: KindGather, JobID: "j", Rank: -2, Seq: 1})},
		{"negative entry rank", AppendMessage(nil, &Message{Kind: KindDown, JobID: "j", Rank: 0, Seq: 1, Entries: []Entry{{-1, 0, nil}}})},
		{"long job id", AppendMessage(nil, &Message{Kind: KindFinalizeAck, JobID: string(make([]byte, MaxJobID+1)), Rank: -1})},
		{"unknown flag", AppendMessage(nil, &Message{Kind: KindGather, JobID: "j", Rank: 0, Seq: 1, Flags: 2})},
		{"unknown event flag", AppendMessage(nil, &Message{Kind: KindAgentReport, JobID: "j", Rank: 0, Seq: 1, Addr: "127.0.0.1:1",
			Events: []Event{{Kind: EvExit, Flags: 8}}})},
		{"unknown event", AppendMessage(nil, &Message{Kind: KindAgentReport, JobID: "j", Rank: 0, Seq: 1, Addr: "127.0.0.1:1",
			Events: []Event{{Kind: evLast + 1}}})},
		{"unknown cause", AppendMessage(nil, &Message{Kind: KindFailure, JobID: "j", Rank: -1, FailRank: 1, Cause: EndCause{Kind: endLast + 1}})},
		{"unknown event cause", AppendMessage(nil, &Message{Kind: KindAgentReport, JobID: "j", Rank: 0, Seq: 1, Addr: "127.0.0.1:1",
			Events: []Event{{Kind: EvExit, End: EndCause{Kind: endLast + 1}}}})},
		{"huge table", AppendMessage(nil, &Message{Kind: KindResult, JobID: "j", Rank: -1, Seq: 1, Size: 1 << 40})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := DecodeMessage(tt.b); !errors.Is(err, ucs.ErrInvalidParam) || !errors.Is(err, errMalformed) {
				t.Errorf("DecodeMessage = %+v, %v; want a malformed-message error", m, err)
			}
		})
	}
}

func TestParseNodeAddr(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		ip   string
		port uint16
	}{
		{"127.0.0.1:80", true, "127.0.0.1", 80},
		{"[::1]:7946", true, "::1", 7946},
		{"localhost:80", false, "", 0},
		{"127.0.0.1:0", false, "", 0},
		{"127.0.0.1:65536", false, "", 0},
		{"127.0.0.1", false, "", 0},
		{"", false, "", 0},
	}
	for _, tt := range tests {
		ip, port, err := ParseNodeAddr(tt.in)
		if (err == nil) != tt.ok || (tt.ok && (!ip.Equal(net.ParseIP(tt.ip)) || port != tt.port)) {
			t.Errorf("ParseNodeAddr(%q) = %v, %d, %v", tt.in, ip, port, err)
		}
	}
}

// FuzzDecodeMessage checks that decoding never panics and that what
// decodes re-encodes to the same bytes.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range SampleMessages() {
		f.Add(AppendMessage(nil, m))
	}
	f.Add([]byte{})
	f.Add([]byte{Version, byte(KindDown), 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			if !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("error %v does not wrap ucs.ErrInvalidParam", err)
			}
			return
		}
		if again := AppendMessage(nil, m); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding %+v gives\n%x\nwant\n%x", m, again, b)
		}
	})
}

// TestOtherVersion: a message of another version decodes as a
// *VersionError (still a malformed message) that says which goshmem sent
// it, when it is a hello or a welcome, whose layout every version keeps;
// one of version 3, or of another kind, says what it can.
func TestOtherVersion(t *testing.T) {
	withVersion := func(v uint8, m *Message) []byte {
		b := AppendMessage(nil, m)
		b[0] = v
		return b
	}
	v3hello := withVersion(3, &Message{Kind: KindHello, JobID: "j", Rank: 2})
	v3hello = v3hello[:len(v3hello)-2] // version 3: no build
	tests := []struct {
		name    string
		b       []byte
		version int
		build   string
		other   string
	}{
		{"newer welcome", withVersion(9, &Message{Kind: KindWelcome, JobID: "j", Rank: -1, Build: "v9.9.9"}), 9, "v9.9.9", "goshmem v9.9.9"},
		{"newer hello", withVersion(Version+1, &Message{Kind: KindHello, JobID: "job-1", Rank: 3, Build: "(devel) revision abc"}), Version + 1, "(devel) revision abc", "goshmem (devel) revision abc"},
		{"version 3 hello", v3hello, 3, "", "a goshmem from before version 4 of the bootstrap messages"},
		{"newer gather", withVersion(9, SampleMessages()[2]), 9, "", "a goshmem that did not say which"},
		{"newer, cut short", withVersion(9, &Message{Kind: KindWelcome, JobID: "j", Rank: -1, Build: "v9"})[:5], 9, "", "a goshmem that did not say which"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeMessage(tt.b)
			var ve *VersionError
			if !errors.As(err, &ve) || !errors.Is(err, ucs.ErrInvalidParam) {
				t.Fatalf("DecodeMessage = %v, want a *VersionError that wraps ucs.ErrInvalidParam", err)
			}
			if ve.Version != tt.version || ve.Build != tt.build || ve.Other() != tt.other {
				t.Errorf("VersionError %+v, other %q; want version %d, build %q, other %q", ve, ve.Other(), tt.version, tt.build, tt.other)
			}
			for _, want := range []string{"speaks version " + strconv.Itoa(Version) + " (goshmem " + build + ")", AdviceRebuild} {
				if adv := ve.Advice(true); !strings.Contains(adv, want) {
					t.Errorf("Advice %q lacks %q", adv, want)
				}
			}
		})
	}
	if adv := (&VersionError{Version: 9, Build: "v9"}).Advice(false); !strings.HasPrefix(adv, "the program speaks version 9 (goshmem v9) of the bootstrap's messages, goshmem-run version "+strconv.Itoa(Version)+" (goshmem ") {
		t.Errorf("the agent's advice %q does not name the program's version, then its own", adv)
	}
}
