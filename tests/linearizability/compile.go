package main

// Requests and replies compiled for the model (model.go): keys as indexes
// into the sorted key set, values as cells, replies parsed from their
// canonical text (resp.go) once, instead of at each of porcupine's steps.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// tables are a history's keys (sorted: RANGE answers in key order) and the
// strings that are not integers, numbered.
type tables struct {
	keys   []string
	index  map[string]int
	texts  []string
	textOf map[string]int
}

func newTables(keys []string) *tables {
	if len(keys) > maxKeys {
		panic(fmt.Sprintf("at most %d keys", maxKeys))
	}
	t := &tables{keys: append([]string(nil), keys...), index: map[string]int{}, textOf: map[string]int{}}
	sort.Strings(t.keys)
	for i, k := range t.keys {
		t.index[k] = i
	}
	return t
}

func (t *tables) cell(v string) cell {
	if n, ok := parseInt(v); ok {
		return cell{kind: number, n: n}
	}
	i, ok := t.textOf[v]
	if !ok {
		i = len(t.texts)
		t.texts = append(t.texts, v)
		t.textOf[v] = i
	}
	return cell{kind: text, n: int64(i)}
}

func (t *tables) value(c cell) string {
	switch c.kind {
	case number:
		return strconv.FormatInt(c.n, 10)
	case text:
		return t.texts[c.n]
	}
	return "(absent)"
}

func (t *tables) key(k string) int8 {
	i, ok := t.index[k]
	if !ok {
		// The driver only names keys of the set; anything else is a bug
		// in the driver, not a finding.
		panic("key outside the model's set: " + k)
	}
	return int8(i)
}

// cop is a compiled request.
type cop struct {
	in           Input // as sent, for descriptions
	cmds         []ccmd
	session, seq int
	call         int64 // when it was sent
	notAfter     int64 // a follower read: when it returned
}

// ccmd is one command: kind 'G'et, 'S'et, 'D'el, 'I'ncr, 'C'as, 'R'ange.
type ccmd struct {
	kind   byte
	keys   []int8
	a, b   cell // SET's value; CAS's expected and new values
	lo, hi int8 // RANGE: the keys lo..hi-1
	limit  int
}

// cout is a compiled reply: one per command (EXEC's items for MULTI).
type cout struct {
	out     Output // as received, for descriptions
	unknown bool
	replies []reply
}

type reply struct {
	kind  uint8
	n     int64  // rInt
	v     cell   // rBulk
	pairs []pair // rArray (RANGE)
}

type pair struct {
	key int8
	v   cell
}

const (
	rOther uint8 = iota // anything the model never answers
	rOK
	rNil
	rInt
	rBulk
	rNotInt
	rArray
)

func (t *tables) compileInput(in Input) *cop {
	op := &cop{in: in, session: in.Session, seq: in.Seq, call: in.call, notAfter: in.returned}
	for _, c := range in.Cmds {
		cc := ccmd{kind: c[0][0]}
		switch c[0] {
		case "GET", "INCR":
			cc.keys = []int8{t.key(c[1])}
		case "SET":
			cc.keys, cc.a = []int8{t.key(c[1])}, t.cell(c[2])
		case "CAS":
			cc.keys, cc.a, cc.b = []int8{t.key(c[1])}, t.cell(c[2]), t.cell(c[3])
		case "DEL":
			for _, k := range c[1:] {
				cc.keys = append(cc.keys, t.key(k))
			}
		case "RANGE":
			// start <= key < end, an empty end unbounded; LIMIT n.
			cc.lo = int8(sort.SearchStrings(t.keys, c[1]))
			cc.hi = int8(len(t.keys))
			if c[2] != "" {
				cc.hi = int8(sort.SearchStrings(t.keys, c[2]))
			}
			cc.limit = len(t.keys)
			if len(c) == 5 {
				cc.limit, _ = strconv.Atoi(c[4])
			}
		default:
			panic("command outside the model: " + c[0])
		}
		op.cmds = append(op.cmds, cc)
	}
	return op
}

func (t *tables) compileOutput(in Input, out Output) *cout {
	co := &cout{out: out, unknown: out.Unknown}
	if out.Unknown {
		return co
	}
	if !in.Multi {
		co.replies = []reply{t.parse(out.Reply)}
		return co
	}
	items, ok := splitArray(out.Reply)
	if !ok || len(items) != len(in.Cmds) {
		// A reply of another shape than EXEC's: no command can match.
		co.replies = make([]reply, len(in.Cmds))
		return co
	}
	for _, it := range items {
		co.replies = append(co.replies, t.parse(it))
	}
	return co
}

// parse reads one canonical reply; what the model could never answer is
// rOther.
func (t *tables) parse(s string) reply {
	switch {
	case s == "+OK":
		return reply{kind: rOK}
	case s == "nil":
		return reply{kind: rNil}
	case s == notAnInteger:
		return reply{kind: rNotInt}
	case strings.HasPrefix(s, ":"):
		if n, err := strconv.ParseInt(s[1:], 10, 64); err == nil {
			return reply{kind: rInt, n: n}
		}
	case strings.HasPrefix(s, `"`):
		if v, err := strconv.Unquote(s); err == nil {
			return reply{kind: rBulk, v: t.cell(v)}
		}
	case strings.HasPrefix(s, "["):
		items, ok := splitArray(s)
		if !ok || len(items)%2 != 0 {
			break
		}
		r := reply{kind: rArray}
		for i := 0; i < len(items); i += 2 {
			k, err1 := strconv.Unquote(items[i])
			v, err2 := strconv.Unquote(items[i+1])
			idx, known := t.index[k]
			if err1 != nil || err2 != nil || !known {
				return reply{}
			}
			r.pairs = append(r.pairs, pair{int8(idx), t.cell(v)})
		}
		return r
	}
	return reply{}
}

// splitArray splits "[a, b, ...]" into its items (quoted strings may hold
// ", "; items are not arrays themselves in this workload).
func splitArray(s string) ([]string, bool) {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, false
	}
	s = s[1 : len(s)-1]
	var items []string
	for s != "" {
		var it string
		if strings.HasPrefix(s, `"`) {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, false
			}
			it = q
		} else if i := strings.Index(s, ", "); i >= 0 {
			it = s[:i]
		} else {
			it = s
		}
		items = append(items, it)
		s = s[len(it):]
		if s != "" {
			if !strings.HasPrefix(s, ", ") {
				return nil, false
			}
			s = s[2:]
		}
	}
	return items, true
}

// compile turns operations with Input/Output into ones with *cop/*cout.
func (t *tables) compile(ops []porcupine.Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		in := o.Input.(Input)
		o.Input, o.Output = t.compileInput(in), t.compileOutput(in, o.Output.(Output))
		out[i] = o
	}
	return out
}
