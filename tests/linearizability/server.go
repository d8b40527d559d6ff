package main

// A kivi server process under test: started on its store, SIGKILLed and
// started again on it. Each process is an epoch; clients learn which one
// they reached from its process id (INFO server), since a restarted server
// may get the port its predecessor had.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

type server struct {
	bin   string
	args  []string // the store: -d DIR serve, -d URL serve, serve --follow URL
	log   *os.File // every process's standard error, one after another
	clock func() int64

	mu    sync.Mutex
	cmd   *exec.Cmd
	epoch int           // of cmd
	addr  string        // cmd's RESP address; "" while it is not listening
	ready chan struct{} // closed once addr is set
	pids  map[int]int   // process id -> epoch
}

func newServer(bin string, args []string, log *os.File, clock func() int64) *server {
	return &server{
		bin: bin, args: args, log: log, clock: clock,
		epoch: -1, ready: make(chan struct{}), pids: map[int]int{},
	}
}

// spawn starts the next process. With wait, it returns once the process
// listens and makes it the one clients reach; without, right away (a
// process to be killed while it recovers).
func (s *server) spawn(wait bool) error {
	cmd := exec.Command(s.bin, append(s.args, "--resp", "127.0.0.1:0")...)
	cmd.Stderr = s.log
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return err
	}
	w.Close()
	s.mu.Lock()
	s.epoch++
	s.cmd = cmd
	s.pids[cmd.Process.Pid] = s.epoch
	s.mu.Unlock()
	// The listening line comes first on standard output; the rest is
	// drained so the process never blocks on a full pipe.
	addr := make(chan string, 1)
	go func() {
		defer r.Close()
		sc := bufio.NewScanner(r)
		const prefix = "kivi serve: resp listening on "
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, prefix) {
				addr <- strings.Fields(line[len(prefix):])[0]
			}
		}
		close(addr)
	}()
	if !wait {
		return nil
	}
	select {
	case a, ok := <-addr:
		if !ok {
			return fmt.Errorf("%s exited before listening (see its log)", s.bin)
		}
		s.mu.Lock()
		s.addr = a
		close(s.ready)
		s.mu.Unlock()
		return nil
	case <-time.After(60 * time.Second):
		return fmt.Errorf("%s did not listen within 60 s", s.bin)
	}
}

// kill SIGKILLs the current process and reaps it: clients wait for the
// next spawn from here on.
func (s *server) kill() Kill {
	s.mu.Lock()
	cmd, epoch := s.cmd, s.epoch
	if s.addr != "" {
		s.addr = ""
		s.ready = make(chan struct{})
	}
	s.mu.Unlock()
	k := Kill{Epoch: epoch, Start: s.clock(), Up: -1}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	k.Dead = s.clock()
	return k
}

// current is where clients connect: an address, or a channel closed once
// there is one.
func (s *server) current() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr, s.ready
}

func (s *server) epochOf(pid int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.pids[pid]
	return e, ok
}
