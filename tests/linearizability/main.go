// Command linearizability runs kivi serve under concurrent RESP clients,
// SIGKILLs and restarts it mid-run, and checks each recorded history with
// porcupine against a model of kivi's commands (model.go). See README.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

type config struct {
	bin          string
	histories    int
	duration     time.Duration
	clients      int
	keys         int
	kills        int
	think        time.Duration
	seed         int64
	out          string
	checkTimeout time.Duration
	forever      bool
	tamper       bool
	replay       string
	until        time.Duration
	saveAll      bool
	followers    int
	readers      int
	bucket       string
	stale        time.Duration
	readerThink  time.Duration
	rush         time.Duration
}

func main() {
	var cfg config
	var until string
	flag.StringVar(&cfg.bin, "kivi", os.Getenv("KIVI_BIN"), "the kivi binary (default: $KIVI_BIN)")
	flag.IntVar(&cfg.histories, "histories", 1, "histories to record and check")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long clients send requests, per history")
	flag.IntVar(&cfg.clients, "clients", 16, "concurrent clients, each its own connection")
	flag.IntVar(&cfg.keys, "keys", 6, fmt.Sprintf("keys the clients share (at most %d)", maxKeys))
	flag.IntVar(&cfg.kills, "kills", 3, "SIGKILLs in the middle of each history (one more ends it)")
	// At 50 ms, 16 clients keep 2 to 3 requests in flight on average and up
	// to all 16 at a stall; with much less pause the requests overlap so
	// much that porcupine's search (exponential in the overlap) takes
	// minutes per history instead of seconds.
	flag.DurationVar(&cfg.think, "think", 50*time.Millisecond, "a client's pause between requests, at most (random)")
	flag.DurationVar(&cfg.rush, "rush", 0, "how long before each kill the clients stop pausing, so that most have a request in flight when it comes (0: they do not; 100ms makes a check take minutes)")
	flag.Int64Var(&cfg.seed, "seed", 0, "random seed (0: from the clock); history i uses seed+i")
	flag.StringVar(&cfg.out, "out", "linearizability-failures", "where a failing history and its visualization go")
	flag.DurationVar(&cfg.checkTimeout, "check-timeout", 5*time.Minute, "most time porcupine may take per history")
	flag.StringVar(&until, "unknown-until", "death", "an unanswered request's interval ends at its server's death (on S3: when the next writer listens), or 'forever'")
	flag.BoolVar(&cfg.tamper, "tamper", false, "also plant a stale read in each history and require porcupine to reject it")
	flag.StringVar(&cfg.replay, "replay", "", "check a saved history (JSON) instead of running the server")
	flag.DurationVar(&cfg.until, "replay-until", 0, "with -replay: check only what was sent before this time into the run")
	flag.BoolVar(&cfg.saveAll, "save-all", false, "save every history under -out, not only failing ones")
	flag.IntVar(&cfg.followers, "followers", 0, "put the store on S3 ($KIVI_S3_BUCKET, AWS_* as tests/s3/versitygw.sh writes them) and serve it from this many followers too")
	flag.IntVar(&cfg.readers, "readers", 4, fmt.Sprintf("with -followers: clients reading from the followers (at most %d), besides -clients on the writer", maxSessions))
	flag.DurationVar(&cfg.stale, "stale", 0, "in the first, narrowed check, follower reads at most this stale (0: as stale as can be)")
	flag.DurationVar(&cfg.readerThink, "reader-think", 200*time.Millisecond, "a follower reader's pause between requests, at most (random)")
	flag.Parse()
	cfg.bucket = os.Getenv("KIVI_S3_BUCKET")
	cfg.forever = until == "forever"
	if until != "death" && until != "forever" {
		fatalf("-unknown-until is death or forever")
	}
	if cfg.seed == 0 {
		cfg.seed = time.Now().UnixNano()
	}
	if cfg.replay != "" {
		h, err := loadHistory(cfg.replay)
		if err != nil {
			fatalf("%v", err)
		}
		if cfg.until > 0 {
			h = h.prefix(int64(cfg.until))
		}
		res, c, dt := check(h, &cfg, "replay")
		fmt.Printf("%s: %d ops (%d unknown), %d kills, check %.1fs: %s\n",
			cfg.replay, c.Ops, c.Unknown, c.Kills, dt.Seconds(), res)
		if res != porcupine.Ok {
			os.Exit(1)
		}
		return
	}
	if cfg.bin == "" {
		fatalf("no kivi binary: give -kivi or KIVI_BIN")
	}
	if cfg.keys < 1 || cfg.keys > maxKeys {
		fatalf("-keys is 1 to %d", maxKeys)
	}
	if cfg.followers > 0 && (cfg.bucket == "" || cfg.readers < 1 || cfg.readers > maxSessions) {
		fatalf("-followers needs KIVI_S3_BUCKET (and AWS_*) set, and -readers 1 to %d", maxSessions)
	}
	os.Exit(campaign(&cfg))
}

