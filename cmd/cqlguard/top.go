package main

// cqlguard top: a live view of one proxy from its admin listener. Each
// refresh reads /hot and /metrics; the frame is drawn by renderTop, a pure
// function of what was read, so that it is tested without a terminal.
// Rates of counters (refusals, upstream requests) are the difference
// between two reads of /metrics over the time between them. /metrics is
// read in the Prometheus text format, through expfmt, and only the four
// metrics named below are kept; OpenMetrics and protobuf are not asked for.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/term"

	"github.com/cqlguard/cqlguard/admin"
	"github.com/cqlguard/cqlguard/config"
)

// topOptions are top's command line, resolved.
type topOptions struct {
	admin    string // host:port, or a base URL
	n        int
	interval time.Duration
	token    string
	once     bool
}

// topFlags are top's flags.
type topFlags struct {
	admin, config, tokenFile *string
	n                        *int
	interval                 *time.Duration
	once                     *bool
}

// newTopFlags returns top's flags.
func newTopFlags() (*flag.FlagSet, topFlags) {
	fs := newFlagSet("top")
	return fs, topFlags{
		admin:     fs.String("admin", "", "admin listener to read, host:port (default admin.listen of -config, else 127.0.0.1:9180); env CQLGUARD_ADMIN_LISTEN"),
		config:    fs.String("config", "", "read admin.listen and the bearer token (admin.token_file or admin.token_env) from this configuration file; env CQLGUARD_CONFIG"),
		n:         fs.Int("n", 20, "hot partitions to ask /hot for"),
		interval:  fs.Duration("interval", time.Second, "time between refreshes"),
		tokenFile: fs.String("token-file", "", "file holding the bearer token /hot asks for (admin.token_file)"),
		once:      fs.Bool("once", false, "print one frame, with rates over one -interval, and exit: status 1 if /hot or /metrics could not be read"),
	}
}

// parseTop parses top's flags over the configuration file, if any, and
// the environment: the admin address is -admin, else CQLGUARD_ADMIN_LISTEN,
// else the file's admin.listen, else the default; the token is
// -token-file's, else the file's admin.token_file or admin.token_env.
func parseTop(args []string) (topOptions, error) {
	fs, f := newTopFlags()
	if err := parseFlags(fs, args); err != nil {
		return topOptions{}, err
	}
	switch {
	case fs.NArg() > 0:
		return topOptions{}, usageError{msg: fmt.Sprintf("top: unexpected argument %q", fs.Arg(0))}
	case *f.n < 1:
		return topOptions{}, usageError{msg: fmt.Sprintf("top: -n %d: want at least 1", *f.n)}
	case *f.interval <= 0:
		return topOptions{}, usageError{msg: fmt.Sprintf("top: -interval %v: must be positive", *f.interval)}
	}
	o := topOptions{admin: config.Default().Admin.Listen, n: *f.n, interval: *f.interval, once: *f.once}
	path := *f.config
	if path == "" {
		path = os.Getenv("CQLGUARD_CONFIG")
	}
	if path != "" {
		cfg, _, err := config.Read(path)
		if err != nil {
			return o, err
		}
		if cfg.Admin.Listen == "" {
			return o, fmt.Errorf("%s: the admin listener is off (admin.listen is empty)", path)
		}
		o.admin = cfg.Admin.Listen
		token, err := cfg.Admin.Token()
		if err != nil {
			return o, fmt.Errorf("%s: %w", path, err)
		}
		o.token = string(token)
	}
	if v := os.Getenv("CQLGUARD_ADMIN_LISTEN"); v != "" {
		o.admin = v
	}
	if *f.admin != "" {
		o.admin = *f.admin
	}
	if *f.tokenFile != "" {
		b, err := os.ReadFile(*f.tokenFile)
		if err != nil {
			return o, fmt.Errorf("-token-file: %w", err)
		}
		if o.token = strings.TrimRight(string(b), "\r\n"); o.token == "" {
			return o, fmt.Errorf("-token-file: %s is empty", *f.tokenFile)
		}
	}
	return o, nil
}

// adminURL is the base URL of the admin listener at addr: a listener on
// every address (":9180", "0.0.0.0:9180") is reached on loopback.
func adminURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimRight(addr, "/")
	}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	return "http://" + addr
}

