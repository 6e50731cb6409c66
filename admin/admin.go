// Package admin serves the admin listener: /metrics, /healthz, /readyz,
// /hot (the busiest partitions), /shed/trace (a node's last shedding
// updates) and, when asked, Go's profiles; every path read-only, the ones
// that show user data behind a bearer token, on a listener that holds a
// bounded number of connections. Its Client reads such a listener, as
// cqlguard top does.
//
// It computes nothing it shows: readiness, the busiest partitions and the
// shedding traces come from a Source (the proxy), the metrics from a
// Prometheus gatherer, and the settings, the token included, are package
// config's to read and check.
package admin

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
)

// Source is what the admin listener shows of a proxy.
type Source interface {
	// Ready returns why the proxy is not ready for drivers, nil when it is.
	Ready() error
	// Hot returns the busiest partitions now, busiest first.
	Hot() []HotPartition
	// ShedTrace returns the last shedding updates of the node at addr, or
	// of the only node when addr is empty: ErrShedOff when shedding is off,
	// an *UnknownNodeError when there is no such node.
	ShedTrace(addr string) (ShedTrace, error)
}

// NewHandler returns the admin listener's handler, configured by cfg: it
// serves /metrics from g, /healthz (the process is up), /readyz (src is
// ready), /hot (src's busiest partitions, as JSON) and /shed/trace (a
// node's last shedding updates, as text). Every path answers GET and HEAD
// only. /hot shows user data (partition keys, with admin.show_keys) and,
// like /shed/trace, asks for the bearer token of admin.token_file or
// admin.token_env when one is set; the others stay open for probes and
// scrapers. With admin.profiling, /debug/pprof/ serves Go's profiles,
// behind the token too. The token is read here: an error names the
// setting it could not be read from. What goes wrong while answering is
// logged to log, at debug.
func NewHandler(cfg config.AdminConfig, src Source, g prometheus.Gatherer, log zerolog.Logger) (http.Handler, error) {
	token, err := cfg.Token()
	if err != nil {
		return nil, err
	}
	h := &handler{cfg: cfg, src: src, log: log}
	guard := func(f http.HandlerFunc) http.Handler { return withToken(token, f) }
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", h.serveReady)
	mux.Handle("/hot", guard(h.serveHot))
	mux.Handle("/shed/trace", guard(h.serveShedTrace))
	if cfg.Profiling {
		mux.Handle("/debug/pprof/", guard(pprof.Index))
		mux.Handle("/debug/pprof/cmdline", guard(pprof.Cmdline))
		mux.Handle("/debug/pprof/profile", guard(pprof.Profile))
		mux.Handle("/debug/pprof/symbol", guard(pprof.Symbol))
		mux.Handle("/debug/pprof/trace", guard(pprof.Trace))
	}
	return readOnly(mux), nil
}

// handler answers the paths that show what src reports.
type handler struct {
	cfg config.AdminConfig
	src Source
	log zerolog.Logger
}

// serveReady answers /readyz: 200 when src is ready, else 503 with why
// not.
func (h *handler) serveReady(w http.ResponseWriter, _ *http.Request) {
	if err := h.src.Ready(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
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

// withToken asks for the bearer token, when one is set, before h.
func withToken(token []byte, h http.Handler) http.Handler {
	if token == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), token) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cqlguard"`)
			http.Error(w, "a bearer token is needed (admin.token_file or admin.token_env)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
