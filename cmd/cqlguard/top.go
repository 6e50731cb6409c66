package main

// cqlguard top: a live view of one proxy from its admin listener. Each
// refresh reads /hot and /metrics through an admin.Client; the frame is
// drawn by renderTop (toprender.go), a pure function of what was read, so
// that it is tested without a terminal. Rates of counters (refusals,
// upstream requests) are the difference between two reads of /metrics
// over the time between them (topmetrics.go). On a terminal the view is
// full-screen (topterm.go). Here: the command line, and the loop that
// reads and draws.

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
	"strings"
	"syscall"
	"time"

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