// top runs cqlguard top: a full-screen view, refreshed until q or Ctrl-C,
// when stdin and stdout are a terminal, else one plain frame per refresh.
func top(args []string, stdout io.Writer) error {
	o, err := parseTop(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	c := &admin.Client{
		BaseURL: adminURL(o.admin),
		Token:   o.token,
		HTTP:    &http.Client{Timeout: max(2*o.interval, 3*time.Second)},
	}
	if o.once {
		return topOnce(ctx, o, c, stdout)
	}
	out, ok := stdout.(*os.File)
	if !ok || !term.IsTerminal(int(out.Fd())) || !term.IsTerminal(int(os.Stdin.Fd())) {
		return topLoop(ctx, o, c, nil, func(v topView) error {
			_, err := io.WriteString(stdout, renderTop(v)+"\n\n")
			return err
		})
	}
	return topTerminal(ctx, o, c, out)
}

// topOnce prints one frame, with rates over one interval when /metrics
// answers, and returns the first error read.
func topOnce(ctx context.Context, o topOptions, c *admin.Client, stdout io.Writer) error {
	v := topView{Admin: o.admin, Interval: o.interval}
	first := scrapeAdmin(ctx, c, o.n)
	v.update(first)
	if first.metricsErr == nil {
		select {
		case <-time.After(o.interval):
			v.update(scrapeAdmin(ctx, c, o.n))
		case <-ctx.Done():
		}
	}
	if _, err := io.WriteString(stdout, renderTop(v)+"\n"); err != nil {
		return err
	}
	// The error is printed too; it may quote what the listener sent.
	for _, err := range []error{v.Scrape.metricsErr, v.Scrape.hotErr} {
		if err != nil {
			return errors.New(printable(err.Error()))
		}
	}
	return nil
}

// ANSI sequences for the full-screen view.
const (
	enterScreen = "\x1b[?1049h\x1b[?25l" // alternate screen, cursor hidden
	leaveScreen = "\x1b[?25h\x1b[?1049l"
	home        = "\x1b[H"
	eraseLine   = "\x1b[K" // to the end of the line
	eraseBelow  = "\x1b[J" // to the end of the screen
)

// topTerminal draws the view on the terminal out in raw mode, so that q
// and Ctrl-C arrive as keys, and restores the terminal when it returns.
func topTerminal(ctx context.Context, o topOptions, c *admin.Client, out *os.File) error {
	state, err := term.MakeRaw(int(os.Stdin.Fd()))
	if err != nil {
		return fmt.Errorf("terminal: %w", err)
	}
	defer term.Restore(int(os.Stdin.Fd()), state)
	io.WriteString(out, enterScreen)
	defer io.WriteString(out, leaveScreen)

	keys := make(chan byte, 16)
	go func() {
		// Left blocked on stdin when top returns: the process ends then.
		buf := make([]byte, 64)
		for {
			n, err := os.Stdin.Read(buf)
			for _, b := range buf[:n] {
				keys <- b
			}
			if err != nil {
				return
			}
		}
	}()
	return topLoop(ctx, o, c, keys, func(v topView) error {
		v.Interactive = true
		// One column short of the width: a line that fills it leaves the
		// cursor where erasing the rest of the line would erase its end.
		if w, h, err := term.GetSize(int(out.Fd())); err == nil {
			v.Width, v.Height = w-1, h
		}
		_, err := io.WriteString(out, terminalFrame(renderTop(v)))
		return err
	})
}

// terminalFrame draws frame over the previous one: raw mode does not turn
// \n into \r\n, and erasing each line's rest, rather than clearing the
// screen first, keeps the view from flickering.
func terminalFrame(frame string) string {
	var b strings.Builder
	b.WriteString(home)
	for i, line := range strings.Split(frame, "\n") {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(line)
		b.WriteString(eraseLine)
	}
	b.WriteString(eraseBelow)
	return b.String()
}

// topLoop reads the admin listener every o.interval and draws each
// reading, and a resized terminal, until ctx ends or a key in keys quits.
// One reading is under way at a time, so that a slow listener does not
// pile them up, and keys are answered while it is.
func topLoop(ctx context.Context, o topOptions, c *admin.Client, keys <-chan byte, draw func(topView) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan scrape, 1)
	read := func() { go func() { results <- scrapeAdmin(ctx, c, o.n) }() }
	read()
	pending := true
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	v := topView{Admin: o.admin, Interval: o.interval, Retrying: true}
	// A terminal shows at once that top is reading; printed frames wait
	// for a reading.
	drawn := keys != nil
	if drawn {
		if err := draw(v); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case k := <-keys:
			if k == 'q' || k == 'Q' || k == 3 || k == 4 { // Ctrl-C, Ctrl-D
				return nil
			}
		case <-tick.C:
			if !pending {
				read()
				pending = true
			}
		case s := <-results:
			pending = false
			v.update(s)
			drawn = true
			if err := draw(v); err != nil {
				return err
			}
		case <-winch:
			if drawn {
				if err := draw(v); err != nil {
					return err
				}
			}
		}
	}
}

