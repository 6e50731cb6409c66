package admin

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cqlguard/cqlguard/config"
)

// The client reads what the handler serves: /hot's partitions with the
// token, a 401 without it, /metrics as text, and a listener that is not
// there as unreachable.
func TestClientReadsHandler(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default().Admin
	cfg.TokenFile = tokenFile
	hot := []HotPartition{
		{Keyspace: "shop", Table: "carts", Op: "read", Token: -3, Key: `"alice"`, Rate: 1500.5, RateError: 2, Limit: 100, Served: "cache"},
		{Keyspace: "shop", Table: "orders", Op: "write", Token: 7, Key: "0x00", KeyTruncated: true, Rate: 5, Class: "batch"},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "cqlguard_client_connections", Help: "Client connections open now."}))
	h, err := NewHandler(cfg, stubSource{hot: hot}, reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ctx := t.Context()

	c := &Client{BaseURL: srv.URL, Token: "s3cret", HTTP: srv.Client()}
	got, err := c.Hot(ctx, 5)
	if err != nil || !reflect.DeepEqual(got, hot) {
		t.Errorf("Hot(5) = %+v, %v; want %+v", got, err, hot)
	}
	if got, err := c.Hot(ctx, 1); err != nil || len(got) != 1 {
		t.Errorf("Hot(1) = %+v, %v; want one", got, err)
	}
	text, err := c.Metrics(ctx)
	if err != nil || !strings.Contains(string(text), "\ncqlguard_client_connections 0\n") {
		t.Errorf("Metrics() = %q, %v", text, err)
	}

	c.Token = ""
	var se *StatusError
	if _, err := c.Hot(ctx, 5); !errors.As(err, &se) || se.Status != http.StatusUnauthorized || se.Path != "/hot" {
		t.Errorf("Hot without the token: %v, want a 401 of /hot", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := &Client{BaseURL: "http://" + ln.Addr().String()}
	ln.Close()
	if _, err := gone.Metrics(ctx); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Metrics of no listener: %v, want ErrUnreachable", err)
	}
}
