package main

// The frame cqlguard top draws: a pure function of what was read, so that
// it is tested without a terminal.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cqlguard/cqlguard/admin"
)

// topView is what one frame shows.
type topView struct {
	Admin    string
	Interval time.Duration
	// Width and Height are the terminal's, 0 when the frame is printed
	// as plain text, unbounded.
	Width, Height int
	Interactive   bool // say that q quits
	Retrying      bool // say that a failed reading is tried again
	Scrape        scrape
	// Rates are nil until /metrics was read twice in a row.
	Rates *rates
	// The last good reading of /metrics, which the next one's rates are
	// computed from.
	prev   *metricsSample
	prevAt time.Time
}

// update takes in reading s.
func (v *topView) update(s scrape) {
	v.Scrape = s
	v.Rates = nil
	if s.metrics != nil {
		v.Rates = rateBetween(v.prev, v.prevAt, s.metrics, s.at)
		v.prev, v.prevAt = s.metrics, s.at
	}
}

// renderTop draws v as lines of text, without a final newline: a header,
// the hot partitions, and refusals per table and op. With a Height, the
// hot partitions and refusals share the rows left; with a Width, lines
// are cut to it.
func renderTop(v topView) string {
	lines := topHeader(v)
	hotHead, hotRows := hotTable(v.Scrape.hot)
	refHead, refRows := refusalTable(v.Scrape.metrics, v.Rates)
	nHot, nRef := len(hotRows), len(refRows)
	if v.Height > 0 {
		// Titles, column heads and blank lines take 6 rows below the header.
		room := max(v.Height-len(lines)-6, 0)
		nRef = min(nRef, max(room-nHot, min(room/3, nRef)))
		nHot = min(nHot, room-nRef)
	}
	lines = append(lines, "")
	lines = append(lines, hotSection(v, hotHead, hotRows, nHot)...)
	lines = append(lines, "")
	lines = append(lines, refusalSection(v.Scrape.metrics, refHead, refRows, nRef)...)
	if v.Height > 0 && len(lines) > v.Height {
		lines = lines[:v.Height]
	}
	if v.Width > 0 {
		for i, l := range lines {
			lines[i] = cut(l, v.Width)
		}
	}
	return strings.Join(lines, "\n")
}

// topHeader is the frame's first lines: the listener, the time of the
// reading and the interval; the connections, the requests in flight and
// the upstream rate; and why /metrics could not be read, if it could not.
func topHeader(v topView) []string {
	s := v.Scrape
	head := "cqlguard top  " + v.Admin
	if !s.at.IsZero() {
		head += "  " + s.at.Format(time.TimeOnly)
	}
	head += "  every " + v.Interval.String()
	if v.Interactive {
		head += "  (q quits)"
	}
	lines := []string{head}
	if m := s.metrics; m != nil {
		up := "-"
		if v.Rates != nil && v.Rates.haveUpstream {
			up = formatRate(v.Rates.upstream)
		}
		lines = append(lines, fmt.Sprintf("connections %.0f  in flight %.0f  upstream %s req/s", m.connections, m.inFlight, up))
	} else {
		lines = append(lines, "connections -  in flight -  upstream - req/s")
	}
	if s.metricsErr != nil {
		msg := "error: " + printable(s.metricsErr.Error())
		if v.Retrying {
			msg += " (retrying)"
		}
		lines = append(lines, msg)
	}
	return lines
}

// hotSection is the hot partitions' title and the first n of rows under
// head, or a line that says why there are none.
func hotSection(v topView, head string, rows []string, n int) []string {
	s := v.Scrape
	// One error for both when the listener did not answer at all: the
	// header shows it.
	shared := s.metricsErr != nil && s.hotErr != nil && s.metricsErr.Error() == s.hotErr.Error()
	switch {
	case shared:
		return []string{"Hot partitions: -"}
	case s.hotErr != nil:
		return []string{"Hot partitions: " + printable(s.hotErr.Error())}
	case s.at.IsZero():
		return []string{"Hot partitions: reading " + v.Admin + " ..."}
	case len(rows) == 0:
		return []string{"Hot partitions: none counted yet"}
	}
	return append([]string{fmt.Sprintf("Hot partitions (%s)", shown(n, len(rows))), head}, rows[:n]...)
}

// refusalSection is the refusals' title and the first n of rows under
// head, or a line that says why there are none.
func refusalSection(m *metricsSample, head string, rows []string, n int) []string {
	switch {
	case m == nil:
		return []string{"Refusals: -"}
	case len(rows) == 0:
		return []string{"Refusals: none"}
	}
	return append([]string{fmt.Sprintf("Refusals (%s)", shown(n, len(rows))), head}, rows[:n]...)
}

