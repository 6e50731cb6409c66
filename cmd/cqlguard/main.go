// Command cqlguard runs the CQL proxy: it reads the configuration file and
// flags, then serves until SIGTERM or SIGINT, when it drains. SIGHUP, or a
// change of the configuration file, reloads what can change while running
// (the limits section).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/admin"
	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/proxy"
)

func main() { os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr)) }

// usageError is a command line that cannot be run: exit status 2, with
// the usage of the command it names.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// command is one of cqlguard's commands, as usage describes it.
type command struct {
	name string
	// synopsis is its command line; summary is what it does, in the list
	// of commands; about says more, in its own usage.
	synopsis, summary, about string
	// flags returns a flag set of its flags, for its usage.
	flags func() *flag.FlagSet
}

// commands are cqlguard's commands, in the order usage lists them.
var commands = []command{
	{
		name: "serve", synopsis: "cqlguard [serve] [flags]",
		summary: "run the proxy (the default)",
		about: `Run the proxy: read the configuration file and the flags, listen, and serve
until SIGTERM or SIGINT, then drain. SIGHUP, or a change of the file,
reloads what can change while running.`,
		flags: func() *flag.FlagSet { fs, _ := newServeFlags(); return fs },
	},
	{
		name: "check-config", synopsis: "cqlguard check-config [flags] FILE",
		summary: "check a configuration file as serve would, without serving",
		about: `Check FILE, with the flags and the environment applied over it, as serve
does before it listens: every value, every address and port, and the files
and environment variables it names (certificates, keys and CAs parsed and
matched, password and token files, password_env and token_env). Every
problem is printed, one a line, naming the file and line; status 1 if
there is any. What is likely a mistake is printed as a warning, which
does not fail the check. What only listening can tell (a port in use, an
address not on this host, a host name that does not resolve) is not
checked.`,
		flags: func() *flag.FlagSet { fs, _ := newCheckConfigFlags(); return fs },
	},
	{
		name: "top", synopsis: "cqlguard top [flags]",
		summary: "watch a running proxy: hot partitions, refusals per table",
		about: `Watch a running proxy from its admin listener: its hot partitions against
their limits and its refusals per table, refreshed every -interval; q
quits. Without a terminal it prints one frame per refresh.`,
		flags: func() *flag.FlagSet { fs, _ := newTopFlags(); return fs },
	},
	{
		name: "version", synopsis: "cqlguard version",
		summary: "print the version and the build's revision",
		about:   "Print the version, the revision the binary was built from and Go's version.",
		flags:   func() *flag.FlagSet { return newFlagSet("version") },
	},
	{
		name: "help", synopsis: "cqlguard help [COMMAND]",
		summary: "print this, or a command's usage",
		about:   "Print cqlguard's usage, or COMMAND's: the same as cqlguard COMMAND -h.",
		flags:   func() *flag.FlagSet { return newFlagSet("help") },
	},
}

// environment is what the environment sets, for serve's and check-config's
// usage.
const environment = `The environment sets what the flags do, below them and over the file:
CQLGUARD_CONFIG, CQLGUARD_LISTEN, CQLGUARD_ADVERTISE, CQLGUARD_UPSTREAMS
(comma-separated), CQLGUARD_MODE, CQLGUARD_ADMIN_LISTEN, CQLGUARD_LOG_LEVEL,
CQLGUARD_LOG_FORMAT.
`

// lookup returns the command called name.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usage writes cqlguard's usage: its commands, then serve's flags.
func usage(w io.Writer) {
	fmt.Fprint(w, "Usage: cqlguard [COMMAND] [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun \"cqlguard COMMAND -h\" for a command's usage and flags. Without a\ncommand, cqlguard serves; its flags:\n\n")
	serve, _ := lookup("serve")
	printFlags(w, serve.flags())
	fmt.Fprint(w, "\n"+environment)
}