// scrape is one reading of the admin listener. A part that could not be
// read has its error set.
type scrape struct {
	at         time.Time
	hot        []admin.HotPartition
	hotErr     error
	metrics    *metricsSample
	metricsErr error
}

// scrapeAdmin reads the first n of /hot, and /metrics, through c.
func scrapeAdmin(ctx context.Context, c *admin.Client, n int) scrape {
	s := scrape{at: time.Now()}
	s.hot, s.hotErr = c.Hot(ctx, n)
	var se *admin.StatusError
	if errors.As(s.hotErr, &se) && se.Status == http.StatusUnauthorized {
		s.hotErr = tokenError(c.Token != "")
	}
	if text, err := c.Metrics(ctx); err != nil {
		s.metricsErr = err
	} else {
		s.metrics, s.metricsErr = parseMetrics(bytes.NewReader(text))
	}
	return s
}

// tokenError says what to do when /hot refused top: pass a token, or
// check the one passed.
func tokenError(passed bool) error {
	if !passed {
		return errors.New("/hot asks for a bearer token: pass -token-file FILE, or -config with admin.token_file or admin.token_env")
	}
	return errors.New("/hot refused the bearer token: check -token-file, or admin.token_file or admin.token_env of -config")
}

// metricsSample is what top shows of one reading of /metrics.
type metricsSample struct {
	connections, inFlight float64
	// upstream counts requests answered upstream, when the histogram of
	// their durations is there.
	upstream     float64
	haveUpstream bool
	rejections   map[rejectionKey]float64
}

// rejectionKey is the labels of cqlguard_rate_limit_rejections_total.
type rejectionKey struct{ keyspace, table, op, outcome string }

// Metric names top reads.
const (
	metricConnections = "cqlguard_client_connections"
	metricInFlight    = "cqlguard_requests_in_flight"
	metricUpstream    = "cqlguard_upstream_request_duration_seconds"
	metricRejections  = "cqlguard_rate_limit_rejections_total"
)

// parseMetrics reads the Prometheus text format.
func parseMetrics(r io.Reader) (*metricsSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	m := &metricsSample{rejections: map[rejectionKey]float64{}}
	one := func(name string) *dto.Metric {
		if f := families[name]; f != nil && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0]
		}
		return nil
	}
	m.connections = one(metricConnections).GetGauge().GetValue()
	m.inFlight = one(metricInFlight).GetGauge().GetValue()
	if h := one(metricUpstream).GetHistogram(); h != nil {
		m.upstream, m.haveUpstream = float64(h.GetSampleCount()), true
	}
	for _, metric := range families[metricRejections].GetMetric() {
		var k rejectionKey
		for _, l := range metric.GetLabel() {
			v := l.GetValue()
			switch l.GetName() {
			case "keyspace":
				k.keyspace = v
			case "table":
				k.table = v
			case "op":
				k.op = v
			case "outcome":
				k.outcome = v
			}
		}
		m.rejections[k] += metric.GetCounter().GetValue()
	}
	return m, nil
}

// rates are the counters' rates between two readings of /metrics.
type rates struct {
	upstream     float64 // requests answered upstream per second
	haveUpstream bool
	refusals     []refusalRate // busiest first
}

// refusalRate is one label set of cqlguard_rate_limit_rejections_total.
type refusalRate struct {
	rejectionKey
	perSecond, total float64
}

