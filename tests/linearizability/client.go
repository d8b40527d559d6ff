package main

// The clients: each its own connection, sending a random mix of GET, SET,
// DEL, INCR, CAS, MULTI/EXEC and RANGE over the key set, one request at a
// time, and recording each request's call, return and reply. A connection
// that breaks (the server was killed) leaves its request unknown; the
// client reconnects to the next process and goes on.

import (
	"errors"
	"math/rand"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

type client struct {
	id   int
	r    *rand.Rand
	keys []string
	srv  *server
	// The value this client last saw under each key: CAS expects it, so
	// that some swaps succeed while others race.
	seen map[string]string
	// A follower's reader: its session (1...), and only reads.
	session int
	// Until this time (clock), no pauses: the moments before a kill, so
	// that most clients have a request in flight when it comes.
	rush  *atomic.Int64
	ops   []Op
	errs  []string
	clock func() int64
}

// value is what SET and CAS write: mostly integers (INCR then counts on
// them), now and then not one (INCR's error is part of the model too).
func (c *client) value() string {
	if c.r.Intn(20) == 0 {
		return "x" + strconv.Itoa(c.r.Intn(1000))
	}
	return strconv.Itoa(c.r.Intn(1_000_000))
}

func (c *client) key() string { return c.keys[c.r.Intn(len(c.keys))] }

// bound is a RANGE bound: a key, something between two keys, before all
// of them, or (as end) after all or empty (no bound).
func (c *client) bound() string {
	switch c.r.Intn(5) {
	case 0:
		return ""
	case 1:
		return c.key() + "~"
	case 2:
		return []string{"a", "z"}[c.r.Intn(2)]
	default:
		return c.key()
	}
}

// command draws one command; inMulti leaves RANGE out (kivi does not queue
// it).
func (c *client) command(inMulti bool) []string {
	n := 100
	if inMulti {
		n = 85
	}
	switch p := c.r.Intn(n); {
	case p < 25:
		return []string{"GET", c.key()}
	case p < 40:
		return []string{"SET", c.key(), c.value()}
	case p < 48:
		if c.r.Intn(3) == 0 {
			return []string{"DEL", c.key(), c.key()}
		}
		return []string{"DEL", c.key()}
	case p < 65:
		return []string{"INCR", c.key()}
	case p < 85:
		k := c.key()
		expected, ok := c.seen[k]
		if !ok || c.r.Intn(4) == 0 {
			expected = c.value()
		}
		return []string{"CAS", k, expected, c.value()}
	default:
		cmd := []string{"RANGE", c.bound(), c.bound()}
		if c.r.Intn(3) == 0 {
			cmd = append(cmd, "LIMIT", strconv.Itoa(c.r.Intn(4)))
		}
		return cmd
	}
}

func (c *client) request() Input {
	if c.session > 0 {
		return c.read()
	}
	if c.r.Intn(7) == 0 {
		in := Input{Multi: true}
		for i := 2 + c.r.Intn(3); i > 0; i-- {
			in.Cmds = append(in.Cmds, c.command(true))
		}
		return in
	}
	return Input{Cmds: [][]string{c.command(false)}}
}

// read is a follower reader's request: GET, RANGE, or MULTI of GETs.
func (c *client) read() Input {
	in := Input{Session: c.session}
	switch p := c.r.Intn(10); {
	case p < 4:
		in.Cmds = [][]string{{"GET", c.key()}}
	case p < 8:
		in.Cmds = [][]string{{"RANGE", c.bound(), c.bound()}}
	default:
		in.Multi = true
		for i := 2 + c.r.Intn(2); i > 0; i-- {
			in.Cmds = append(in.Cmds, []string{"GET", c.key()})
		}
	}
	return in
}

// errUnexpected is an answer the protocol allows but the workload should
// never get (an error other than INCR's, a MULTI not queued): the request
// is then taken as unknown, and the answer reported.
var errUnexpected = errors.New("unexpected reply")

// do sends a request and reads its reply: for MULTI, EXEC's.
func (c *client) do(cn *conn, in Input) (string, error) {
	if in.Multi {
		cn.send("MULTI")
	}
	for _, cmd := range in.Cmds {
		cn.send(cmd...)
	}
	if in.Multi {
		cn.send("EXEC")
	}
	if err := cn.flush(); err != nil {
		return "", err
	}
	if !in.Multi {
		r, err := cn.readReply()
		if err == nil && strings.HasPrefix(r, "-") && r != notAnInteger {
			c.errs = append(c.errs, describe(in)+" -> "+r)
			return "", errUnexpected
		}
		return r, err
	}
	for i := 0; i <= len(in.Cmds); i++ {
		want := "+QUEUED"
		if i == 0 {
			want = "+OK"
		}
		r, err := cn.readReply()
		if err != nil {
			return "", err
		}
		if r != want {
			c.errs = append(c.errs, describe(in)+": "+r+" instead of "+want)
			return "", errUnexpected
		}
	}
	r, err := cn.readReply()
	if err != nil {
		return "", err
	}
	items, ok := splitArray(r)
	for _, it := range items {
		ok = ok && (!strings.HasPrefix(it, "-") || it == notAnInteger)
	}
	if !ok {
		c.errs = append(c.errs, describe(in)+" -> "+r)
		return "", errUnexpected
	}
	return r, nil
}

// note remembers what a reply showed of the keys, for later CASes.
func (c *client) note(cmd []string, reply string) {
	switch cmd[0] {
	case "SET":
		c.seen[cmd[1]] = cmd[2]
	case "GET":
		if v, err := strconv.Unquote(reply); err == nil {
			c.seen[cmd[1]] = v
		}
	case "INCR":
		if strings.HasPrefix(reply, ":") {
			c.seen[cmd[1]] = reply[1:]
		}
	case "CAS":
		if reply == ":1" {
			c.seen[cmd[1]] = cmd[3]
		}
	}
}

// connect reaches the current server process and learns its epoch; it
// waits while there is none, and gives up at stop.
func (c *client) connect(stop <-chan struct{}) (*conn, int) {
	for {
		addr, ready := c.srv.current()
		if addr == "" {
			select {
			case <-ready:
				continue
			case <-stop:
				return nil, 0
			}
		}
		cn, err := dial(addr, time.Second)
		if err == nil {
			cn.send("INFO", "server")
			var info string
			if err = cn.flush(); err == nil {
				info, err = cn.readReply()
			}
			if err == nil {
				if epoch, ok := c.srv.epochOf(processID(info)); ok {
					return cn, epoch
				}
			}
			cn.close()
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-stop:
			return nil, 0
		}
	}
}

func processID(info string) int {
	text, _ := strconv.Unquote(info)
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ := strconv.Atoi(v)
			return pid
		}
	}
	return -1
}

