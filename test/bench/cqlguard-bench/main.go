// Command cqlguard-bench measures cqlguard: it runs a fast fake upstream
// node, a CQL load generator, a load through the gocql driver, a plain TCP
// relay to measure against, and the suite behind `make bench` that runs
// the loads direct, through the relay and HAProxy, and through cqlguard,
// and prints the tables.
//
//	cqlguard-bench upstream -listen 127.0.0.1:19042
//	cqlguard-bench load -addr 127.0.0.1:9042 -duration 30s -loader 'name=uniform,conns=4' -loader 'name=hot,dist=hot,start=10s'
//	cqlguard-bench gocql -addr 127.0.0.1:9042 -rate 30000
//	cqlguard-bench relay -listen 127.0.0.1:19043 -upstream 127.0.0.1:19042 [-mode eventloop]
//	cqlguard-bench suite -cqlguard bin/cqlguard
//	cqlguard-bench goodput -cqlguard bin/cqlguard -upstream 127.0.0.2:9042 -out docs/goodput.png
//	cqlguard-bench classes -cqlguard bin/cqlguard -upstream 127.0.0.2:9042 -out docs/classes.png
//	cqlguard-bench shedding -cqlguard bin/cqlguard -upstream 127.0.0.2:9042 -out docs/shedding.png
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime/trace"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cqlguard/cqlguard/test/bench/gocqlload"
	"github.com/cqlguard/cqlguard/test/bench/relay"
	"github.com/cqlguard/cqlguard/test/fakenode"
	"github.com/cqlguard/cqlguard/test/load"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cqlguard-bench:", err)
		os.Exit(1)
	}
}

