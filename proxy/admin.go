package proxy

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminHandler serves /metrics from g, /healthz (the process is up),
// /readyz (an upstream node answers, and the proxy is not draining) and
// /hot (the busiest partitions now, as JSON). Every path answers GET and
// HEAD only. /hot shows user data (partition keys, with admin.show_keys)
// and asks for the bearer token of admin.token_file or admin.token_env
// when one is set; the others stay open for probes and scrapers. With
// admin.profiling, /debug/pprof/ serves Go's profiles, behind the token too.
func (p *Proxy) AdminHandler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/hot", p.withToken(http.HandlerFunc(p.serveHot)))
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
