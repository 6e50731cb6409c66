package admin

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
)

// maxHeaderBytes bounds a request's headers on the admin listener: its
// requests are GETs with a token at most, and net/http's default of 1 MB
// per connection would be what a client could make each one hold.
const maxHeaderBytes = 64 << 10

// Server serves the admin listener: NewHandler's paths, each request
// within admin.read_timeout and admin.write_timeout, keep-alive
// connections closed after admin.idle_timeout, and at most
// admin.max_connections connections held open (see cappedListener).
type Server struct {
	srv *http.Server
	max int
	m   *metrics
}

// NewServer returns the admin listener's server, configured by cfg: it
// shows src and the metrics of g as NewHandler does, registers its own
// metrics with reg, and logs what net/http says of its connections to log.
func NewServer(cfg config.AdminConfig, src Source, g prometheus.Gatherer, reg prometheus.Registerer, log zerolog.Logger) (*Server, error) {
	h, err := NewHandler(cfg, src, g, log)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Server{
		max: cfg.MaxConnections,
		m:   m,
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: time.Duration(cfg.ReadTimeout),
			ReadTimeout:       time.Duration(cfg.ReadTimeout),
			WriteTimeout:      time.Duration(cfg.WriteTimeout),
			IdleTimeout:       time.Duration(cfg.IdleTimeout),
			MaxHeaderBytes:    maxHeaderBytes,
			ConnState:         trackCapped,
			ErrorLog:          newHTTPLog(log.With().Str("component", "admin").Logger()),
		},
	}, nil
}

// Serve serves ln until ln fails or Shutdown is called, when it returns
// nil.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.srv.Serve(newCappedListener(ln, s.max, s.m)); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin listener: %w", err)
	}
	return nil
}

// Shutdown stops accepting, closes idle connections and waits for the
// requests being answered until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// metrics are the admin listener's own: its connections open, and what
// happened to connections accepted at admin.max_connections.
type metrics struct {
	open               prometheus.Gauge
	closedIdle, waited prometheus.Counter
}

// newMetrics creates the admin listener's metrics and registers them with
// reg.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	open := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cqlguard_admin_connections", Help: "Connections the admin listener holds open (bounded by admin.max_connections)."})
	atCap := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cqlguard_admin_connections_at_cap_total",
		Help: "Connections accepted on the admin listener at admin.max_connections, by what made room: closed_idle (the connection idle longest was closed), or waited (none was idle, so it waited for one to close or go idle)."},
		[]string{"action"})
	for _, c := range []prometheus.Collector{open, atCap} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin listener metrics: %w", err)
		}
	}
	return &metrics{open: open, closedIdle: atCap.WithLabelValues("closed_idle"), waited: atCap.WithLabelValues("waited")}, nil
}

// httpLog writes what net/http says of the admin listener (an accept that
// failed and is retried, a request it could not read) to the proxy's log,
// at warn, instead of the standard logger's plain lines.
type httpLog struct{ log zerolog.Logger }

func newHTTPLog(l zerolog.Logger) *log.Logger { return log.New(httpLog{l}, "", 0) }

func (w httpLog) Write(b []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimSpace(string(b)))
	return len(b), nil
}