const usage = `usage: cqlguard-bench <command> [flags]

commands:
  upstream   run the fake upstream node until SIGTERM or SIGINT
  load       drive a node or proxy and report each second
  gocql      drive a node or proxy through gocql: prepared point reads
  relay      copy bytes between clients and an upstream, and nothing else
  suite      the benchmark of make bench: direct, through a relay, HAProxy and cqlguard
  goodput    the goodput experiment of make goodput, against a real node
  classes    the client classes experiment of make classes, against a real node
  shedding   the shedding experiment of make shedding, against a real node

cqlguard-bench <command> -h lists a command's flags.`

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errors.New("no command")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	switch args[0] {
	case "upstream":
		return runUpstream(ctx, args[1:], stdout, stderr)
	case "load":
		return runLoad(ctx, args[1:], stdout, stderr)
	case "gocql":
		return runGocql(ctx, args[1:], stdout, stderr)
	case "relay":
		return runRelay(ctx, args[1:], stdout, stderr)
	case "suite":
		return runSuite(ctx, args[1:], stdout, stderr)
	case "goodput":
		return runGoodput(ctx, args[1:], stdout, stderr)
	case "classes":
		return runClasses(ctx, args[1:], stdout, stderr)
	case "shedding":
		return runShedding(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func runUpstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:19042", "address to listen on (port 0 picks one)")
	nodes := fs.Int("nodes", 1, "nodes of the fake cluster: the first at -listen, the others at the next IPs on its port, each the others' peer, one token each, bench at replication factor 1")
	// Like the Cassandra 5 nodes it stands in for, it serves system.peers_v2.
	o := fakenode.Options{PeersV2: true}
	fs.StringVar(&o.Keyspace, "keyspace", "bench", "keyspace of the one user table")
	fs.StringVar(&o.Table, "table", "kv", "name of the one user table (k bigint PRIMARY KEY, v blob)")
	fs.IntVar(&o.RowBytes, "row-bytes", 64, "size of v in the rows a SELECT returns")
	fs.IntVar(&o.Rows, "rows", 1, "rows a SELECT returns")
	fs.StringVar(&o.Username, "user", "", "ask for PasswordAuthenticator credentials with this user")
	fs.StringVar(&o.Password, "password", "", "the password of -user")
	fs.BoolVar(&o.RateLimitError, "rate-limit-error", false, "advertise ScyllaDB's rate-limit error")
	fs.IntVar(&o.RejectEvery, "reject-every", 0, "reject every n-th request on the user table (0: none)")
	maxVersion := fs.Uint("max-version", 5, "highest protocol version spoken")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.MaxVersion = uint8(*maxVersion)
	ns, err := startNodes(*listen, *nodes, o)
	for _, n := range ns {
		defer n.Close()
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "listening on", ns[0].Addr())
	<-ctx.Done()
	var answered uint64
	for _, n := range ns {
		answered += n.Requests()
	}
	fmt.Fprintf(stderr, "answered %d requests\n", answered)
	return nil
}

// startNodes starts n fake nodes with options o: the first at listen, the
// others at the IPs after its IP, on the port the first got, each listing
// the others as its peers. It returns those it started.
func startNodes(listen string, n int, o fakenode.Options) ([]*fakenode.Node, error) {
	if n < 1 {
		return nil, fmt.Errorf("-nodes %d: want at least 1", n)
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %w", listen, err)
	}
	first, err := netip.ParseAddr(host)
	if err != nil && n > 1 {
		return nil, fmt.Errorf("-listen %q: -nodes above 1 needs an IP: %w", listen, err)
	}
	ips := []string{host}
	for ip := first; len(ips) < n; {
		ip = ip.Next()
		ips = append(ips, ip.String())
	}
	var nodes []*fakenode.Node
	for i, ip := range ips {
		opts := o
		opts.Peers = slices.Delete(slices.Clone(ips), i, i+1)
		node, err := fakenode.Start(net.JoinHostPort(ip, port), opts)
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, node)
		if i == 0 {
			// The peers listen on the port the first node got.
			_, port, _ = net.SplitHostPort(node.Addr())
		}
	}
	return nodes, nil
}

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:19043", "address to listen on (port 0 picks one)")
	upstream := fs.String("upstream", "127.0.0.1:19042", "address to relay each connection to")
	mode := fs.String("mode", "go", "go: a goroutine per direction (io.Copy); eventloop: one event loop for every connection")
	tracePath := fs.String("trace", "", "write an execution trace (runtime/trace) of the relay to this file, -trace-for long from -trace-after, to count its wake-ups and system calls as cqlguard's admin.profiling does")
	traceAfter := fs.Duration("trace-after", 2*time.Second, "when the trace starts")
	traceFor := fs.Duration("trace-for", 2*time.Second, "how long the trace lasts")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tracePath != "" {
		go func() {
			if err := traceWindow(ctx, *tracePath, *traceAfter, *traceFor); err != nil {
				fmt.Fprintln(stderr, "relay: trace:", err)
			}
		}()
	}
	switch *mode {
	case "go":
	case "eventloop":
		rl, err := relay.ListenEventLoop(*listen, *upstream)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, "listening on", rl.Addr())
		<-ctx.Done()
		return rl.Close()
	default:
		return fmt.Errorf("relay: -mode %q: want go or eventloop", *mode)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "listening on", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- relay.Serve(ln, *upstream) }()
	select {
	case <-ctx.Done():
		ln.Close()
		return <-served
	case err := <-served:
		return err
	}
}

// traceWindow writes an execution trace to path from after to after+d,
// unless ctx ends first.
func traceWindow(ctx context.Context, path string, after, d time.Duration) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(after):
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := trace.Start(f); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	trace.Stop()
	return f.Close()
}

