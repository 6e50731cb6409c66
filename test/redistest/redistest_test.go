package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// setGet writes n keys and reads them back.
func setGet(t *testing.T, c redis.Cmdable, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range n {
		k, v := fmt.Sprintf("key-%d", i), fmt.Sprintf("value-%d", i)
		if err := c.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		got, err := c.Get(ctx, k).Result()
		if err != nil || got != v {
			t.Fatalf("GET %s = %q, %v; want %q", k, got, err, v)
		}
	}
}

// noClient checks that a client without what the server asks for is
// refused, with an error that contains want.
func noClient(t *testing.T, opt *redis.Options, want string) {
	t.Helper()
	opt.MaxRetries = -1
	opt.DialTimeout, opt.ReadTimeout = 2*time.Second, 2*time.Second
	c := redis.NewClient(opt)
	defer c.Close()
	err := c.Ping(context.Background()).Err()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("PING by %s without credentials or TLS: %v, want an error with %q", opt.Addr, err, want)
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	addr := Start(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	setGet(t, c, 10)

	// A second start on the port finds the server running and leaves it.
	port := portOf(t, addr)
	pid := run(t, "pid", port)
	if got := run(t, "start", port); got != addr {
		t.Errorf("second start printed %q, want %q", got, addr)
	}
	if got := run(t, "pid", port); got != pid {
		t.Errorf("second start: pid %s, want %s unchanged", got, pid)
	}

	Restart(t, addr)
	if got := run(t, "pid", port); got == pid {
		t.Errorf("Restart left pid %s", pid)
	}
	if err := c.Get(context.Background(), "key-0").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET key-0 after Restart: %v, want redis.Nil (nothing is kept)", err)
	}
	setGet(t, c, 10)

	Stop(t, addr)
	if out, err := runScript("pid", port); err == nil {
		t.Errorf("pid after Stop printed %s, want an error", out)
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Errorf("%s accepts connections after Stop", addr)
	}
}

func TestStartACL(t *testing.T) {
	t.Parallel()
	addr, cred := StartACL(t)
	if cred.User != User || cred.Password == "" {
		t.Fatalf("credentials %+v: want user %s and a password", cred, User)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Username: cred.User, Password: cred.Password})
	t.Cleanup(func() { c.Close() })
	setGet(t, c, 10)
	noClient(t, &redis.Options{Addr: addr}, "NOAUTH")
	noClient(t, &redis.Options{Addr: addr, Password: cred.Password}, "WRONGPASS")

	// The password is on no command line ps shows.
	pid := run(t, "pid", portOf(t, addr))
	cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(cmdline, []byte(cred.Password)) {
		t.Errorf("the password is on redis-server's command line: %q", cmdline)
	}

	Restart(t, addr)
	setGet(t, c, 10)
}

func TestStartTLS(t *testing.T) {
	t.Parallel()
	addr, ca := StartTLS(t)
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: TLSConfig(t, ca)})
	t.Cleanup(func() { c.Close() })
	setGet(t, c, 10)
	noClient(t, &redis.Options{Addr: addr}, "")

	// The certificates stay with a restart.
	Restart(t, addr)
	setGet(t, c, 10)
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	addrs := StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	setGet(t, c, 30)
	ctx := context.Background()
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err == nil && n == 0 {
			err = errors.New("holds none of the 30 keys")
		}
		if err != nil {
			return fmt.Errorf("master %s: %w", m.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	pids := func() []string {
		var ps []string
		for _, a := range addrs {
			ps = append(ps, run(t, "pid", portOf(t, a)))
		}
		return ps
	}
	// A second start of the running cluster leaves it.
	before := pids()
	first := portOf(t, addrs[0])
	if got := strings.Fields(run(t, "start-cluster", first)); !slices.Equal(got, addrs) {
		t.Errorf("second start-cluster printed %q, want %q", got, addrs)
	}
	if after := pids(); !slices.Equal(after, before) {
		t.Errorf("second start-cluster: pids %v, want %v unchanged", after, before)
	}

	// A restarted node rejoins the cluster with its slots, and a node that
	// is down comes back with start-cluster.
	Restart(t, addrs[1])
	setGet(t, c, 30)
	Stop(t, addrs[2])
	run(t, "start-cluster", first)
	setGet(t, c, 30)
}