// commandUsage writes c's usage: its command line, what it does, its
// flags.
func commandUsage(w io.Writer, c command) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.synopsis, c.about)
	if fs := c.flags(); hasFlags(fs) {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, fs)
	}
	if c.name == "serve" || c.name == "check-config" {
		fmt.Fprint(w, "\n"+environment)
	}
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// helpFlag reports whether arg asks for help, as the flag package takes it.
func helpFlag(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

// cli runs the command in args and returns the exit status: 0, 1 when
// the command failed, 2 for a command line that cannot be run. Help that
// was asked for goes to stdout; usage after a mistake, to stderr.
func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && helpFlag(args[0]) {
		usage(stdout)
		return 0
	}
	name := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	var err error
	switch name {
	case "serve":
		err = run(args)
	case "check-config":
		err = checkConfig(args, stdout, stderr)
	case "top":
		err = top(args, stdout)
	case "version":
		err = printVersion(args, stdout)
	case "help":
		err = help(args, stdout)
	default:
		fmt.Fprintf(stderr, "cqlguard: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	c, _ := lookup(name)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		commandUsage(stdout, c)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "cqlguard: %s\n\n", ue.msg)
		commandUsage(stderr, c)
		return 2
	}
	// A file's problems are reported all at once, one per line.
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(stderr, "cqlguard:", line)
	}
	return 1
}

// help prints cqlguard's usage, or that of the command args names.
func help(args []string, stdout io.Writer) error {
	fs := newFlagSet("help")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		usage(stdout)
		return nil
	case 1:
		c, ok := lookup(fs.Arg(0))
		if !ok {
			return usageError{msg: fmt.Sprintf("help: unknown command %q", fs.Arg(0))}
		}
		commandUsage(stdout, c)
		return nil
	}
	return usageError{msg: "help takes at most one COMMAND"}
}

// printVersion is the version command.
func printVersion(args []string, stdout io.Writer) error {
	fs := newFlagSet("version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("version takes no arguments, got %q", fs.Args())}
	}
	fmt.Fprintln(stdout, version())
	return nil
}

// revision is the source revision the build stamped with -ldflags
// "-X main.revision=...": make build and the Dockerfile stamp git describe's
// (a commit, "-dirty" when the tree had changes), which holds where Go's own
// stamp does not, with GOFLAGS=-buildvcs=false or in a Git worktree that a
// container build cannot read. Empty when the build stamped none.
var revision string

// version is the module's version and the revision it was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "cqlguard (no build information)"
	}
	return describeBuild(bi, revision)
}

// describeBuild is version for the build information bi and the stamped
// revision stamp: the stamp if any, else the revision Go recorded from
// the checkout, if any.
func describeBuild(bi *debug.BuildInfo, stamp string) string {
	v := "cqlguard " + bi.Main.Version
	if stamp != "" {
		return v + " revision " + stamp + " " + bi.GoVersion
	}
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			v += " revision " + kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				v += " (modified)"
			}
		}
	}
	return v + " " + bi.GoVersion
}

// configFlags are the flags that set the configuration, over the file
// and the environment.
type configFlags struct {
	config, listen, advertise, upstreams, mode, admin, logFormat, logLevel *string
}

func addConfigFlags(fs *flag.FlagSet) configFlags {
	return configFlags{
		config:    fs.String("config", "", "YAML configuration file (see config.example.yaml); env CQLGUARD_CONFIG"),
		listen:    fs.String("listen", "", "address drivers connect to (overrides listen); env CQLGUARD_LISTEN"),
		advertise: fs.String("advertise", "", "address reported to drivers as the proxy's own (overrides advertise); env CQLGUARD_ADVERTISE"),
		upstreams: fs.String("upstream", "", "comma-separated upstream nodes host:port (overrides upstreams); env CQLGUARD_UPSTREAMS"),
		mode:      fs.String("mode", "", "cluster or node (overrides mode); env CQLGUARD_MODE"),
		admin:     fs.String("admin", "", "admin listener for /metrics, /healthz, /readyz (overrides admin.listen); env CQLGUARD_ADMIN_LISTEN"),
		logFormat: fs.String("log-format", "", "json or console (overrides log.format); env CQLGUARD_LOG_FORMAT"),
		logLevel:  fs.String("log-level", "", "debug, info, warn or error (overrides log.level); env CQLGUARD_LOG_LEVEL"),
	}
}

// resolve reads the configuration file, if any, applies the environment
// and then the flags over it, and checks the result: flags and the
// environment can mend a file that does not pass its checks alone. It
// returns the configuration and what in it is likely a mistake
// (config.Warnings).
func (f configFlags) resolve(path string) (config.Config, []string, error) {
	cfg, data, err := f.read(path)
	if err != nil {
		return cfg, nil, err
	}
	return cfg, config.Warnings(&cfg, data), nil
}

