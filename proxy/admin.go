package proxy

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// AdminHandler serves /metrics from g, /healthz (the process is up),
// /readyz (an upstream node answers, and the proxy is not draining),
// /hot (the busiest partitions now, as JSON) and /shed/trace (a node's
// last shedding updates, as text). Every path answers GET and
// HEAD only. /hot shows user data (partition keys, with admin.show_keys)
// and, like /shed/trace, asks for the bearer token of admin.token_file or admin.token_env
// when one is set; the others stay open for probes and scrapers. With
// admin.profiling, /debug/pprof/ serves Go's profiles, behind the token too.
func (p *Proxy) AdminHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/hot", p.withToken(http.HandlerFunc(p.serveHot)))
	mux.Handle("/shed/trace", p.withToken(http.HandlerFunc(p.serveShedTrace)))
	if p.cfg.Admin.Profiling {
		mux.Handle("/debug/pprof/", p.withToken(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/cmdline", p.withToken(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("/debug/pprof/profile", p.withToken(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/symbol", p.withToken(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/trace", p.withToken(http.HandlerFunc(pprof.Trace)))
	}
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := p.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return readOnly(mux)
}

// adminMaxHeaderBytes bounds a request's headers on the admin listener:
// its requests are GETs with a token at most, and net/http's default of 1
// MB per connection would be what a client could make each one hold.
const adminMaxHeaderBytes = 64 << 10

// AdminServer serves the admin listener: AdminHandler's paths, each
// request within admin.read_timeout and admin.write_timeout, keep-alive
// connections closed after admin.idle_timeout, and at most
// admin.max_connections connections held open (see cappedListener).
type AdminServer struct {
	srv *http.Server
	max int
	m   *Metrics
}

// NewAdminServer returns the admin listener's server for p, serving the
// metrics of g.
func (p *Proxy) NewAdminServer(g prometheus.Gatherer) *AdminServer {
	a := p.cfg.Admin
	return &AdminServer{
		max: a.MaxConnections,
		m:   p.metrics,
		srv: &http.Server{
			Handler:           p.AdminHandler(g),
			ReadHeaderTimeout: time.Duration(a.ReadTimeout),
			ReadTimeout:       time.Duration(a.ReadTimeout),
			WriteTimeout:      time.Duration(a.WriteTimeout),
			IdleTimeout:       time.Duration(a.IdleTimeout),
			MaxHeaderBytes:    adminMaxHeaderBytes,
			ConnState:         trackCapped,
			ErrorLog:          log.New(httpLog{p.log.With().Str("component", "admin").Logger()}, "", 0),
		},
	}
}

// Serve serves ln until ln fails or Shutdown is called, when it returns
// nil.
func (s *AdminServer) Serve(ln net.Listener) error {
	if err := s.srv.Serve(newCappedListener(ln, s.max, s.m)); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin listener: %w", err)
	}
	return nil
}

// Shutdown stops accepting, closes idle connections and waits for the
// requests being answered until ctx ends.
func (s *AdminServer) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// httpLog writes what net/http says of the admin listener (an accept that
// failed and is retried, a request it could not read) to the proxy's log,
// at warn, instead of the standard logger's plain lines.
type httpLog struct{ log zerolog.Logger }

func (w httpLog) Write(b []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimSpace(string(b)))
	return len(b), nil
}

// readOnly answers every method but GET and HEAD with 405: nothing on the
// admin listener changes anything.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// withToken asks for the admin bearer token, when one is set, before h.
func (p *Proxy) withToken(h http.Handler) http.Handler {
	if p.adminToken == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), p.adminToken) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cqlguard"`)
			http.Error(w, "a bearer token is needed (admin.token_file or admin.token_env)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
