//! kivi-test-child: the child process of the tests that need a second
//! process (`tests/kill.rs`, `tests/bad_input.rs`). The parent test runs it
//! through `env!("CARGO_BIN_EXE_kivi-test-child")`:
//!
//! - `kivi-test-child kill-writer DIR RUN THREADS`: commits batches to the
//!   store in DIR until killed (see `common::child::kill_writer`);
//! - `kivi-test-child read-only-checks DIR`: the read-only checks on the
//!   store in DIR, run as user `nobody`; prints `READ-ONLY CHECKS PASSED`.
//!
//! It is a program, not a test: an ordinary test run does not run it.

#[path = "../common/mod.rs"]
mod common;

use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args[..] {
        ["kill-writer", dir, run, threads] => common::child::kill_writer(
            Path::new(dir),
            run.parse().expect("RUN: a number"),
            threads.parse().expect("THREADS: a number"),
        ),
        ["read-only-checks", dir] => {
            common::child::read_only_checks(Path::new(dir));
            println!("{}", common::child::RO_CHILD_DONE);
        }
        _ => {
            eprintln!(
                "usage: kivi-test-child kill-writer DIR RUN THREADS\n       \
                 kivi-test-child read-only-checks DIR"
            );
            std::process::exit(2);
        }
    }
}
