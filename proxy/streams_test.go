package proxy

import "testing"

func TestStreams(t *testing.T) {
	var s streams
	for _, id := range []int16{0, 1, 255, 256, 32767} {
		if !s.begin(id, request{reply: replyLocal}) {
			t.Fatalf("begin(%d) reported a duplicate", id)
		}
	}
	if s.begin(1, request{}) {
		t.Error("second begin on stream 1 not reported")
	}
	if s.inflight != 5 {
		t.Errorf("inflight %d, want 5", s.inflight)
	}
	if r, ok := s.end(32767); !ok || r.reply != replyLocal {
		t.Errorf("end(32767) = %v, %v", r, ok)
	}
	if _, ok := s.end(32767); ok {
		t.Error("end twice")
	}
	if _, ok := s.end(-1); ok {
		t.Error("events have no request")
	}
	n := 0
	s.each(func(int16, request) { n++ })
	if n != 4 || s.inflight != 4 {
		t.Errorf("each saw %d, inflight %d; want 4", n, s.inflight)
	}
}

func TestStreamsNoAllocation(t *testing.T) {
	var s streams
	s.begin(7, request{})
	s.end(7)
	if n := testing.AllocsPerRun(1000, func() {
		s.begin(7, request{start: 1})
		s.end(7)
	}); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}
