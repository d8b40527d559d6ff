package main

// What one run records, how it becomes porcupine's input, and how it is
// saved (and read back with -replay) when the check fails.

import (
	"encoding/json"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Op is one request as a client saw it. Times are nanoseconds since the
// run began, on the monotonic clock: Call just before the request was
// written, Return just after the whole reply was read.
type Op struct {
	Client int
	Input  Input
	Output Output
	Call   int64
	Return int64
	// The server process the connection reached (0, 1, ...): an unanswered
	// request took effect, if at all, before that process died.
	Epoch int
}

// Kill is one SIGKILL: sent at Start, the process reaped at Dead, the next
// one listening at Up (-1 for the last).
type Kill struct {
	Epoch int
	Start int64
	Dead  int64
	Up    int64
}

// History is one run, as saved.
type History struct {
	Seed int64
	Keys []string
	// The store was on an object store (followers read it).
	ObjectStore bool
	Ops         []Op
	Kills       []Kill
	// Errors are unexpected error replies (taken as unknown outcomes).
	Errors []string
	// ServerErrors are the server's log lines at ERROR (and panics).
	ServerErrors []string
}

// Counts are what a history's report line says.
type Counts struct {
	Ops, Unknown, Dropped, Kills, Errors, FollowerReads int
}

// forever is where an unanswered request's interval ends under
// -unknown-until=forever: porcupine's usual way, which lets its effect land
// anywhere after its call.
const forever = math.MaxInt64

// operations turns the history into porcupine's input.
//
// A request whose reply never came took effect, if at all, before its
// server process died (nothing happens in a dead process): its interval
// ends there, or, under untilForever, never; the model lets it have taken
// effect or not. On an object store a PUT the process sent may still land
// after its death, until the next writer has opened the store (it fences
// the log: later ones fall in a dead zone), so the interval ends when the
// next process listens. An unanswered read constrains nothing and is left
// out, as is a request sent after its process had died.
//
// A follower's read may show an older state than its call's (a follower
// lags): its interval starts stale nanoseconds before its call (at the
// history's start if stale is that large). The model keeps each session's
// reads in order, so a follower never goes back.
func (h *History) operations(sh shape) ([]porcupine.Operation, Counts) {
	untilForever, stale := sh.untilForever, sh.stale
	dead, end := map[int]int64{}, map[int]int64{}
	for i, k := range h.Kills {
		dead[k.Epoch], end[k.Epoch] = k.Dead, k.Dead
		if h.ObjectStore {
			end[k.Epoch] = forever
			for _, next := range h.Kills[i:] {
				if next.Up >= 0 {
					end[k.Epoch] = next.Up
					break
				}
			}
		}
	}
	c := Counts{Kills: len(h.Kills), Errors: len(h.Errors)}
	var ops []porcupine.Operation
	seq := map[int]int{}
	var deaths []int64
	for _, o := range h.Ops {
		call, ret := o.Call, o.Return
		if o.Output.Unknown {
			c.Unknown++
			d, died := dead[o.Epoch]
			if readOnly(o.Input) || (died && d < o.Call) {
				c.Dropped++
				continue
			}
			ret = forever
			if e, ok := end[o.Epoch]; ok && !untilForever {
				ret = e
			}
		}
		o.Input.call, o.Input.returned = o.Call, o.Return
		if s := o.Input.Session; s > 0 {
			o.Input.Seq = seq[s]
			seq[s]++
			c.FollowerReads++
			call = max(0, call-stale)
		}
		c.Ops++
		death := int64(-1) // answered
		if o.Output.Unknown {
			death = forever
			if d, died := dead[o.Epoch]; died {
				death = d
			}
		}
		deaths = append(deaths, death)
		ops = append(ops, porcupine.Operation{
			ClientId: o.Client, Input: o.Input, Output: o.Output, Call: call, Return: ret,
		})
	}
	aheadOfTheWriter(ops)
	behindTheWriter(ops)
	if sh.squeeze {
		squeeze(ops, deaths)
	}
	return ops, c
}

// shape is how a history becomes porcupine's input.
type shape struct {
	untilForever bool  // unanswered requests' intervals never end
	stale        int64 // how long before its call a follower read may be placed
	squeeze      bool  // see squeeze
}

// squeeze narrows the interval of each unanswered write to one instant
// just before its process died, in the order they were sent (deaths[i]:
// when op i's process died, -1 if it was answered). A linearization of the
// narrowed history is one of the history (each new interval lies in the
// old), so "linearizable" stands; "not" does not, and the check is made
// again without. Narrowed, the writes cut off by a kill have no order left
// to search: with all 16 clients waiting on a stalled server when the kill
// came, the full search took more than 5 minutes. (Just before the death,
// not at the interval's end: on an object store that is the next writer's
// start, and followers show writes that landed in between.)
func squeeze(ops []porcupine.Operation, deaths []int64) {
	byDeath := map[int64][]int{}
	for i, d := range deaths {
		if d >= 0 && d != forever {
			byDeath[d] = append(byDeath[d], i)
		}
	}
	for d, group := range byDeath {
		sort.Slice(group, func(a, b int) bool { return ops[group[a]].Call < ops[group[b]].Call })
		for k, i := range group {
			at := d - int64(len(group)-k)
			if at < ops[i].Call || at > ops[i].Return {
				continue
			}
			ops[i].Call, ops[i].Return = at, at
		}
	}
}

// behindTheWriter starts each follower read's interval where the earliest
// request that could have written what it shows was sent: a follower read
// may be stale, but not older than the writes it shows. (Otherwise it
// starts at the history's start, and porcupine tries it at every step of
// its search: a history with ~400 follower reads took 30 s instead of 1.)
// A value could have been written by a SET or CAS of it, by an INCR that
// answered it, or, if an integer, by an INCR whose answer is unknown; an
// absent key shows nothing (every key starts absent).
func behindTheWriter(ops []porcupine.Operation) {
	type kv struct{ k, v string }
	first := map[kv]int64{}         // the earliest call that could write v under k
	firstIncr := map[string]int64{} // the earliest INCR of k with an unknown answer
	earliest := func(m map[kv]int64, at kv, call int64) {
		if old, ok := m[at]; !ok || call < old {
			m[at] = call
		}
	}
	for _, o := range ops {
		in, out := o.Input.(Input), o.Output.(Output)
		if in.Session > 0 {
			continue
		}
		var replies []string
		if !out.Unknown {
			replies = []string{out.Reply}
			if in.Multi {
				replies, _ = splitArray(out.Reply)
			}
		}
		for i, c := range in.Cmds {
			switch c[0] {
			case "SET":
				earliest(first, kv{c[1], c[2]}, o.Call)
			case "CAS":
				earliest(first, kv{c[1], c[3]}, o.Call)
			case "INCR":
				if i >= len(replies) {
					if old, ok := firstIncr[c[1]]; !ok || o.Call < old {
						firstIncr[c[1]] = o.Call
					}
				} else if n, ok := strings.CutPrefix(replies[i], ":"); ok {
					earliest(first, kv{c[1], n}, o.Call)
				}
			}
		}
	}
	for i, o := range ops {
		in, out := o.Input.(Input), o.Output.(Output)
		if in.Session == 0 {
			continue
		}
		floor := o.Call
		for _, shown := range shownBy(in, out) {
			at, ok := first[kv{shown[0], shown[1]}]
			if incr, unknown := firstIncr[shown[0]]; unknown {
				if _, isInt := parseInt(shown[1]); isInt && (!ok || incr < at) {
					at, ok = incr, true
				}
			}
			if ok && at > floor {
				floor = at
			}
		}
		if floor <= o.Return {
			ops[i].Call = floor
		}
	}
}

// shownBy is what a read answered: the keys it shows present, with their
// values.
func shownBy(in Input, out Output) [][2]string {
	var shown [][2]string
	replies := []string{out.Reply}
	if in.Multi {
		replies, _ = splitArray(out.Reply)
	}
	for i, c := range in.Cmds {
		if i >= len(replies) {
			break
		}
		switch c[0] {
		case "GET":
			if v, err := strconv.Unquote(replies[i]); err == nil {
				shown = append(shown, [2]string{c[1], v})
			}
		case "RANGE":
			items, _ := splitArray(replies[i])
			for j := 0; j+1 < len(items); j += 2 {
				k, err1 := strconv.Unquote(items[j])
				v, err2 := strconv.Unquote(items[j+1])
				if err1 == nil && err2 == nil {
					shown = append(shown, [2]string{k, v})
				}
			}
		}
	}
	return shown
}

// aheadOfTheWriter lets each follower read be placed after its return, as
// late as the last return of a write sent before it returned. A follower
// applies a commit as soon as it is in the object store, which is before
// the writer has heard back and published it to its own readers; so a
// follower may show a write that a read on the writer, sent after the
// follower's read returned, does not show yet (ARCHITECTURE.md, "Followers
// and takeover"). What it must not show is a write sent after its read
// returned: the model checks that (State.lastCall).
func aheadOfTheWriter(ops []porcupine.Operation) {
	type write struct{ call, ret int64 }
	var writes []write
	for _, o := range ops {
		if !readOnly(o.Input.(Input)) {
			writes = append(writes, write{o.Call, o.Return})
		}
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].call < writes[j].call })
	latest := make([]int64, len(writes)) // the latest return among writes[:i+1]
	for i, w := range writes {
		latest[i] = w.ret
		if i > 0 && latest[i-1] > w.ret {
			latest[i] = latest[i-1]
		}
	}
	for i, o := range ops {
		if o.Input.(Input).Session == 0 {
			continue
		}
		n := sort.Search(len(writes), func(j int) bool { return writes[j].call > o.Return })
		if n > 0 && latest[n-1] > o.Return {
			ops[i].Return = latest[n-1]
		}
	}
}