// shown says how many of all rows a section shows.
func shown(n, all int) string {
	if n == all {
		return strconv.Itoa(all)
	}
	return fmt.Sprintf("%d of %d", n, all)
}

// hotTable lays out the hot partitions, with a key column only when /hot
// shows keys.
func hotTable(hot []admin.HotPartition) (string, []string) {
	keys := slices.ContainsFunc(hot, func(h admin.HotPartition) bool { return h.Key != "" })
	cols := []column{{title: "TABLE", max: 40}, {title: "OP"}, {title: "TOKEN", right: true}}
	if keys {
		cols = append(cols, column{title: "KEY", max: 24})
	}
	cols = append(cols, column{title: "RATE/S", right: true}, column{title: "LIMIT", right: true},
		column{title: "OF LIMIT", right: true}, column{title: ""})
	rows := make([][]string, 0, len(hot))
	for _, h := range hot {
		row := []string{printable(h.Keyspace + "." + h.Table), printable(h.Op), strconv.FormatInt(h.Token, 10)}
		if keys {
			k := printable(h.Key)
			if h.KeyTruncated {
				k += "..."
			}
			row = append(row, k)
		}
		limit, share, mark := "-", "-", ""
		if h.Limit > 0 {
			limit = strconv.FormatUint(uint64(h.Limit), 10)
			share = fmt.Sprintf("%.0f%%", 100*h.Rate/float64(h.Limit))
			switch {
			case h.Rate-h.RateError > float64(h.Limit):
				mark = "OVER"
			case h.Rate > float64(h.Limit):
				// The rate is an upper bound: the partition may be under.
				mark = "over?"
			}
		}
		rows = append(rows, append(row, formatRate(h.Rate), limit, share, mark))
	}
	return layout(cols, rows)
}

// refusalTable lays out the refusals per table, op and outcome, with their
// rates when there are some.
func refusalTable(m *metricsSample, r *rates) (string, []string) {
	if m == nil {
		return "", nil
	}
	var refusals []refusalRate
	if r != nil {
		refusals = r.refusals
	} else {
		for k, v := range m.rejections {
			refusals = append(refusals, refusalRate{rejectionKey: k, perSecond: -1, total: v})
		}
		slices.SortFunc(refusals, func(a, b refusalRate) int {
			return strings.Compare(a.keyspace+"."+a.table+" "+a.op+" "+a.outcome, b.keyspace+"."+b.table+" "+b.op+" "+b.outcome)
		})
	}
	cols := []column{{title: "TABLE", max: 40}, {title: "OP"}, {title: "OUTCOME"},
		{title: "PER S", right: true}, {title: "TOTAL", right: true}}
	rows := make([][]string, 0, len(refusals))
	for _, x := range refusals {
		rate := "-"
		if x.perSecond >= 0 {
			rate = formatRate(x.perSecond)
		}
		rows = append(rows, []string{printable(x.keyspace + "." + x.table), printable(x.op), printable(x.outcome), rate, strconv.FormatFloat(x.total, 'f', -1, 64)})
	}
	return layout(cols, rows)
}

// formatRate shows a rate with about three significant digits.
func formatRate(r float64) string {
	switch {
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// column is a column of a table: its title, whether it is aligned right,
// and the most runes it shows, 0 for any.
type column struct {
	title string
	right bool
	max   int
}

// layout aligns rows under the columns' titles, two spaces apart, and
// returns the title line and the rows' lines.
func layout(cols []column, rows [][]string) (string, []string) {
	width := make([]int, len(cols))
	for i, c := range cols {
		width[i] = utf8.RuneCountInString(c.title)
	}
	for _, row := range rows {
		for i := range cols {
			if cols[i].max > 0 {
				row[i] = cut(row[i], cols[i].max)
			}
			width[i] = max(width[i], utf8.RuneCountInString(row[i]))
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		for i, c := range cols {
			if i > 0 {
				b.WriteString("  ")
			}
			if c.right {
				fmt.Fprintf(&b, "%*s", width[i], cells[i])
			} else {
				fmt.Fprintf(&b, "%-*s", width[i], cells[i])
			}
		}
		return strings.TrimRight(b.String(), " ")
	}
	titles := make([]string, len(cols))
	for i, c := range cols {
		titles[i] = c.title
	}
	out := make([]string, len(rows))
	for i, row := range rows {
		out[i] = line(row)
	}
	return line(titles), out
}

// cut shortens s to n runes, marking the cut with "~".
func cut(s string, n int) string {
	switch {
	case utf8.RuneCountInString(s) <= n:
		return s
	case n < 1:
		return ""
	}
	return string([]rune(s)[:n-1]) + "~"
}