// read is resolve without the warnings; it also returns the file's
// contents.
func (f configFlags) read(path string) (config.Config, []byte, error) {
	cfg, data := config.Default(), []byte(nil)
	var decodeErr error
	if path != "" {
		// Values of the wrong type are reported with every other problem
		// of the file, after the checks.
		if cfg, data, decodeErr = config.Read(path); decodeErr != nil && !config.Partial(decodeErr) {
			return cfg, nil, decodeErr
		}
	}
	set := func(dst *string, env, flag string) {
		if v, ok := os.LookupEnv(env); ok && v != "" {
			*dst = v
		}
		if flag != "" {
			*dst = flag
		}
	}
	set(&cfg.Listen, "CQLGUARD_LISTEN", *f.listen)
	set(&cfg.Advertise, "CQLGUARD_ADVERTISE", *f.advertise)
	set(&cfg.Mode, "CQLGUARD_MODE", *f.mode)
	set(&cfg.Admin.Listen, "CQLGUARD_ADMIN_LISTEN", *f.admin)
	set(&cfg.Log.Format, "CQLGUARD_LOG_FORMAT", *f.logFormat)
	set(&cfg.Log.Level, "CQLGUARD_LOG_LEVEL", *f.logLevel)
	upstreams := ""
	set(&upstreams, "CQLGUARD_UPSTREAMS", *f.upstreams)
	if upstreams != "" {
		cfg.Upstreams = strings.Split(upstreams, ",")
	}
	if err := errors.Join(decodeErr, config.Check(&cfg, data), config.CheckFiles(&cfg, data)); err != nil {
		if path == "" {
			return cfg, nil, fmt.Errorf("configuration: %w", err)
		}
		return cfg, nil, err
	}
	return cfg, data, nil
}

// configPath is the -config flag, or else CQLGUARD_CONFIG.
func (f configFlags) configPath() string {
	if *f.config != "" {
		return *f.config
	}
	return os.Getenv("CQLGUARD_CONFIG")
}

// newFlagSet returns an empty flag set for the command name that says
// nothing itself: cli prints its usage and errors.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("cqlguard "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args into fs. It returns flag.ErrHelp for -h, and a
// usage error for a flag it does not know or a value it cannot take.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{msg: err.Error()}
	}
	return nil
}

// newCheckConfigFlags returns check-config's flags.
func newCheckConfigFlags() (*flag.FlagSet, configFlags) {
	fs := newFlagSet("check-config")
	return fs, addConfigFlags(fs)
}

// checkConfig checks a configuration file with the flags and environment
// applied over it, and says so on stdout; what in it is likely a mistake
// goes to stderr as warnings, which do not fail the check.
func checkConfig(args []string, stdout, stderr io.Writer) error {
	fs, flags := newCheckConfigFlags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := flags.configPath()
	switch {
	case fs.NArg() == 1 && path == "":
		path = fs.Arg(0)
	case fs.NArg() != 0 || path == "":
		return usageError{msg: "check-config takes one FILE"}
	}
	cfg, warnings, err := flags.resolve(path)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "cqlguard: warning:", w)
	}
	fmt.Fprintf(stdout, "%s: ok (listen %s, upstreams %s, mode %s)\n", path, cfg.Listen, strings.Join(cfg.Upstreams, ","), cfg.Mode)
	return nil
}

// serveFlags are serve's flags.
type serveFlags struct {
	configFlags
	watch       *bool
	watchEvery  *time.Duration
	showVersion *bool
}

// newServeFlags returns serve's flags.
func newServeFlags() (*flag.FlagSet, serveFlags) {
	fs := newFlagSet("serve")
	return fs, serveFlags{
		configFlags: addConfigFlags(fs),
		watch:       fs.Bool("watch-config", true, "reload the -config file when its contents change"),
		watchEvery:  fs.Duration("watch-interval", config.DefaultWatchInterval, "how often -watch-config looks at the file"),
		showVersion: fs.Bool("version", false, "print the version and exit"),
	}
}

