package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Client reads an admin listener over HTTP.
type Client struct {
	// BaseURL is the listener's, http://host:port.
	BaseURL string
	// Token is the bearer token /hot asks for; empty for none.
	Token string
	// HTTP makes the requests; nil for http.DefaultClient.
	HTTP *http.Client
}

// ErrUnreachable wraps the error of a request that got no answer.
var ErrUnreachable = errors.New("cannot reach the admin listener")

// StatusError is an answer other than 200 OK.
type StatusError struct {
	Path   string // the path asked for, /hot or /metrics
	Status int
	// Reason is the first line of the answer's body, which says why, cut
	// to 200 bytes; it is the listener's text, not escaped.
	Reason string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.Path, e.Status, http.StatusText(e.Status), e.Reason)
}

// maxBody bounds what is read of an answer.
const maxBody = 16 << 20

// Hot returns the first n of /hot's busiest partitions.
func (c *Client) Hot(ctx context.Context, n int) ([]HotPartition, error) {
	h := http.Header{}
	if c.Token != "" {
		h.Set("Authorization", "Bearer "+c.Token)
	}
	body, err := c.get(ctx, "/hot?n="+strconv.Itoa(n), h)
	if err != nil {
		return nil, err
	}
	var hot []HotPartition
	if err := json.Unmarshal(body, &hot); err != nil {
		return nil, fmt.Errorf("/hot: %w", err)
	}
	return hot, nil
}

// Metrics returns what /metrics answers, in the Prometheus text format
// (version 0.0.4).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	return c.get(ctx, "/metrics", http.Header{"Accept": {"text/plain;version=0.0.4"}})
}

// get requests path, with header, and returns the body of a 200 OK.
func (c *Client) get(ctx context.Context, path string, header http.Header) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		// The caller knows the address; the cause is what is news.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(path, resp.StatusCode, body)
	}
	return body, nil
}

// statusError describes an answer other than 200 OK by its status and the
// first line of its body.
func statusError(path string, status int, body []byte) *StatusError {
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(line) > 200 {
		line = line[:200]
	}
	path, _, _ = strings.Cut(path, "?")
	return &StatusError{Path: path, Status: status, Reason: line}
}
