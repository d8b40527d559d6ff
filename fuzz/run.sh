#!/usr/bin/env bash
# Fuzzes every target (or those named) for SECONDS each with libFuzzer,
# starting from its committed corpus (fuzz/corpus/<target>/, left as it is:
# new inputs go to a scratch folder under fuzz/target/), and prints per
# target the executions, the coverage libFuzzer reached (cov: edges, ft:
# features) and the crashes. Exits 1 if any target crashed; the crash
# inputs are in fuzz/artifacts/<target>/ (to keep one as a regression test,
# copy it to fuzz/regressions/<target>/, which fuzz-targets/tests/replay.rs
# replays).
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default 10 seconds)
#
# Needs the nightly toolchain (`rustup toolchain install nightly`);
# installs cargo-fuzz if it is missing. Built without a sanitizer: kivi
# has no unsafe code of its own, so AddressSanitizer would mostly check
# the standard library, at several times the build time and a slower run.
# Environment: FUZZ_ARGS adds libFuzzer options (e.g. FUZZ_ARGS="-fork=2
# -ignore_crashes=1" for a long campaign that goes on past crashes).
set -euo pipefail
cd "$(dirname "$0")"

seconds=${1:-10}
shift || true
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
    echo "usage: fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]" >&2
    exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
cargo +nightly fuzz build --sanitizer none
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

bin=target/x86_64-unknown-linux-gnu/release
# One scratch folder per run (by process id), so that a short run (./test.sh)
# beside a long campaign does not delete the campaign's folder; kept only
# when a target crashed (its log is named below).
scratch=target/run/$$
rm -rf "$scratch"
failed=()
printf '%-18s %12s %9s %7s %7s %7s %8s\n' target executions "exec/s" cov ft corpus crashes
for t in "${targets[@]}"; do
    mkdir -p "$scratch/$t" "artifacts/$t"
    log=$scratch/$t.log
    before=$(find "artifacts/$t" -type f | wc -l)
    status=0
    # The scratch folder comes first: libFuzzer writes new inputs there
    # and only reads the committed corpus. -timeout: an input that takes
    # longer is a hang, reported as a crash.
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of options
    "$bin/$t" "$scratch/$t" "corpus/$t" -max_total_time="$seconds" -timeout=10 \
        -print_final_stats=1 -artifact_prefix="artifacts/$t/" ${FUZZ_ARGS:-} \
        >"$log" 2>&1 || status=$?
    # The last status line (`#N DONE cov: X ft: Y corp: Z/...`, or the one
    # before a crash) has the coverage; the final stats the executions.
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    field() { sed -nE "s/.* $1: ([0-9]+).*/\\1/p" <<<"$last"; }
    # (In fork mode, FUZZ_ARGS=-fork=N, there are no final stats: the
    # status line's count, over the time asked for, stands in.)
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -n 1)
    runs=${runs:-$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")}
    rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | tail -n 1)
    rate=${rate:-$((${runs:-0} / seconds))}
    corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")
    # Crashes, hangs and running out of memory each leave an input.
    crashes=$(($(find "artifacts/$t" -type f | wc -l) - before))
    if [ "$status" -ne 0 ] || [ "$crashes" -gt 0 ]; then
        failed+=("$t")
    fi
    printf '%-18s %12s %9s %7s %7s %7s %8s\n' "$t" "${runs:-?}" "${rate:-?}" \
        "$(field cov)" "$(field ft)" "${corp:-?}" "$crashes"
done
if [ ${#failed[@]} -gt 0 ]; then
    for t in "${failed[@]}"; do
        echo "fuzz/run.sh: $t crashed; its log: fuzz/$scratch/$t.log, inputs in fuzz/artifacts/$t/:" >&2
        grep -E 'panicked at|ERROR: libFuzzer|^artifact_prefix|Test unit written' "$scratch/$t.log" >&2 || true
    done
    exit 1
fi
rm -rf "$scratch"
