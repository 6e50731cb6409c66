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

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/proxy"
)

func main() { os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr)) }

// usageError is a command line that cannot be run: exit status 2. Said
// is set when the flag package has already said what is wrong.
type usageError struct {
	msg  string
	said bool
}

func (e usageError) Error() string { return e.msg }

const usage = `Usage:
  cqlguard [serve] [flags]          run the proxy (the default)
  cqlguard check-config [flags] FILE check a configuration file, with the
                                    flags and environment applied over it
  cqlguard top [flags]              watch a running proxy from its admin
                                    listener: hot partitions against their
                                    limits, refusals per table; q quits
  cqlguard version                  print the version and build revision
Run "cqlguard serve -h" or "cqlguard top -h" for the flags. The
environment sets what the flags do, below them and over the file:
CQLGUARD_CONFIG, CQLGUARD_LISTEN, CQLGUARD_ADVERTISE, CQLGUARD_UPSTREAMS
(comma-separated), CQLGUARD_MODE, CQLGUARD_ADMIN_LISTEN, CQLGUARD_LOG_LEVEL,
CQLGUARD_LOG_FORMAT.
`

// cli runs the command in args and returns the exit status: 0, 1 when
// the command failed, 2 for a command line that cannot be run.
func cli(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = run(args)
	case "check-config":
		err = checkConfig(args, stdout, stderr)
	case "top":
		err = top(args, stdout)
	case "version":
		if len(args) > 0 {
			err = usageError{msg: fmt.Sprintf("version takes no arguments, got %q", args)}
			break
		}
		fmt.Fprintln(stdout, version())
	case "help":
		fmt.Fprint(stdout, usage)
	default:
		err = usageError{msg: fmt.Sprintf("unknown command %q", cmd)}
	}
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if !ue.said {
			fmt.Fprintf(stderr, "cqlguard: %s\n%s", ue.msg, usage)
		}
		return 2
	}
	// A file's problems are reported all at once, one per line.
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(stderr, "cqlguard:", line)
	}
	return 1
}

// version is the module's version and the revision it was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "cqlguard (no build information)"
	}
	v := "cqlguard " + bi.Main.Version
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
	if err := errors.Join(decodeErr, config.Check(&cfg, data)); err != nil {
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

// parseFlags parses args into fs; a flag it does not know is a usage
// error, which fs has already printed with its flags.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{msg: err.Error(), said: true}
	}
	return nil
}

// checkConfig checks a configuration file with the flags and environment
// applied over it, and says so on stdout; what in it is likely a mistake
// goes to stderr as warnings, which do not fail the check.
func checkConfig(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cqlguard check-config", flag.ContinueOnError)
	flags := addConfigFlags(fs)
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

func run(args []string) error {
	fs := flag.NewFlagSet("cqlguard serve", flag.ContinueOnError)
	flags := addConfigFlags(fs)
	watch := fs.Bool("watch-config", true, "reload the -config file when its contents change")
	watchEvery := fs.Duration("watch-interval", config.DefaultWatchInterval, "how often -watch-config looks at the file")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *showVersion {
		fmt.Println(version())
		return nil
	}
	if *watchEvery <= 0 {
		return fmt.Errorf("-watch-interval %v: must be positive", *watchEvery)
	}
	path := flags.configPath()
	configPath := &path
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
	var adminSrv *proxy.AdminServer
	if cfg.Admin.Listen != "" {
		aln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			return fmt.Errorf("listening for admin: %w", err)
		}
		adminSrv = p.NewAdminServer(reg)
		go func() {
			if err := adminSrv.Serve(aln); err != nil {
				log.Error().Err(err).Msg("admin listener stopped")
			}
		}()
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
	if *configPath != "" {
		watcher = config.NewWatcher(cfg, log, func(c config.Config, err error) {
			if err != nil {
				p.ReloadFailed(*configPath, err)
				return
			}
			p.Reload(c)
		})
		if *watch {
			go watcher.Run(watchCtx, *watchEvery)
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.DrainTimeout))
	defer cancel()
	err = p.Shutdown(ctx)
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
