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
	"net"
	"net/http"
	"os"
	"os/signal"
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

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cqlguard:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("cqlguard", flag.ContinueOnError)
	configPath := fs.String("config", "", "YAML configuration file (see config.example.yaml)")
	listen := fs.String("listen", "", "address drivers connect to (overrides listen)")
	advertise := fs.String("advertise", "", "address reported to drivers as the proxy's own (overrides advertise)")
	upstreams := fs.String("upstream", "", "comma-separated upstream nodes host:port (overrides upstreams)")
	mode := fs.String("mode", "", "cluster or node (overrides mode)")
	admin := fs.String("admin", "", "admin listener for /metrics, /healthz, /readyz (overrides admin.listen)")
	logFormat := fs.String("log-format", "", "json or console (overrides log.format)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	watch := fs.Bool("watch-config", true, "reload the -config file when its contents change")
	watchEvery := fs.Duration("watch-interval", config.DefaultWatchInterval, "how often -watch-config looks at the file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *watchEvery <= 0 {
		return fmt.Errorf("-watch-interval %v: must be positive", *watchEvery)
	}

	cfg := config.Default()
	if *configPath != "" {
		var err error
		if cfg, err = config.Load(*configPath); err != nil {
			return err
		}
	}
	override := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	override(&cfg.Listen, *listen)
	override(&cfg.Advertise, *advertise)
	override(&cfg.Mode, *mode)
	override(&cfg.Admin.Listen, *admin)
	override(&cfg.Log.Format, *logFormat)
	override(&cfg.Log.Level, *logLevel)
	if *upstreams != "" {
		cfg.Upstreams = strings.Split(*upstreams, ",")
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	log, err := newLogger(cfg.Log)
	if err != nil {
		return err
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
	var adminSrv *http.Server
	if cfg.Admin.Listen != "" {
		aln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			return fmt.Errorf("listening for admin: %w", err)
		}
		adminSrv = &http.Server{Handler: p.AdminHandler(reg), ReadHeaderTimeout: 10 * time.Second}
		go adminSrv.Serve(aln)
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
			log.Info().Str("signal", s.String()).Dur("timeout", time.Duration(cfg.DrainTimeout)).Msg("draining")
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
