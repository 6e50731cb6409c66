package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"gopkg.in/yaml.v3"

	"github.com/cqlguard/cqlguard/config"
	"github.com/cqlguard/cqlguard/ratelimit"
	"github.com/cqlguard/cqlguard/test/redistest"
)

// TestPrometheus runs cqlguard in front of the fake node, coordinated
// through a real Redis, with a load some of which it refuses, and a
// private Prometheus (test/prometheus/prometheus.sh) scraping its /metrics
// every second with deploy/prometheus/*.yml loaded as rule_files, as an
// operator's prometheus.yml would name them. Every query of
// deploy/grafana/cqlguard.json, its variables filled in, must parse and
// return data; every metric alerts.yml names must be scraped; every rule
// must evaluate without error. It needs no Cassandra.
func TestPrometheus(t *testing.T) {
	skipUnlessEnabled(t)
	redisAddr := redistest.Start(t)
	bin := buildCqlguard(t)
	node := startFakeNode(t)
	const limit = 50
	p := startScaleOutProxy(t, bin, node.Addr(), ratelimit.AlgorithmTokenBucket, config.FallbackLocal, limit, redisAddr,
		fmt.Sprintf("prometheus:%d:", time.Now().UnixNano()))
	prom := startPrometheus(t, p.admin)

	// Reads of one partition at several times its limit, so that some are
	// refused, and of a few others.
	s := sessionThrough(t, p.addr, func(*gocql.ClusterConfig) {})
	defer s.Close()
	refused := 0
	for i := range 20 * limit {
		k := int64(1)
		if i%10 == 0 {
			k = int64(i)
		}
		if err := s.Query("SELECT v FROM bench.kv WHERE k = ?", k).Exec(); err != nil {
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("none of %d reads of one partition limited to %d a second was refused", 20*limit, limit)
	}
	sendResponseBit(t, p.addr)
	if resp, err := http.Get("http://" + p.admin + "/hot"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /hot: %s", resp.Status)
		}
	}

	vars := strings.NewReplacer(
		"$__rate_interval", "10s",
		"$__range", "1m",
		"$job", "cqlguard",
		// As Grafana writes a value into a regular expression: quoted for
		// the expression, then for the PromQL string.
		"$instance", strings.ReplaceAll(regexp.QuoteMeta(p.admin), `\`, `\\`),
	)
	queries := dashboardQueries(t, vars)
	// Data comes a scrape or two after the load; a query that cannot parse
	// never will, but is reported with the rest.
	var failed []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		failed = failed[:0]
		for _, q := range queries {
			n, err := prom.query(q.expr)
			switch {
			case err != nil:
				failed = append(failed, fmt.Sprintf("%s: %s: %v", q.panel, q.expr, err))
			case n == 0:
				failed = append(failed, fmt.Sprintf("%s: %s: no data", q.panel, q.expr))
			}
		}
		if len(failed) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, f := range failed {
		t.Error(f)
	}

	scraped := prom.metricNames(t)
	for _, name := range alertMetrics(t) {
		if !scraped[name] {
			t.Errorf("deploy/prometheus/alerts.yml uses %s, which cqlguard does not export", name)
		}
	}
	prom.rulesHealthy(t)
}

// sendResponseBit sends cqlguard at addr a frame with the response bit
// set, a protocol error, and waits for its answer.
func sendResponseBit(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// v4 response, no flags, stream 1, OPTIONS, empty body.
	if _, err := c.Write([]byte{0x84, 0, 0, 1, 0x05, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 9)); err != nil {
		t.Fatalf("no answer to a frame with the response bit set: %v", err)
	}
}

// dashboardQuery is one target of a dashboard panel, or a variable's
// query, with the variables filled in.
type dashboardQuery struct {
	panel, expr string
}

// dashboardQueries reads deploy/grafana/cqlguard.json's panel targets and
// query variables, filled in by vars. A label_values(metric, label)
// variable becomes a query of the label's values.
func dashboardQueries(t *testing.T, vars *strings.Replacer) []dashboardQuery {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "grafana", "cqlguard.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  json.RawMessage // a collapsed row's panels
	}
	var dash struct {
		Panels     []panel
		Templating struct {
			List []struct {
				Name, Type, Definition string
			}
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/cqlguard.json: %v", err)
	}
	var out []dashboardQuery
	add := func(where, expr string) {
		expr = vars.Replace(expr)
		if strings.Contains(expr, "$") {
			t.Errorf("%s: %s: a variable the test does not fill in", where, expr)
			return
		}
		out = append(out, dashboardQuery{where, expr})
	}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				add("panel "+strconv.Quote(p.Title), tg.Expr)
			}
			if len(p.Panels) > 0 {
				var inner []panel
				if err := json.Unmarshal(p.Panels, &inner); err != nil {
					t.Fatalf("panels of row %q: %v", p.Title, err)
				}
				walk(inner)
			}
		}
	}
	walk(dash.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		add("variable "+v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], m[1]))
	}
	if len(out) < 40 {
		t.Fatalf("read %d queries from the dashboard, want over 40", len(out))
	}
	return out
}

// metricName finds the names of cqlguard's metrics in an expression.
var metricName = regexp.MustCompile(`\bcqlguard_[a-z0-9_]+`)

// alertMetrics are the metrics deploy/prometheus/alerts.yml's rules use.
func alertMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("deploy/prometheus/alerts.yml: %v", err)
	}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			found := metricName.FindAllString(r.Expr, -1)
			if len(found) == 0 {
				t.Errorf("alert %s: no cqlguard metric in %q", r.Alert, r.Expr)
			}
			names = append(names, found...)
		}
	}
	return names
}

// promServer is a private Prometheus a test started.
type promServer struct {
	url string
}

// startPrometheus runs Prometheus on a free port of 127.0.0.1 through
// test/prometheus/prometheus.sh, scraping admin's /metrics every second
// as job cqlguard and evaluating the rules of deploy/prometheus/*.yml as often,
// and waits until it has scraped it. It is stopped when the test ends.
func startPrometheus(t *testing.T, admin string) promServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	text := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: cqlguard
    static_configs: [{targets: [%q]}]
`, filepath.Join(repoRoot(), "deploy", "prometheus", "*.yml"), admin)
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(repoRoot(), "test", "prometheus", "prometheus.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // an apt-get install included
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "start", port, dir, config)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Cleanup(func() {
		if out, err := exec.Command("bash", script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("prometheus.sh stop: %v\n%s", err, out)
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus logged:\n%s", b)
		}
	})
	if err != nil {
		t.Fatalf("prometheus.sh start: %v\n%s", err, stderr.String())
	}
	p := promServer{url: strings.TrimSpace(string(out))}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if n, err := p.query(`up{job="cqlguard"} == 1`); err == nil && n > 0 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus at %s has not scraped %s after 30 s", p.url, admin)
		}
	}
}

