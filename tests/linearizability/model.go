package main

// kivi's semantics over a small key set, as a porcupine model: what each
// command (server/src/resp/commands.rs, transaction.rs) answers and leaves.
// No partitioning: MULTI/EXEC, multi-key DEL and RANGE touch several keys,
// so the history is checked whole.
//
// porcupine calls Step millions of times on a hard history, so requests
// and replies are compiled first (compile.go): keys become indexes, values
// cells, replies structures; a step then compares without allocating.

import (
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// maxKeys bounds the key set and maxSessions the follower clients, so that
// a state is a fixed-size value without pointers: copied by assignment,
// compared with ==, hashed without allocating, not scanned by the GC.
const (
	maxKeys     = 8
	maxSessions = 8
)

// Input is one request: a command, or MULTI, the commands, EXEC. A read on
// a follower belongs to a session (1...: one follower client) and is the
// Seq-th of it: a session's reads must see states in its order.
type Input struct {
	Multi   bool
	Cmds    [][]string
	Session int `json:",omitempty"`
	Seq     int `json:",omitempty"`
	// Set for the model by History.operations: when the request was
	// sent, and when it returned.
	call, returned int64
}

// Output is the reply's canonical text (resp.go), or Unknown when none came
// (the connection died with the server): the request may or may not have
// taken effect.
type Output struct {
	Unknown bool
	Reply   string
}

// Kivi's answer to INCR on a value that is not an integer.
const notAnInteger = "-ERR value is not an integer or out of range"

// A cell is a key's value: absent, an integer (kivi's syntax, parseInt),
// or another string (an index into the history's table of them).
type cell struct {
	kind uint8
	n    int64
}

const (
	absent uint8 = iota
	number
	text
)

// State is the store, how many reads of each follower session have been
// placed, and the latest call among the requests that changed the store
// (a follower shows no write sent after its read returned).
type State struct {
	c        [maxKeys]cell
	seen     [maxSessions]int32
	lastCall int64
}

// parseInt reads an integer as kivi does (commands.rs parse_i64): decimal,
// no sign but '-', no leading zero, no "-0", within i64.
func parseInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return n, true
}

// step runs request op on s; with want, only if every reply is the one
// wanted. It reports whether it could and the state after.
func step(s State, op *cop, want *cout) (bool, State) {
	if op.session > 0 {
		if s.seen[op.session-1] != int32(op.seq) || s.lastCall > op.notAfter {
			return false, s
		}
		s.seen[op.session-1]++
	}
	before := s.c
	for i := range op.cmds {
		var r *reply
		if want != nil {
			r = &want.replies[i]
		}
		if !apply(&s, &op.cmds[i], r) {
			return false, s
		}
	}
	if s.c != before && op.call > s.lastCall {
		s.lastCall = op.call
	}
	return true, s
}

// apply runs one command on s; r, when given, is the reply it must give.
func apply(s *State, c *ccmd, r *reply) bool {
	switch c.kind {
	case 'G':
		v := s.c[c.keys[0]]
		if r == nil {
			return true
		}
		if v.kind == absent {
			return r.kind == rNil
		}
		return r.kind == rBulk && r.v == v
	case 'S':
		s.c[c.keys[0]] = c.a
		return r == nil || r.kind == rOK
	case 'D':
		// Each distinct key counted once (transaction.rs): a repeated
		// key is absent by its second time.
		var n int64
		for _, k := range c.keys {
			if s.c[k].kind != absent {
				s.c[k] = cell{}
				n++
			}
		}
		return r == nil || r.kind == rInt && r.n == n
	case 'I':
		v := &s.c[c.keys[0]]
		switch v.kind {
		case text:
			return r == nil || r.kind == rNotInt
		case absent:
			*v = cell{kind: number}
		}
		v.n++ // the driver's values stay far from overflow
		return r == nil || r.kind == rInt && r.n == v.n
	case 'C':
		// CAS key expected new: 1 and swapped when the key holds exactly
		// expected; an absent key never matches.
		v := &s.c[c.keys[0]]
		ok := *v == c.a
		if ok {
			*v = c.b
		}
		return r == nil || r.kind == rInt && r.n == b2i(ok)
	case 'R':
		return r == nil || rangeMatches(s, c, r)
	}
	panic("command outside the model")
}

// rangeMatches: RANGE start end [LIMIT n] answers the pairs of keys
// lo..hi-1 present, at most limit of them, in key order.
func rangeMatches(s *State, c *ccmd, r *reply) bool {
	if r.kind != rArray {
		return false
	}
	n := 0
	for k := c.lo; k < c.hi && n < c.limit; k++ {
		if v := s.c[k]; v.kind != absent {
			if n >= len(r.pairs) || r.pairs[n] != (pair{k, v}) {
				return false
			}
			n++
		}
	}
	return n == len(r.pairs)
}

