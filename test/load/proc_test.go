package load

import (
	"os"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want time.Duration
		err  bool
	}{
		// utime 250 and stime 50 ticks; the command name holds ") (".
		{stat: "1234 (a) (b c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0", want: 3 * time.Second},
		{stat: "1234 (cqlguard) R 1 2 3 4 5 6 7 8 9 10 7 3 0 0", want: 100 * time.Millisecond},
		{stat: "1234 cqlguard R 1", err: true},
		{stat: "1234 (x) R 1 2", err: true},
		{stat: "1234 (x) R 1 2 3 4 5 6 7 8 9 10 u s", err: true},
	} {
		got, err := StatCPU(tc.stat)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%q: %v, %v", tc.stat, got, err)
		}
	}
	// This process has a stat file that parses.
	if _, err := CPUTime(os.Getpid()); err != nil {
		t.Error(err)
	}
}
