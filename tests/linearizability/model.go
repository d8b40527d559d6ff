package main

// kivi's semantics over a small key set, as a porcupine model: what each
// command (server/src/resp/commands.rs, transaction.rs) answers and leaves.
// No partitioning: MULTI/EXEC, multi-key DEL and RANGE touch several keys,
// so the history is checked whole.

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// maxKeys bounds the key set so that a state is a fixed-size value:
// copied by assignment, compared with ==, hashed without allocating.
const maxKeys = 8

// State is the store: key i (in the model's sorted key list) holds vals[i]
// when has[i].
type State struct {
	vals [maxKeys]string
	has  [maxKeys]bool
}

// Input is one request: a command, or MULTI, the commands, EXEC.
type Input struct {
	Multi bool
	Cmds  [][]string
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

type kv struct {
	keys  []string // sorted: RANGE answers in key order
	index map[string]int
}

func newKV(keys []string) *kv {
	if len(keys) > maxKeys {
		panic(fmt.Sprintf("at most %d keys", maxKeys))
	}
	m := &kv{keys: append([]string(nil), keys...), index: map[string]int{}}
	sort.Strings(m.keys)
	for i, k := range m.keys {
		m.index[k] = i
	}
	return m
}

func (m *kv) idx(k string) int {
	i, ok := m.index[k]
	if !ok {
		// The driver only names keys of the set; anything else is a bug
		// in the driver, not a finding.
		panic("key outside the model's set: " + k)
	}
	return i
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

// apply runs one command on s and returns its reply.
func (m *kv) apply(s *State, cmd []string) string {
	switch cmd[0] {
	case "GET":
		i := m.idx(cmd[1])
		if !s.has[i] {
			return "nil"
		}
		return bulk(s.vals[i])
	case "SET":
		i := m.idx(cmd[1])
		s.vals[i], s.has[i] = cmd[2], true
		return "+OK"
	case "DEL":
		// Each distinct key counted once (transaction.rs).
		var n int64
		for _, k := range cmd[1:] {
			i := m.idx(k)
			if s.has[i] {
				s.vals[i], s.has[i] = "", false
				n++
			}
		}
		return integer(n)
	case "INCR":
		i := m.idx(cmd[1])
		var v int64
		if s.has[i] {
			var ok bool
			if v, ok = parseInt(s.vals[i]); !ok {
				return notAnInteger
			}
		}
		v++ // the driver's values stay far from overflow
		s.vals[i], s.has[i] = strconv.FormatInt(v, 10), true
		return integer(v)
	case "CAS":
		// CAS key expected new: 1 and swapped when the key holds exactly
		// expected; an absent key never matches.
		i := m.idx(cmd[1])
		if s.has[i] && s.vals[i] == cmd[2] {
			s.vals[i] = cmd[3]
			return ":1"
		}
		return ":0"
	case "RANGE":
		return m.rangeReply(s, cmd)
	}
	panic("command outside the model: " + cmd[0])
}

// rangeReply: RANGE start end [LIMIT n], pairs with start <= key < end (an
// empty end: no bound), at most n pairs, as a flat array.
func (m *kv) rangeReply(s *State, cmd []string) string {
	start, end := cmd[1], cmd[2]
	limit := len(m.keys)
	if len(cmd) == 5 {
		l, _ := strconv.Atoi(cmd[4])
		limit = l
	}
	var out []string
	for i, k := range m.keys {
		if len(out)/2 == limit {
			break
		}
		if k < start || (end != "" && k >= end) || !s.has[i] {
			continue
		}
		out = append(out, bulk(k), bulk(s.vals[i]))
	}
	return array(out)
}

// run applies a whole request and returns its reply: a MULTI's is EXEC's,
// the array of each command's reply, all at one point.
func (m *kv) run(s State, in Input) (string, State) {
	if !in.Multi {
		r := m.apply(&s, in.Cmds[0])
		return r, s
	}
	replies := make([]string, len(in.Cmds))
	for i, c := range in.Cmds {
		replies[i] = m.apply(&s, c)
	}
	return array(replies), s
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

// model is the porcupine model. It is nondeterministic only for requests
// whose reply never came: each may have taken effect or not, so both
// states follow.
func (m *kv) model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{State{}} },
		Step: func(state, input, output interface{}) []interface{} {
			s, in, out := state.(State), input.(Input), output.(Output)
			reply, next := m.run(s, in)
			if out.Unknown {
				if next == s {
					return []interface{}{s}
				}
				return []interface{}{s, next}
			}
			if reply != out.Reply {
				return nil
			}
			return []interface{}{next}
		},
		Equal: func(a, b interface{}) bool { return a.(State) == b.(State) },
		Hash: func(state interface{}) uint64 {
			s := state.(State)
			h := fnv.New64a()
			for i := range m.keys {
				if s.has[i] {
					h.Write([]byte(s.vals[i]))
				}
				h.Write([]byte{0xff})
			}
			return h.Sum64()
		},
		DescribeOperation: func(input, output interface{}) string {
			return describe(input.(Input)) + " -> " + describeOutput(output.(Output))
		},
		DescribeState: func(state interface{}) string {
			s := state.(State)
			var parts []string
			for i, k := range m.keys {
				if s.has[i] {
					parts = append(parts, k+"="+s.vals[i])
				}
			}
			return "{" + strings.Join(parts, " ") + "}"
		},
	}
	return nm.ToModel()
}

func describe(in Input) string {
	var parts []string
	for _, c := range in.Cmds {
		parts = append(parts, strings.Join(c, " "))
	}
	if in.Multi {
		return "MULTI " + strings.Join(parts, "; ") + " EXEC"
	}
	return parts[0]
}

func describeOutput(o Output) string {
	if o.Unknown {
		return "unknown"
	}
	return o.Reply
}