// readOnly tells whether a request changes nothing whatever the state
// (an unanswered one can then be left out of the history).
func readOnly(in Input) bool {
	for _, c := range in.Cmds {
		if c[0] != "GET" && c[0] != "RANGE" {
			return false
		}
	}
	return true
}

// A request whose reply never came may have taken effect or not, so the
// model is nondeterministic: its state is one State, or a set of them
// ([]State, distinct, at least two) after such requests.
func (t *tables) model() porcupine.Model {
	next := func(state, input, output interface{}) (bool, interface{}) {
		op, out := input.(*cop), output.(*cout)
		var want *cout
		if !out.unknown {
			want = out
		}
		var found []State
		add := func(s State) { found = append(found, s) }
		try := func(s State) {
			if ok, n := step(s, op, want); ok {
				add(n)
				if want == nil {
					add(s) // it did not take effect
				}
			}
		}
		switch st := state.(type) {
		case State:
			if want != nil { // the common case, without a set
				ok, n := step(st, op, want)
				return ok, n
			}
			try(st)
		case []State:
			for _, s := range st {
				try(s)
			}
		}
		found = canonical(found)
		switch len(found) {
		case 0:
			return false, state
		case 1:
			return true, found[0]
		}
		return true, found
	}
	return porcupine.Model{
		Init: func() interface{} { return State{} },
		Step: next,
		Equal: func(a, b interface{}) bool {
			switch x := a.(type) {
			case State:
				y, ok := b.(State)
				return ok && x == y
			case []State: // canonical: sorted, without repeats
				y, ok := b.([]State)
				if !ok || len(x) != len(y) {
					return false
				}
				for i := range x {
					if x[i] != y[i] {
						return false
					}
				}
				return true
			}
			return false
		},
		Hash: func(state interface{}) uint64 {
			switch x := state.(type) {
			case State:
				return hash(&x)
			case []State:
				var h uint64 // order-independent: a set
				for i := range x {
					h ^= hash(&x[i])
				}
				return h
			}
			return 0
		},
		DescribeOperation: func(input, output interface{}) string {
			return describe(input.(*cop).in) + " -> " + describeOutput(output.(*cout).out)
		},
		DescribeState: func(state interface{}) string {
			switch x := state.(type) {
			case State:
				return t.describeState(x)
			case []State:
				var parts []string
				for _, s := range x {
					parts = append(parts, t.describeState(s))
				}
				return "one of " + strings.Join(parts, ", ")
			}
			return "?"
		},
	}
}

// canonical sorts a set of states and drops repeats, so that sets compare
// element by element: after many unanswered requests (a stalled server
// killed with all 16 clients waiting) a set can hold thousands of states.
func canonical(set []State) []State {
	if len(set) < 2 {
		return set
	}
	sort.Slice(set, func(i, j int) bool { return less(&set[i], &set[j]) })
	out := set[:1]
	for _, s := range set[1:] {
		if s != out[len(out)-1] {
			out = append(out, s)
		}
	}
	return out
}

func less(a, b *State) bool {
	for i := range a.c {
		if a.c[i] != b.c[i] {
			if a.c[i].kind != b.c[i].kind {
				return a.c[i].kind < b.c[i].kind
			}
			return a.c[i].n < b.c[i].n
		}
	}
	for i := range a.seen {
		if a.seen[i] != b.seen[i] {
			return a.seen[i] < b.seen[i]
		}
	}
	return a.lastCall < b.lastCall
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func hash(s *State) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) { h = (h ^ v) * 1099511628211 }
	for _, c := range s.c {
		mix(uint64(c.kind))
		mix(uint64(c.n))
	}
	for _, n := range s.seen {
		mix(uint64(n))
	}
	mix(uint64(s.lastCall))
	return h
}

func (t *tables) describeState(s State) string {
	var parts []string
	for i, k := range t.keys {
		if v := s.c[i]; v.kind != absent {
			parts = append(parts, k+"="+t.value(v))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func describe(in Input) string {
	var parts []string
	for _, c := range in.Cmds {
		parts = append(parts, strings.Join(c, " "))
	}
	s := parts[0]
	if in.Multi {
		s = "MULTI " + strings.Join(parts, "; ") + " EXEC"
	}
	if in.Session > 0 {
		s = "follower: " + s
	}
	return s
}

func describeOutput(o Output) string {
	if o.Unknown {
		return "unknown"
	}
	return o.Reply
}