// run runs cqlguard serve: the proxy and its admin listener, as the flags
// and the configuration file say, until SIGTERM or SIGINT.
func run(args []string) error {
	fs, flags := newServeFlags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *flags.showVersion {
		fmt.Println(version())
		return nil
	}
	if *flags.watchEvery <= 0 {
		return fmt.Errorf("-watch-interval %v: must be positive", *flags.watchEvery)
	}
	path := flags.configPath()
	cfg, warnings, err := flags.resolve(path)
	if err != nil {
		return err
	}

	log, err := newLogger(cfg.Log)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn().Msg(w)
	}
	// The Redis client's own complaints (a connection refused while Redis
	// is down, say) would repeat every report; the reporter logs each change
	// of state once, so the client's go to debug.
	redis.SetLogger(redisLog{log.With().Str("component", "redis").Logger()})
	return serve(cfg, log, path, *flags.watch, *flags.watchEvery)
}

// serve serves cfg until SIGTERM or SIGINT, then drains. With a
// configuration file at path, SIGHUP reloads it, and so does a change of
// its contents when watch is set, looked for every watchEvery.
func serve(cfg config.Config, log zerolog.Logger, path string, watch bool, watchEvery time.Duration) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := proxy.New(cfg, log, reg)
	if err != nil {
		return err
	}
	// Signals are caught from here on, so that one arriving while the
	// listeners start is not fatal.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening for clients: %w", err)
	}
	adminSrv, err := serveAdmin(cfg, p, reg, log)
	if err != nil {
		return err
	}
	log.Info().Str("listen", cfg.Listen).Str("advertise", cfg.AdvertiseAddr()).Str("mode", cfg.Mode).
		Strs("upstreams", cfg.Upstreams).Str("admin", cfg.Admin.Listen).Msg("cqlguard serving")

	serveErr := make(chan error, 1)
	go func() { serveErr <- p.Serve(ln) }()
	// The watcher loads the file again, on SIGHUP and when its contents
	// change, and the proxy applies what loaded or records what did not,
	// logging the outcome; it carries on either way.
	var watcher *config.Watcher
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	if path != "" {
		watcher = config.NewWatcher(cfg, log, func(c config.Config, err error) {
			if err != nil {
				p.ReloadFailed(path, err)
				return
			}
			p.Reload(c)
		})
		if watch {
			go watcher.Run(watchCtx, watchEvery)
		}
	}
wait:
	for {
		select {
		case err := <-serveErr:
			return err
		case <-hup:
			if watcher == nil {
				log.Warn().Msg("SIGHUP: no -config file to reload")
				continue
			}
			watcher.Reload()
		case s := <-sig:
			log.Info().Str("signal", s.String()).Float64("timeout_seconds", time.Duration(cfg.DrainTimeout).Seconds()).Msg("draining")
			break wait
		}
	}
	stopWatch()
	return drain(time.Duration(cfg.DrainTimeout), p, adminSrv, log)
}

// serveAdmin serves the admin listener of cfg, showing p and the metrics
// of reg, and returns its server; nil when admin.listen is empty.
func serveAdmin(cfg config.Config, p *proxy.Proxy, reg *prometheus.Registry, log zerolog.Logger) (*admin.Server, error) {
	if cfg.Admin.Listen == "" {
		return nil, nil
	}
	srv, err := admin.NewServer(cfg.Admin, p, reg, reg, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return nil, fmt.Errorf("listening for admin: %w", err)
	}
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Error().Err(err).Msg("admin listener stopped")
		}
	}()
	return srv, nil
}

// drain shuts p down, and adminSrv when there is one, waiting up to
// timeout for the requests in flight to be answered.
func drain(timeout time.Duration, p *proxy.Proxy, adminSrv *admin.Server, log zerolog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := p.Shutdown(ctx)
	if adminSrv != nil {
		adminSrv.Shutdown(ctx)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	log.Info().Err(err).Msg("stopped")
	return nil
}

func newLogger(c config.LogConfig) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(c.Level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("log.level: %w", err)
	}
	var log zerolog.Logger
	if c.Format == "console" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly})
	} else {
		log = zerolog.New(os.Stderr)
	}
	return log.Level(level).With().Timestamp().Logger(), nil
}

// redisLog writes the Redis client's messages at debug level.
type redisLog struct{ log zerolog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Msgf(format, v...)
}