func fatalf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "linearizability: "+format+"\n", args...)
	os.Exit(2)
}

// campaign runs the histories and prints a line for each and the total;
// its exit status is 1 if any history was not found linearizable.
func campaign(cfg *config) int {
	begin := time.Now()
	var total Counts
	failed, kills := 0, 0
	fmt.Printf("seed %d, %d clients, %d keys, %s per history, %d kills each (+1 at the end)\n",
		cfg.seed, cfg.clients, cfg.keys, cfg.duration, cfg.kills)
	for i := 0; i < cfg.histories; i++ {
		name := fmt.Sprintf("history %d/%d", i+1, cfg.histories)
		h, err := record(cfg, cfg.seed+int64(i))
		if err != nil {
			fmt.Printf("%s: %v\n", name, err)
			failed++
			continue
		}
		res, c, dt := check(h, cfg, fmt.Sprintf("history-%d", cfg.seed+int64(i)))
		kills += c.Kills
		total.Ops += c.Ops
		total.Unknown += c.Unknown
		total.Dropped += c.Dropped
		total.FollowerReads += c.FollowerReads
		total.Errors += c.Errors
		note := ""
		if c.Errors > 0 {
			note = fmt.Sprintf(", %d unexpected error replies (e.g. %s)", c.Errors, h.Errors[0])
		}
		if len(h.ServerErrors) > 0 {
			note += fmt.Sprintf(", %d ERROR lines in the server's log (e.g. %s)", len(h.ServerErrors), h.ServerErrors[0])
		}
		if res == porcupine.Ok && cfg.tamper {
			note += ", " + tamperCheck(h, cfg)
		}
		onFollowers := ""
		if c.FollowerReads > 0 {
			onFollowers = fmt.Sprintf(" (%d reads on followers)", c.FollowerReads)
		}
		fmt.Printf("%s: %d ops%s, %d unanswered (%d left out), %d kills, check %.1fs: %s%s\n",
			name, c.Ops, onFollowers, c.Unknown, c.Dropped, c.Kills, dt.Seconds(), verdict(res), note)
		if res != porcupine.Ok {
			failed++
		}
	}
	fmt.Printf("total: %d histories, %d ops checked (%d reads on followers), %d kills, %d unanswered requests (%d writes checked as maybe applied, %d left out), %d unexpected errors, %d not linearizable or unchecked, %s\n",
		cfg.histories, total.Ops, total.FollowerReads, kills, total.Unknown, total.Unknown-total.Dropped, total.Dropped, total.Errors, failed, time.Since(begin).Round(time.Second))
	if failed > 0 || tamperFailures > 0 {
		return 1
	}
	return 0
}

func verdict(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "NOT LINEARIZABLE"
	}
	return "UNDECIDED (the checker timed out)"
}

// decide runs porcupine on a history: first narrowed (squeeze; with
// cfg.stale, follower reads at most that stale too), which is cheap and
// enough when the history is linearizable, then, if that does not find
// it so, as it is, whose verdict is final.
func decide(h *History, cfg *config) (porcupine.CheckResult, porcupine.Model, []porcupine.Operation, Counts) {
	full := shape{untilForever: cfg.forever, stale: forever}
	quick := full
	quick.squeeze = true
	if cfg.stale > 0 {
		quick.stale = int64(cfg.stale)
	}
	model, ops, c := h.checkable(quick)
	// When the narrowed history is not linearizable, proving it takes
	// porcupine its whole search: cut that short, the full check decides.
	if porcupine.CheckOperationsTimeout(model, ops, min(cfg.checkTimeout/5, 10*time.Second)) == porcupine.Ok {
		return porcupine.Ok, model, ops, c
	}
	model, ops, c = h.checkable(full)
	return porcupine.CheckOperationsTimeout(model, ops, cfg.checkTimeout), model, ops, c
}

// check runs porcupine on a history; when it is not found linearizable,
// the history and porcupine's visualization are saved under cfg.out.
func check(h *History, cfg *config, name string) (porcupine.CheckResult, Counts, time.Duration) {
	t := time.Now()
	res, model, ops, c := decide(h, cfg)
	dt := time.Since(t)
	if res != porcupine.Ok || cfg.saveAll {
		if err := os.MkdirAll(cfg.out, 0o755); err == nil {
			base := filepath.Join(cfg.out, name)
			if err := h.save(base + ".json"); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			if res == porcupine.Illegal {
				_, info := porcupine.CheckOperationsVerbose(model, ops, cfg.checkTimeout)
				h.annotate(&info)
				if err := porcupine.VisualizePath(model, info, base+".html"); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}
			if res != porcupine.Ok {
				fmt.Printf("saved %s.json (-replay it) and %s.html\n", base, base)
			}
		}
	}
	return res, c, dt
}
