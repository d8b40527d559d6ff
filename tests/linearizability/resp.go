package main

// A minimal RESP2 client: enough to send commands as arrays of bulk strings
// and read any reply back as a canonical string, which is what the history
// records and the model compares. Hand-written so that the module's only
// dependency is the checker.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

type conn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dial(addr string, timeout time.Duration) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
}

func (c *conn) close() { c.c.Close() }

// send writes commands without flushing, so that MULTI ... EXEC goes out
// as one pipeline.
func (c *conn) send(args ...string) {
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n%s\r\n", len(a), a)
	}
}

func (c *conn) flush() error { return c.w.Flush() }

// readReply reads one reply as its canonical text (see canonical).
func (c *conn) readReply() (string, error) {
	line, err := c.line()
	if err != nil {
		return "", err
	}
	if line == "" {
		return "", fmt.Errorf("empty reply line")
	}
	switch line[0] {
	case '+':
		return "+" + line[1:], nil
	case '-':
		return "-" + line[1:], nil
	case ':':
		return ":" + line[1:], nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "nil", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return "", err
		}
		return bulk(string(buf[:n])), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad array length %q", line)
		}
		if n < 0 {
			return "nil", nil
		}
		items := make([]string, n)
		for i := range items {
			if items[i], err = c.readReply(); err != nil {
				return "", err
			}
		}
		return array(items), nil
	}
	return "", fmt.Errorf("unexpected reply line %q", line)
}

func (c *conn) line() (string, error) {
	s, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r"), nil
}

// Canonical reply text: "+OK", "-ERR msg", ":5", "nil", a bulk string
// quoted, an array as [a, b]. The model produces the same text, so a
// reply and the model's agree exactly when their texts are equal.
func bulk(s string) string { return strconv.Quote(s) }

func array(items []string) string { return "[" + strings.Join(items, ", ") + "]" }

func integer(n int64) string { return ":" + strconv.FormatInt(n, 10) }
