package main

// One history: the server (on a fresh directory, or on an object store
// with followers reading it), the clients, the kills.

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// record runs the server and the clients for one history.
func record(cfg *config, seed int64) (*History, error) {
	r := rand.New(rand.NewSource(seed))
	dir, err := os.MkdirTemp("", "kivi-linearizability-")
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	clock := func() int64 { return int64(time.Since(begin)) }
	h := &History{Seed: seed, ObjectStore: cfg.followers > 0}
	for i := 0; i < cfg.keys; i++ {
		h.Keys = append(h.Keys, fmt.Sprintf("k%d", i))
	}
	var logs []*os.File
	newLog := func(name string) (*os.File, error) {
		f, err := os.Create(filepath.Join(dir, name))
		if err == nil {
			logs = append(logs, f)
		}
		return f, err
	}
	defer func() {
		for _, f := range logs {
			f.Close()
		}
	}()
	log, err := newLog("server.log")
	if err != nil {
		return nil, err
	}
	store := []string{"-d", filepath.Join(dir, "store"), "serve"}
	url := ""
	if cfg.followers > 0 {
		// A prefix of its own, so that reruns of a seed start afresh.
		url = fmt.Sprintf("s3://%s/linearizability-%d-%d", cfg.bucket, seed, time.Now().UnixNano())
		store = []string{"-d", url, "serve"}
	}
	srv := newServer(cfg.bin, store, log, clock)
	if err := srv.spawn(true); err != nil {
		return nil, fmt.Errorf("%v (log: %s)", err, log.Name())
	}
	// Followers start once the writer has made the store.
	var followers []*server
	for i := 0; i < cfg.followers; i++ {
		flog, err := newLog(fmt.Sprintf("follower-%d.log", i))
		if err != nil {
			return nil, err
		}
		f := newServer(cfg.bin, []string{"serve", "--follow", url}, flog, clock)
		followers = append(followers, f)
		if err := f.spawn(true); err != nil {
			srv.kill()
			for _, f := range followers[:i] {
				f.kill()
			}
			return nil, fmt.Errorf("follower: %v (log: %s)", err, flog.Name())
		}
	}
	stop := make(chan struct{})
	var clients []*client
	var wg sync.WaitGroup
	start := func(c *client) {
		clients = append(clients, c)
		think := cfg.think
		if c.session > 0 {
			// Each follower read is a candidate at every step of the
			// search until its place is found (its interval starts at the
			// history's start): fewer of them keep the check quick.
			think = cfg.readerThink
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.run(stop, think) }()
	}
	var rush atomic.Int64
	for i := 0; i < cfg.clients; i++ {
		start(&client{id: i, r: rand.New(rand.NewSource(r.Int63())), keys: h.Keys, srv: srv,
			seen: map[string]string{}, rush: &rush, clock: clock})
	}
	for i := 0; i < cfg.readers && len(followers) > 0; i++ {
		start(&client{id: cfg.clients + i, r: rand.New(rand.NewSource(r.Int63())), keys: h.Keys,
			srv: followers[i%len(followers)], session: i + 1, seen: map[string]string{}, clock: clock})
	}
	var failure error
	for _, at := range killTimes(r, cfg) {
		// The writer's clients stop pausing a little before the kill
		// (longer than a pause): most of them then have a request in
		// flight when it comes, where otherwise two or three would.
		if cfg.rush > 0 {
			time.Sleep(time.Until(begin.Add(at - cfg.rush)))
			rush.Store(int64(at))
		}
		time.Sleep(time.Until(begin.Add(at)))
		if failure = restart(srv, h, r, clock); failure != nil {
			break
		}
	}
	time.Sleep(time.Until(begin.Add(cfg.duration)))
	close(stop)
	wg.Wait()
	if failure == nil {
		// One more kill once every client is done, then one read of
		// everything: what the last requests left must have survived.
		failure = restart(srv, h, r, clock)
	}
	if failure == nil {
		final := &client{id: len(clients), r: r, keys: h.Keys, srv: srv, clock: clock}
		final.finalRead()
		clients = append(clients, final)
	}
	srv.kill()
	for _, f := range followers {
		f.kill()
	}
	if failure != nil {
		return nil, fmt.Errorf("%v (store and logs kept in %s)", failure, dir)
	}
	for _, c := range clients {
		h.Ops = append(h.Ops, c.ops...)
		h.Errors = append(h.Errors, c.errs...)
	}
	sort.Slice(h.Ops, func(i, j int) bool { return h.Ops[i].Call < h.Ops[j].Call })
	for _, f := range logs {
		h.ServerErrors = append(h.ServerErrors, logErrors(f.Name())...)
	}
	os.RemoveAll(dir)
	return h, nil
}

// killTimes spreads the kills over the middle of the run, at random.
func killTimes(r *rand.Rand, cfg *config) []time.Duration {
	var at []time.Duration
	for i := 0; i < cfg.kills; i++ {
		at = append(at, cfg.duration/10+time.Duration(r.Int63n(int64(cfg.duration*8/10))))
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	return at
}

// restart SIGKILLs the server and starts it again on the same store. Now
// and then the new process is killed too, a few milliseconds in, while it
// recovers, before the one that serves.
func restart(srv *server, h *History, r *rand.Rand, clock func() int64) error {
	h.Kills = append(h.Kills, srv.kill())
	if r.Intn(4) == 0 {
		if err := srv.spawn(false); err != nil {
			return err
		}
		time.Sleep(time.Duration(r.Intn(30)) * time.Millisecond)
		h.Kills = append(h.Kills, srv.kill())
	}
	time.Sleep(time.Duration(r.Intn(200)) * time.Millisecond)
	if err := srv.spawn(true); err != nil {
		return err
	}
	h.Kills[len(h.Kills)-1].Up = clock()
	return nil
}

// finalRead reads the whole key set once, after the last restart.
func (c *client) finalRead() {
	stop := make(chan struct{})
	cn, epoch := c.connect(stop)
	defer cn.close()
	in := Input{Cmds: [][]string{{"RANGE", "", ""}}}
	op := Op{Client: c.id, Input: in, Epoch: epoch, Call: c.clock()}
	reply, err := c.do(cn, in)
	op.Return = c.clock()
	op.Output = Output{Unknown: err != nil, Reply: reply}
	c.ops = append(c.ops, op)
}

// logErrors is what a server logged at ERROR, or a panic: worth a look
// even when the history is linearizable.
func logErrors(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, " ERROR ") || strings.Contains(line, "panicked") {
			found = append(found, line)
		}
	}
	return found
}