// apiResponse is the envelope of Prometheus's HTTP API.
type apiResponse struct {
	Status    string
	ErrorType string
	Error     string
	Data      json.RawMessage
}

// get calls the API at path with query and decodes its data into v.
func (p promServer) get(path string, query url.Values, v any) error {
	resp, err := http.Get(p.url + path + "?" + query.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r apiResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s %s: %s", r.Status, r.ErrorType, r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

// query evaluates expr now and returns how many series or values it gave.
func (p promServer) query(expr string) (int, error) {
	var data struct {
		ResultType string
		Result     json.RawMessage
	}
	if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	if data.ResultType == "scalar" || data.ResultType == "string" {
		return 1, nil
	}
	var result []json.RawMessage
	if err := json.Unmarshal(data.Result, &result); err != nil {
		return 0, err
	}
	return len(result), nil
}

// metricNames are the names of the metrics Prometheus holds.
func (p promServer) metricNames(t *testing.T) map[string]bool {
	t.Helper()
	var names []string
	if err := p.get("/api/v1/label/__name__/values", nil, &names); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// rulesHealthy waits until every rule has been evaluated, and fails the
// test for any whose evaluation failed.
func (p promServer) rulesHealthy(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var data struct {
			Groups []struct {
				Rules []struct{ Name, Health, LastError string }
			}
		}
		if err := p.get("/api/v1/rules", nil, &data); err != nil {
			t.Fatal(err)
		}
		var unknown, bad []string
		n := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				n++
				switch r.Health {
				case "ok":
				case "unknown":
					unknown = append(unknown, r.Name)
				default:
					bad = append(bad, fmt.Sprintf("%s: %s %s", r.Name, r.Health, r.LastError))
				}
			}
		}
		for _, b := range bad {
			t.Errorf("rule %s", b)
		}
		if n == 0 {
			t.Fatal("Prometheus loaded no rules from deploy/prometheus/*.yml")
		}
		if len(unknown) == 0 || len(bad) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rules not evaluated after 10 s: %v", unknown)
		}
	}
}
