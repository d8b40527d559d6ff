package main

// The checker is not vacuous: hand-made histories that are not
// linearizable are rejected, and their linearizable twins accepted, through
// the same path the driver's histories take (History.operations, the model,
// porcupine).

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is a request of client c from call to ret with this reply ("?": none
// came, the connection died with server epoch 0); each command's words are
// separated by one space ("RANGE k1 " has an empty end).
func op(c int, call, ret int64, reply string, cmds ...string) Op {
	in := Input{Multi: len(cmds) > 1}
	for _, cmd := range cmds {
		in.Cmds = append(in.Cmds, strings.Split(cmd, " "))
	}
	o := Op{Client: c, Input: in, Call: call, Return: ret}
	if reply == "?" {
		o.Output.Unknown = true
	} else {
		o.Output.Reply = reply
	}
	return o
}

// fop is a read of follower session s.
func fop(s int, call, ret int64, reply string, cmds ...string) Op {
	o := op(10+s, call, ret, reply, cmds...)
	o.Input.Session = s
	return o
}

// checkOps checks ops as the driver does (decide), with server epoch 0
// killed (reaped) at deathAt.
func checkOps(t *testing.T, deathAt int64, untilForever bool, ops ...Op) porcupine.CheckResult {
	t.Helper()
	h := &History{Keys: []string{"k0", "k1", "k2"}, Ops: ops,
		Kills: []Kill{{Epoch: 0, Start: deathAt - 1, Dead: deathAt, Up: deathAt + 1}}}
	res, _, _, _ := decide(h, &config{forever: untilForever, checkTimeout: 10 * time.Second})
	return res
}

func expect(t *testing.T, want porcupine.CheckResult, name string, deathAt int64, forever bool, ops ...Op) {
	t.Helper()
	if got := checkOps(t, deathAt, forever, ops...); got != want {
		t.Errorf("%s: %s, want %s", name, got, want)
	}
}

const never = 1 << 40 // no kill within these histories

func TestStaleReadIsRejected(t *testing.T) {
	w1 := op(0, 0, 10, "+OK", "SET k0 1")
	w2 := op(0, 20, 30, "+OK", "SET k0 2")
	expect(t, porcupine.Illegal, "a read of an overwritten value", never, false,
		w1, w2, op(1, 40, 50, `"1"`, "GET k0"))
	expect(t, porcupine.Ok, "a read of the latest value", never, false,
		w1, w2, op(1, 40, 50, `"2"`, "GET k0"))
	// Concurrent with the second write, a read may see either value.
	expect(t, porcupine.Ok, "a concurrent read of the old value", never, false,
		w1, w2, op(1, 25, 35, `"1"`, "GET k0"))
	expect(t, porcupine.Ok, "a concurrent read of the new value", never, false,
		w1, w2, op(1, 25, 35, `"2"`, "GET k0"))
	// A read cannot go back once another client saw the new value.
	expect(t, porcupine.Illegal, "a read going back in time", never, false,
		w1, op(0, 20, 60, "+OK", "SET k0 2"),
		op(1, 30, 35, `"2"`, "GET k0"), op(2, 40, 45, `"1"`, "GET k0"))
}

func TestLostIncrementIsRejected(t *testing.T) {
	expect(t, porcupine.Illegal, "two INCRs in sequence both answering 1", never, false,
		op(0, 0, 10, ":1", "INCR k0"), op(1, 20, 30, ":1", "INCR k0"))
	expect(t, porcupine.Illegal, "two concurrent INCRs both answering 1", never, false,
		op(0, 0, 10, ":1", "INCR k0"), op(1, 5, 15, ":1", "INCR k0"))
	expect(t, porcupine.Ok, "concurrent INCRs answering 2, then 1", never, false,
		op(0, 0, 10, ":2", "INCR k0"), op(1, 5, 15, ":1", "INCR k0"))
	expect(t, porcupine.Ok, "INCR on a value that is not an integer", never, false,
		op(0, 0, 10, "+OK", "SET k0 x1"), op(0, 20, 30, notAnInteger, "INCR k0"),
		op(0, 40, 50, `"x1"`, "GET k0"))
	expect(t, porcupine.Illegal, "INCR on a value that is not an integer, answered", never, false,
		op(0, 0, 10, "+OK", "SET k0 x1"), op(0, 20, 30, ":1", "INCR k0"))
}

func TestCasAndDelAnswersAreChecked(t *testing.T) {
	expect(t, porcupine.Ok, "CAS on an absent key, a mismatch, a match", never, false,
		op(0, 0, 10, ":0", "CAS k0 1 2"), op(0, 20, 30, "+OK", "SET k0 1"),
		op(0, 40, 50, ":0", "CAS k0 3 4"), op(0, 60, 70, ":1", "CAS k0 1 2"),
		op(0, 80, 90, `"2"`, "GET k0"))
	expect(t, porcupine.Illegal, "CAS succeeding on an absent key", never, false,
		op(0, 0, 10, ":1", "CAS k0 1 2"))
	expect(t, porcupine.Illegal, "two CASes from the same value both succeeding", never, false,
		op(0, 0, 10, "+OK", "SET k0 1"),
		op(1, 20, 40, ":1", "CAS k0 1 2"), op(2, 25, 35, ":1", "CAS k0 1 3"))
	expect(t, porcupine.Ok, "DEL counts each present key once", never, false,
		op(0, 0, 10, "+OK", "SET k0 1"), op(0, 20, 30, ":1", "DEL k0 k0"),
		op(0, 40, 50, ":0", "DEL k0 k1"))
	expect(t, porcupine.Illegal, "DEL counting an absent key", never, false,
		op(0, 0, 10, ":1", "DEL k0"))
}

func TestMultiIsOneStep(t *testing.T) {
	tx := op(0, 0, 100, `[+OK, :1, nil]`, "SET k0 1", "INCR k1", "GET k2")
	expect(t, porcupine.Ok, "a range seeing all of a transaction", never, false,
		tx, op(1, 10, 20, `["k0", "1", "k1", "1"]`, "RANGE  "))
	expect(t, porcupine.Ok, "a range seeing none of it", never, false,
		tx, op(1, 10, 20, `[]`, "RANGE k0 k2"))
	expect(t, porcupine.Illegal, "a range seeing half of it", never, false,
		tx, op(1, 10, 20, `["k0", "1"]`, "RANGE k0 k2"))
	expect(t, porcupine.Illegal, "a transaction whose replies are not those of one moment", never, false,
		op(0, 0, 10, `[+OK, "2"]`, "SET k0 1", "GET k0"))
}

func TestRangeAnswers(t *testing.T) {
	set := []Op{op(0, 0, 10, "+OK", "SET k0 a"), op(0, 11, 12, "+OK", "SET k1 b"), op(0, 13, 14, "+OK", "SET k2 c")}
	for _, c := range []struct{ cmd, reply string }{
		{"RANGE k0 k2", `["k0", "a", "k1", "b"]`},
		{"RANGE k0~ z", `["k1", "b", "k2", "c"]`},
		{"RANGE k1 k1", `[]`},
		{"RANGE k2 k0", `[]`},
		{"RANGE a z LIMIT 1", `["k0", "a"]`},
		{"RANGE a z LIMIT 0", `[]`},
	} {
		r := op(1, 20, 30, c.reply, c.cmd)
		expect(t, porcupine.Ok, c.cmd, never, false, append(set, r)...)
		r.Output.Reply = `["k0", "a"]`
		if c.reply != r.Output.Reply {
			expect(t, porcupine.Illegal, c.cmd+" answered wrong", never, false, append(set, r)...)
		}
	}
	// An empty end is no bound.
	r := op(1, 20, 30, `["k1", "b", "k2", "c"]`, "RANGE k1 ")
	expect(t, porcupine.Ok, "RANGE k1 ''", never, false, append(set, r)...)
}

// An unanswered write may have taken effect or not, but only while its
// server lived: the bound at the process's death is what lets the check
// see a write that comes back after a restart it had not survived.
func TestUnknownOutcomes(t *testing.T) {
	w := op(0, 0, 0, "?", "SET k0 1")
	expect(t, porcupine.Ok, "an unanswered write, lost", 10, false, w, op(1, 20, 30, "nil", "GET k0"))
	expect(t, porcupine.Ok, "an unanswered write, kept", 10, false, w, op(1, 20, 30, `"1"`, "GET k0"))
	late := []Op{w, op(1, 20, 30, "nil", "GET k0"), op(1, 40, 50, `"1"`, "GET k0")}
	expect(t, porcupine.Illegal, "an unanswered write appearing after a read missed it", 10, false, late...)
	expect(t, porcupine.Ok, "the same, its interval open forever", 10, true, late...)
	expect(t, porcupine.Illegal, "an answered write lost by a restart", 10, false,
		op(0, 0, 5, "+OK", "SET k0 1"), op(1, 20, 30, "nil", "GET k0"))
	// The first, narrowed check puts unanswered writes just before the
	// kill; one a read saw earlier needs the full check.
	expect(t, porcupine.Ok, "an unanswered write seen before the kill", 100, false,
		op(0, 0, 0, "?", "SET k0 1"), op(1, 10, 20, `"1"`, "GET k0"))
	expect(t, porcupine.Ok, "unanswered writes seen before the kill in the other order", 100, false,
		op(0, 0, 0, "?", "SET k0 1"), op(1, 5, 5, "?", "SET k0 2"),
		op(2, 10, 20, `"2"`, "GET k0"), op(2, 30, 40, `"1"`, "GET k0"))
	expect(t, porcupine.Illegal, "unanswered writes seen in an order they cannot have", 100, false,
		op(0, 0, 0, "?", "SET k0 1"), op(1, 50, 50, "?", "SET k0 2"),
		op(2, 10, 20, `"2"`, "GET k0"), op(2, 30, 40, `"1"`, "GET k0"))
	// Unanswered reads say nothing and are left out.
	expect(t, porcupine.Ok, "an unanswered read", 10, false, op(0, 0, 0, "?", "GET k0"))
}

// A follower may lag, but shows states of the writer's order, in order,
// and none from the future.
func TestFollowerReads(t *testing.T) {
	w := []Op{op(0, 0, 10, "+OK", "SET k0 1"), op(0, 20, 30, "+OK", "SET k0 2")}
	expect(t, porcupine.Ok, "a stale follower read", never, false,
		append(w, fop(1, 40, 50, `"1"`, "GET k0"))...)
	expect(t, porcupine.Ok, "a follower read older than another session's", never, false,
		append(w, fop(1, 40, 50, `"2"`, "GET k0"), fop(2, 60, 70, `"1"`, "GET k0"))...)
	expect(t, porcupine.Illegal, "a follower session going back", never, false,
		append(w, fop(1, 40, 50, `"2"`, "GET k0"), fop(1, 60, 70, `"1"`, "GET k0"))...)
	expect(t, porcupine.Illegal, "a follower read from the future", never, false,
		append(w, fop(1, 12, 15, `"2"`, "GET k0"))...)
	// A follower applies a commit once it is in the store, before the
	// writer has heard back and shows it to its own readers.
	expect(t, porcupine.Ok, "a follower ahead of the writer's readers", never, false,
		op(0, 0, 10, "+OK", "SET k0 1"), op(0, 20, 60, "+OK", "SET k0 2"),
		fop(1, 30, 35, `"2"`, "GET k0"), op(1, 40, 45, `"1"`, "GET k0"))
	expect(t, porcupine.Illegal, "the same, the writer's reader sent after the write returned", never, false,
		op(0, 0, 10, "+OK", "SET k0 1"), op(0, 20, 38, "+OK", "SET k0 2"),
		fop(1, 30, 35, `"2"`, "GET k0"), op(1, 40, 45, `"1"`, "GET k0"))
	expect(t, porcupine.Illegal, "a follower read of a value never written", never, false,
		append(w, fop(1, 40, 50, `"3"`, "GET k0"))...)
	tx := op(0, 100, 110, "[+OK, +OK]", "SET k1 1", "SET k2 1")
	expect(t, porcupine.Illegal, "a follower read seeing half a transaction", never, false,
		tx, fop(1, 120, 130, `["k1", "1"]`, "RANGE k1 "))
	expect(t, porcupine.Ok, "a follower read seeing all of it", never, false,
		tx, fop(1, 120, 130, `["k1", "1", "k2", "1"]`, "RANGE k1 "))
	// A follower read's interval starts at the earliest request that could
	// have written what it shows: an INCR whose answer never came may have
	// written any integer.
	expect(t, porcupine.Ok, "a follower showing what an unanswered INCR wrote, ahead of the writer", 100, false,
		op(0, 0, 5, "+OK", "SET k0 5"), op(1, 10, 10, "?", "INCR k0"),
		fop(1, 50, 60, `"6"`, "GET k0"), op(2, 70, 80, `"5"`, "GET k0"))
	expect(t, porcupine.Ok, "a follower showing, stale, what an INCR answered", never, false,
		op(0, 0, 5, ":1", "INCR k0"), op(0, 10, 15, ":2", "INCR k0"),
		fop(1, 50, 60, `["k0", "1"]`, "RANGE k0 k1"))
	// A write the writer never answered, shown by a follower, must
	// survive the writer's restart.
	u := op(0, 0, 0, "?", "SET k0 1")
	expect(t, porcupine.Ok, "an unanswered write a follower saw, kept", 10, false,
		u, fop(1, 5, 8, `"1"`, "GET k0"), op(1, 20, 30, `"1"`, "GET k0"))
	expect(t, porcupine.Illegal, "an unanswered write a follower saw, lost", 10, false,
		u, fop(1, 5, 8, `"1"`, "GET k0"), op(1, 20, 30, "nil", "GET k0"))
}

// -tamper's planted stale read is rejected, in a history that was
// linearizable before.
func TestPlantedStaleReadIsRejected(t *testing.T) {
	h := &History{Keys: []string{"k0", "k1", "k2"}, Ops: []Op{
		op(0, 0, 10, "+OK", "SET k0 x1"),
		op(1, 20, 30, "+OK", "SET k0 2"),
		op(2, 5, 8, ":1", "INCR k1"),
		op(2, 40, 50, `"2"`, "GET k0"),
	}}
	cfg := &config{checkTimeout: 10 * time.Second}
	model, ops, _ := h.checkable(shape{})
	if r := porcupine.CheckOperations(model, ops); !r {
		t.Fatal("the untouched history is not linearizable")
	}
	bad, ok := plantStaleRead(h)
	if !ok || bad.Ops[3].Output.Reply != `"x1"` {
		t.Fatalf("no stale read planted: %v", bad)
	}
	if h.Ops[3].Output.Reply != `"2"` {
		t.Fatal("planting changed the original history")
	}
	if got := tamperCheck(h, cfg); !strings.Contains(got, "is rejected") {
		t.Fatal(got)
	}
}

func TestIntegersParseAsKiviReadsThem(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "7": true, "-7": true, "9223372036854775807": true,
		"9223372036854775808": false, "": false, "-": false, "+1": false,
		" 1": false, "01": false, "-0": false, "1e3": false, "x1": false,
	} {
		if _, got := parseInt(s); got != want {
			t.Errorf("%q: %v", s, got)
		}
	}
}
