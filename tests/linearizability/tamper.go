package main

// -tamper: proof, on each real history, that the check is not vacuous. One
// GET's answer is replaced by a stale value, one that a SET wrote before
// another SET of the same key overwrote it, both done before the GET was
// sent; porcupine must then reject the history.

import (
	"github.com/anishathalye/porcupine"
)

// tamperFailures counts tampered histories porcupine did not reject.
var tamperFailures int

func tamperCheck(h *History, cfg *config) string {
	bad, ok := plantStaleRead(h)
	if !ok {
		return "no stale read to plant"
	}
	res, _, _, _ := decide(bad, cfg)
	if res == porcupine.Illegal {
		return "a planted stale read is rejected"
	}
	tamperFailures++
	return "A PLANTED STALE READ WAS NOT REJECTED (" + string(res) + ")"
}

// plantStaleRead returns a copy of h in which one GET answers a value that
// was overwritten before the GET was sent. The value must be one no other
// request could have produced: not an integer (no INCR makes it) and
// written by that SET alone.
func plantStaleRead(h *History) (*History, bool) {
	writes := map[string]int{}
	for _, o := range h.Ops {
		for _, c := range o.Input.Cmds {
			switch c[0] {
			case "SET":
				writes[c[2]]++
			case "CAS":
				writes[c[3]]++
			}
		}
	}
	unique := func(v string) bool {
		_, isInt := parseInt(v)
		return !isInt && writes[v] == 1
	}
	// Answered plain SETs, by key, in call order.
	sets := map[string][]int{}
	for i, o := range h.Ops {
		if !o.Output.Unknown && !o.Input.Multi && o.Input.Cmds[0][0] == "SET" {
			k := o.Input.Cmds[0][1]
			sets[k] = append(sets[k], i)
		}
	}
	for gi, g := range h.Ops {
		// A follower may answer stale values: only the writer's reads.
		if g.Output.Unknown || g.Input.Multi || g.Input.Session > 0 || g.Input.Cmds[0][0] != "GET" {
			continue
		}
		k := g.Input.Cmds[0][1]
		ws := sets[k]
		for a := 0; a < len(ws); a++ {
			w1 := h.Ops[ws[a]]
			v := w1.Input.Cmds[0][2]
			if !unique(v) {
				continue
			}
			for b := a + 1; b < len(ws); b++ {
				w2 := h.Ops[ws[b]]
				if w1.Return < w2.Call && w2.Return < g.Call && w2.Input.Cmds[0][2] != v {
					bad := *h
					bad.Ops = append([]Op(nil), h.Ops...)
					bad.Ops[gi].Output.Reply = bulk(v)
					return &bad, true
				}
			}
		}
	}
	return nil, false
}
