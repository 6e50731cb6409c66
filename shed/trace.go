package shed

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Tick is one update of a Controller: what it was given, and the pressure
// it came to. A Controller's ticks, replayed into another of the same
// configuration, lead it to the same pressures: a false start seen on a
// running proxy can be replayed in a test.
type Tick struct {
	At        int64 // the clock reading, in nanoseconds
	Latency   Reading
	QueueOver bool
	Pressure  float64
}

// tickRing holds the last ticks, in memory fixed when it is made.
type tickRing struct {
	ticks []Tick
	n     int // ticks recorded, of which the last len(ticks) are kept
}

func newTickRing(size int) *tickRing { return &tickRing{ticks: make([]Tick, size)} }

// record keeps an update's tick, if c keeps any. c.mu is held.
func (c *Controller) record(now int64, r Reading, queueOver bool) {
	if c.trace == nil {
		return
	}
	c.trace.ticks[c.trace.n%len(c.trace.ticks)] = Tick{At: now, Latency: r, QueueOver: queueOver, Pressure: c.pressure}
	c.trace.n++
}

// Trace returns the last updates kept (ControllerConfig.Trace), oldest
// first.
func (c *Controller) Trace() []Tick {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trace == nil {
		return nil
	}
	t := c.trace
	size := len(t.ticks)
	out := make([]Tick, 0, min(t.n, size))
	for i := max(t.n-size, 0); i < t.n; i++ {
		out = append(out, t.ticks[i%size])
	}
	return out
}

// traceHeader names WriteTrace's columns.
const traceHeader = "# at_ns ratio short_ns ratio_ok queue_over pressure"

// WriteTrace writes ticks to w as text, a line each, under a header of
// comment lines: ReadTrace's format.
func WriteTrace(w io.Writer, ticks []Tick) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, traceHeader)
	for _, t := range ticks {
		fmt.Fprintf(bw, "%d %s %d %t %t %s\n", t.At,
			strconv.FormatFloat(t.Latency.Ratio, 'g', -1, 64), int64(t.Latency.Short),
			t.Latency.OK, t.QueueOver, strconv.FormatFloat(t.Pressure, 'g', -1, 64))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("shed: writing a trace: %w", err)
	}
	return nil
}

// ReadTrace reads ticks written by WriteTrace. Lines that start with #
// and blank lines are skipped.
func ReadTrace(r io.Reader) ([]Tick, error) {
	var ticks []Tick
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		t, err := parseTick(text)
		if err != nil {
			return nil, fmt.Errorf("shed: trace line %d: %w", line, err)
		}
		ticks = append(ticks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("shed: reading a trace: %w", err)
	}
	return ticks, nil
}

func parseTick(text string) (Tick, error) {
	f := strings.Fields(text)
	if len(f) != 6 {
		return Tick{}, fmt.Errorf("%d fields, want 6 (%s)", len(f), strings.TrimPrefix(traceHeader, "# "))
	}
	var t Tick
	var short int64
	var err error
	for i, parse := range []func(string) error{
		func(s string) (e error) { t.At, e = strconv.ParseInt(s, 10, 64); return e },
		func(s string) (e error) { t.Latency.Ratio, e = strconv.ParseFloat(s, 64); return e },
		func(s string) (e error) { short, e = strconv.ParseInt(s, 10, 64); return e },
		func(s string) (e error) { t.Latency.OK, e = strconv.ParseBool(s); return e },
		func(s string) (e error) { t.QueueOver, e = strconv.ParseBool(s); return e },
		func(s string) (e error) { t.Pressure, e = strconv.ParseFloat(s, 64); return e },
	} {
		if err = parse(f[i]); err != nil {
			return Tick{}, fmt.Errorf("field %d: %w", i+1, err)
		}
	}
	t.Latency.Short = time.Duration(short)
	return t, nil
}