// checkable is the history as porcupine takes it: the model and the
// compiled operations.
func (h *History) checkable(sh shape) (porcupine.Model, []porcupine.Operation, Counts) {
	ops, c := h.operations(sh)
	t := newTables(h.Keys)
	return t.model(), t.compile(ops), c
}

// annotate marks each kill on the visualization's timeline.
func (h *History) annotate(info *porcupine.LinearizationInfo) {
	var notes []porcupine.Annotation
	for _, k := range h.Kills {
		end := k.Up
		if end < 0 {
			end = k.Dead
		}
		notes = append(notes, porcupine.Annotation{
			Tag: "server", Start: k.Start, End: end,
			Description: "SIGKILL, restart",
			Details:     "killed, reaped, listening again",
		})
	}
	info.AddAnnotations(notes)
}

func (h *History) save(path string) error {
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func loadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	return &h, json.Unmarshal(b, &h)
}

// prefix is the part of h sent before t (nanoseconds into the run), to
// find where a history stops being linearizable: a request still open at
// t keeps only its call (its reply, if any, is taken as unknown).
func (h *History) prefix(t int64) *History {
	p := *h
	p.Ops = nil
	for _, o := range h.Ops {
		if o.Call >= t {
			continue
		}
		if o.Return > t {
			o.Output = Output{Unknown: true}
		}
		p.Ops = append(p.Ops, o)
	}
	return &p
}