// increase is how much a counter went up from prev to cur: a counter that
// went down was reset, by a restart, and counted cur since.
func increase(prev, cur float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// rateBetween computes the rates from prev, read at prevAt, to cur, read
// at curAt; nil when there is no earlier reading or no time between them.
// A label set missing from prev had not counted yet: it counts from 0.
func rateBetween(prev *metricsSample, prevAt time.Time, cur *metricsSample, curAt time.Time) *rates {
	dt := curAt.Sub(prevAt).Seconds()
	if prev == nil || cur == nil || dt <= 0 {
		return nil
	}
	r := &rates{}
	if prev.haveUpstream && cur.haveUpstream {
		r.upstream, r.haveUpstream = increase(prev.upstream, cur.upstream)/dt, true
	}
	for k, v := range cur.rejections {
		r.refusals = append(r.refusals, refusalRate{rejectionKey: k, perSecond: increase(prev.rejections[k], v) / dt, total: v})
	}
	slices.SortFunc(r.refusals, func(a, b refusalRate) int {
		if a.perSecond != b.perSecond {
			if a.perSecond > b.perSecond {
				return -1
			}
			return 1
		}
		return strings.Compare(a.keyspace+"."+a.table+" "+a.op+" "+a.outcome, b.keyspace+"."+b.table+" "+b.op+" "+b.outcome)
	})
	return r
}

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
	s := v.Scrape
	var lines []string
	head := "cqlguard top  " + v.Admin
	if !s.at.IsZero() {
		head += "  " + s.at.Format(time.TimeOnly)
	}
	head += "  every " + v.Interval.String()
	if v.Interactive {
		head += "  (q quits)"
	}
	lines = append(lines, head)
	if m := s.metrics; m != nil {
		up := "-"
		if v.Rates != nil && v.Rates.haveUpstream {
			up = formatRate(v.Rates.upstream)
		}
		lines = append(lines, fmt.Sprintf("connections %.0f  in flight %.0f  upstream %s req/s", m.connections, m.inFlight, up))
	} else {
		lines = append(lines, "connections -  in flight -  upstream - req/s")
	}
	// One error for both when the listener did not answer at all.
	shared := s.metricsErr != nil && s.hotErr != nil && s.metricsErr.Error() == s.hotErr.Error()
	if s.metricsErr != nil {
		msg := "error: " + printable(s.metricsErr.Error())
		if v.Retrying {
			msg += " (retrying)"
		}
		lines = append(lines, msg)
	}

	hotHead, hotRows := hotTable(s.hot)
	refHead, refRows := refusalTable(s.metrics, v.Rates)
	nHot, nRef := len(hotRows), len(refRows)
	if v.Height > 0 {
		// Titles, column heads and blank lines take 6 rows below the header.
		room := max(v.Height-len(lines)-6, 0)
		nRef = min(nRef, max(room-nHot, min(room/3, nRef)))
		nHot = min(nHot, room-nRef)
	}

	lines = append(lines, "")
	switch {
	case shared:
		lines = append(lines, "Hot partitions: -")
	case s.hotErr != nil:
		lines = append(lines, "Hot partitions: "+printable(s.hotErr.Error()))
	case s.at.IsZero():
		lines = append(lines, "Hot partitions: reading "+v.Admin+" ...")
	case len(hotRows) == 0:
		lines = append(lines, "Hot partitions: none counted yet")
	default:
		lines = append(lines, fmt.Sprintf("Hot partitions (%s)", shown(nHot, len(hotRows))), hotHead)
		lines = append(lines, hotRows[:nHot]...)
	}

	lines = append(lines, "")
	switch {
	case s.metrics == nil:
		lines = append(lines, "Refusals: -")
	case len(refRows) == 0:
		lines = append(lines, "Refusals: none")
	default:
		lines = append(lines, fmt.Sprintf("Refusals (%s)", shown(nRef, len(refRows))), refHead)
		lines = append(lines, refRows[:nRef]...)
	}

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

// printable escapes what, in text from the admin listener, would drive the
// terminal or hide or reorder the text around it: control characters
// (C0, C1 and DEL), format characters such as the bidi controls (U+202A to
// U+202E, U+2066 to U+2069) and zero-width spaces, line and paragraph
// separators, surrogates, private-use and unassigned code points, and
// bytes that are not UTF-8. Each is shown as in a Go string literal:
// \x1b, \u202e, \U000e0001, a stray byte as \xff. Backslashes are left as
// they are, so that escaping escaped text changes nothing.
func printable(s string) string {
	if !strings.ContainsFunc(s, hidden) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !hidden(r):
			b.WriteString(s[i : i+n])
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// hidden reports whether r is shown escaped: all but letters, marks,
// numbers, punctuation, symbols and spaces.
func hidden(r rune) bool { return !unicode.IsGraphic(r) }