// run sends requests until stop closes.
func (c *client) run(stop <-chan struct{}, think time.Duration) {
	var cn *conn
	epoch, lastEpoch := 0, -1
	defer func() {
		if cn != nil {
			cn.close()
		}
	}()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if cn == nil {
			if cn, epoch = c.connect(stop); cn == nil {
				return
			}
		}
		if epoch != lastEpoch && lastEpoch >= 0 {
			// Back after a restart: not all at once, or the first
			// requests of all 16 clients would overlap, which costs the
			// checker more than it finds.
			time.Sleep(time.Duration(c.r.Int63n(int64(100 * time.Millisecond))))
		}
		lastEpoch = epoch
		in := c.request()
		op := Op{Client: c.id, Input: in, Epoch: epoch, Call: c.clock()}
		reply, err := c.do(cn, in)
		op.Return = c.clock()
		if err != nil {
			op.Output.Unknown = true
			cn.close()
			cn = nil
		} else {
			op.Output.Reply = reply
			if !in.Multi {
				c.note(in.Cmds[0], reply)
			}
		}
		c.ops = append(c.ops, op)
		if think > 0 && (c.rush == nil || c.clock() > c.rush.Load()) {
			time.Sleep(time.Duration(c.r.Int63n(int64(think))))
		}
	}
}