func runGocql(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gocql", flag.ContinueOnError)
	fs.SetOutput(stderr)
	spec := gocqlload.DefaultSpec()
	fs.StringVar(&spec.Addr, "addr", "127.0.0.1:9042", "the node or proxy")
	fs.StringVar(&spec.Keyspace, "keyspace", spec.Keyspace, "keyspace of the table read")
	fs.StringVar(&spec.Table, "table", spec.Table, "table read: k bigint PRIMARY KEY, v blob")
	fs.Uint64Var(&spec.Keys, "keys", spec.Keys, "keys drawn from, uniformly")
	fs.IntVar(&spec.Conns, "conns", spec.Conns, "connections (the driver's NumConns)")
	fs.IntVar(&spec.Concurrency, "concurrency", spec.Concurrency, "requests in flight over all connections: one goroutine each")
	fs.Float64Var(&spec.Rate, "rate", 0, "requests per second (0: as fast as the concurrency allows)")
	fs.BoolVar(&spec.NoCoalesce, "no-coalesce", false, "turn off the driver's write coalescing (WriteCoalesceWaitTime 0)")
	fs.DurationVar(&spec.Duration, "duration", spec.Duration, "measured length of the run")
	fs.DurationVar(&spec.Warmup, "warmup", spec.Warmup, "start of the run left out of the summary")
	summaryJSON := fs.Bool("summary-json", false, "print the summary as JSON (a list of one) instead of text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gocql: unexpected argument %q", fs.Arg(0))
	}
	sum, err := gocqlload.Run(ctx, spec)
	if err != nil {
		return err
	}
	if *summaryJSON {
		return json.NewEncoder(stdout).Encode([]load.Summary{sum})
	}
	load.WriteSummaries(stdout, []load.Summary{sum})
	return nil
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := load.DefaultSpec()
	for _, k := range load.SpecKeys {
		fs.Func(k, "loader setting "+k+" (see -loader)", func(v string) error { return base.Set(k, v) })
	}
	var loaders, phases stringList
	fs.Var(&loaders, "loader", "a loader, as key=value,... over the flags above; repeat for several at once (default: one, from the flags)")
	fs.Var(&phases, "phase", "a phase, as NAME@OFFSET or NAME@OFFSET=COMMAND (COMMAND runs with sh -c when the phase begins); repeatable")
	duration := fs.Duration("duration", 10*time.Second, "length of the run")
	warmup := fs.Duration("warmup", 0, "start of the run left out of the summary")
	jsonPath := fs.String("json", "", "also write each second's figures to this file, one JSON object a line")
	summaryJSON := fs.Bool("summary-json", false, "print the summaries as JSON on stdout instead of text")
	quiet := fs.Bool("quiet", false, "do not print each second")
	createSchema := fs.Int("create-schema", 0, "first create each loader's keyspace (SimpleStrategy with this replication factor) and table (k bigint PRIMARY KEY, v blob) unless they exist; 0: do not")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("load: unexpected argument %q", fs.Arg(0))
	}
	var specs []load.Spec
	if len(loaders) == 0 {
		if err := base.Validate(); err != nil {
			return err
		}
		specs = append(specs, base)
	}
	for _, l := range loaders {
		s, err := load.ParseSpec(l, base)
		if err != nil {
			return fmt.Errorf("-loader %q: %w", l, err)
		}
		specs = append(specs, s)
	}
	if *createSchema > 0 {
		done := map[string]bool{}
		for _, s := range specs {
			key := s.Addr + " " + s.Keyspace + "." + s.Table
			if done[key] {
				continue
			}
			done[key] = true
			if err := load.CreateSchema(s, *createSchema); err != nil {
				return fmt.Errorf("creating %s.%s: %w", s.Keyspace, s.Table, err)
			}
		}
	}
	opts := load.Options{Duration: *duration, Warmup: *warmup}
	for _, p := range phases {
		ph, err := parsePhase(p, stderr)
		if err != nil {
			return err
		}
		opts.Phases = append(opts.Phases, ph)
	}
	var jsonOut *json.Encoder
	if *jsonPath != "" {
		f, err := os.Create(*jsonPath)
		if err != nil {
			return err
		}
		defer f.Close()
		jsonOut = json.NewEncoder(f)
	}
	opts.Report = func(s load.Second) {
		if !*quiet {
			load.WriteSecond(stderr, s)
		}
		if jsonOut != nil {
			jsonOut.Encode(s)
		}
	}
	sums, err := load.Run(ctx, specs, opts)
	if *summaryJSON {
		if e := json.NewEncoder(stdout).Encode(sums); e != nil {
			return e
		}
	} else {
		load.WriteSummaries(stdout, sums)
	}
	return err
}

// parsePhase reads NAME@OFFSET or NAME@OFFSET=COMMAND.
func parsePhase(s string, stderr io.Writer) (load.Phase, error) {
	spec, cmd, hasCmd := strings.Cut(s, "=")
	name, at, ok := strings.Cut(spec, "@")
	if !ok || name == "" {
		return load.Phase{}, fmt.Errorf("-phase %q: want NAME@OFFSET[=COMMAND]", s)
	}
	d, err := time.ParseDuration(at)
	if err != nil {
		return load.Phase{}, fmt.Errorf("-phase %q: %w", s, err)
	}
	p := load.Phase{Name: name, At: d}
	if hasCmd {
		p.Action = func(ctx context.Context) error {
			c := exec.CommandContext(ctx, "sh", "-c", cmd)
			c.Stdout, c.Stderr = stderr, stderr
			if err := c.Run(); err != nil {
				return fmt.Errorf("%s: %w", cmd, err)
			}
			return nil
		}
	}
	return p, nil
}
