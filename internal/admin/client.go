package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// ErrNotRunning means no process answers on the admin endpoint.
var ErrNotRunning = errors.New("no ebbfs process is running for this filesystem")

// Client talks to a running writer or reader.
type Client struct {
	unix string
	tcp  string
	hc   *http.Client
}

// NewClient returns a client that prefers the unix socket and falls back to
// the TCP address when the socket does not exist. Either may be "".
func NewClient(unixPath, tcpAddr string) *Client {
	c := &Client{unix: unixPath, tcp: tcpAddr}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			if c.unix != "" {
				conn, err := d.DialContext(ctx, "unix", c.unix)
				if err == nil || c.tcp == "" || !missingSocket(err) {
					return conn, err
				}
			}
			if c.tcp == "" {
				return nil, errors.New("admin: no unix socket or TCP address configured")
			}
			return d.DialContext(ctx, "tcp", c.tcp)
		},
		DisableKeepAlives: true,
	}
	c.hc = &http.Client{Transport: tr}
	return c
}

func missingSocket(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

func (c *Client) where() string {
	switch {
	case c.unix != "" && c.tcp != "":
		return c.unix + " or " + c.tcp
	case c.unix != "":
		return c.unix
	}
	return c.tcp
}

// Do sends a request with an optional JSON body and decodes a JSON reply
// into out (unless out is nil). A non-2xx reply becomes an error carrying
// the server's message.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set(RequestHeader, "cli")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("admin %s %s: %w", method, path, ctx.Err())
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("admin %s %s: %w", method, path, err)
		}
		if missingSocket(err) {
			return fmt.Errorf("%w (nothing listens on %s)", ErrNotRunning, c.where())
		}
		return fmt.Errorf("admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin %s %s: reading reply: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e Error
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return &StatusError{Code: resp.StatusCode, Err: errors.New(e.Error)}
		}
		return &StatusError{Code: resp.StatusCode, Err: fmt.Errorf("admin %s %s: %s", method, path, resp.Status)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("admin %s %s: bad reply: %w", method, path, err)
		}
	}
	return nil
}

// Stream sends a GET for a streaming reply and returns its body, which
// the caller reads until it ends and closes; ctx's end ends it.
func (c *Client) Stream(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if missingSocket(err) {
			return nil, fmt.Errorf("%w (nothing listens on %s)", ErrNotRunning, c.where())
		}
		return nil, fmt.Errorf("admin GET %s: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e Error
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return nil, &StatusError{Code: resp.StatusCode, Err: errors.New(e.Error)}
		}
		return nil, &StatusError{Code: resp.StatusCode, Err: fmt.Errorf("admin GET %s: %s", path, resp.Status)}
	}
	return resp.Body, nil
}

// Flush asks the process to run a durability barrier and waits for it.
func (c *Client) Flush(ctx context.Context) error {
	return c.Do(ctx, http.MethodPost, "/v1/flush", nil, nil)
}

// Status fetches the process status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.Do(ctx, http.MethodGet, "/v1/status", nil, &st)
	return st, err
}

// Wait polls until the endpoint answers or ctx ends.
func (c *Client) Wait(ctx context.Context) error {
	for {
		if _, err := c.Status(ctx); err == nil {
			return nil
		} else if ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
