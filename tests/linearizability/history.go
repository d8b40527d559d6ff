package main

// What one run records, how it becomes porcupine's input, and how it is
// saved (and read back with -replay) when the check fails.

import (
	"encoding/json"
	"math"
	"os"

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
	Seed  int64
	Keys  []string
	Ops   []Op
	Kills []Kill
	// Errors are unexpected error replies (taken as unknown outcomes).
	Errors []string
	// ServerErrors are the server's log lines at ERROR (and panics).
	ServerErrors []string
}

// Counts are what a history's report line says.
type Counts struct {
	Ops, Unknown, Dropped, Kills, Errors int
}

// forever is where an unanswered request's interval ends under
// -unknown-until=forever: porcupine's usual way, which lets its effect land
// anywhere after its call.
const forever = math.MaxInt64

// operations turns the history into porcupine's input. A request whose
// reply never came ends when its server process died (nothing happens in a
// dead process) or, under forever, never; the model lets it have taken
// effect or not. An unanswered read constrains nothing and is left out, as
// is a request sent after its process had died.
func (h *History) operations(untilForever bool) ([]porcupine.Operation, Counts) {
	dead := map[int]int64{}
	for _, k := range h.Kills {
		dead[k.Epoch] = k.Dead
	}
	c := Counts{Kills: len(h.Kills), Errors: len(h.Errors)}
	var ops []porcupine.Operation
	for _, o := range h.Ops {
		ret := o.Return
		if o.Output.Unknown {
			c.Unknown++
			d, died := dead[o.Epoch]
			if readOnly(o.Input) || (died && d < o.Call) {
				c.Dropped++
				continue
			}
			switch {
			case untilForever || !died:
				ret = forever
			default:
				ret = d
			}
		}
		c.Ops++
		ops = append(ops, porcupine.Operation{
			ClientId: o.Client, Input: o.Input, Output: o.Output, Call: o.Call, Return: ret,
		})
	}
	return ops, c
}

// checkable is the history as porcupine takes it: the model and the
// compiled operations.
func (h *History) checkable(untilForever bool) (porcupine.Model, []porcupine.Operation, Counts) {
	ops, c := h.operations(untilForever)
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
