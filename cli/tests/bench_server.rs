//! The kvlds clients of `kivi bench --server` against a real `kivi serve`
//! over a Unix socket, on a small store: every workload completes with
//! every answer checked, the trickling client's traffic has kivaloo's
//! tools' shape (no write over 4 KiB, no read over its 4 KiB buffer but
//! for RANGE answers), and a wrong answer fails the run. With KIVALOO_DIR
//! set to a built kivaloo tree, the same against kivaloo.

use kivi_bench::kvlds_client::{trickle, Run, IN_FLIGHT, READ_BUFFER, WRITE_BUFFER};
use kivi_bench::kvlds_workload::{Kind, Timing};
use kivi_bench::mkpairs::Pairs;
use kivi_bench::server::{bursty, Kivaloo, KiviServer};
use std::path::Path;
use std::time::Duration;

const KIVI: &str = env!("CARGO_BIN_EXE_kivi");
const N: u64 = 5000;

/// Short windows: the shape and the checks are under test, not the rate.
fn timing() -> Timing {
    Timing {
        warmup: Duration::from_millis(50),
        windows: 3,
        window: Duration::from_millis(100),
    }
}

fn serve(dir: &Path) -> (KiviServer, String) {
    let socket = dir.join("sock_kvlds");
    let socket = socket.to_str().unwrap().to_string();
    let s = KiviServer::start(KIVI.as_ref(), &dir.join("data"), Some(&socket), false)
        .expect("start kivi serve");
    (s, socket)
}

/// What every run must show, whichever client made it.
fn assert_complete(kind: Kind, run: &Run, client: &str) {
    let s = &run.stats;
    let what = format!("{client} {}: {s:?}", kind.name());
    assert!(s.sent > 0, "{what}");
    assert_eq!(
        s.checked, s.sent,
        "every request answered and checked: {what}"
    );
    assert!(run.overall > 0.0, "{what}");
    if kind == Kind::BulkInsert {
        // Its fine windows are 25 ms here: a stall of the server (a slow
        // fdatasync) can leave most of them empty, so no rate is asserted.
        assert_eq!(s.sent, N, "{what}");
    } else {
        // A window opens with a completion, so every window counts one.
        assert_eq!(run.rate.windows, 3, "{what}");
        assert!(run.rate.per_sec > 0.0, "{what}");
    }
}

#[test]
fn trickling_client_runs_every_workload_in_kivaloos_shape_and_checks_every_answer() {
    let pairs = Pairs::new(N);
    for kind in Kind::ALL {
        let dir = tempfile::tempdir().unwrap();
        let (_server, addr) = serve(dir.path());
        if kind != Kind::BulkInsert {
            let load = trickle(&addr, &pairs, Kind::BulkInsert, &timing()).unwrap();
            assert_complete(Kind::BulkInsert, &load, "load");
        }
        let run = trickle(&addr, &pairs, kind, &timing())
            .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        assert_complete(kind, &run, "trickling");
        let s = &run.stats;
        // No burst: nothing written but 4 KiB buffers (kivaloo's write
        // buffer), however many requests were waiting.
        assert!(s.max_write <= WRITE_BUFFER, "{}: {s:?}", kind.name());
        if kind == Kind::BulkExtract {
            // One RANGE at a time, the read buffer grown to hold an answer.
            assert!(s.writes >= s.sent, "{s:?}");
        } else {
            assert!(s.max_read <= READ_BUFFER, "{}: {s:?}", kind.name());
            // Every request went out through counted writes: a request
            // packet is at least 65 bytes (a GET of a 40-byte key).
            assert!(
                s.writes * WRITE_BUFFER as u64 >= s.sent * 65,
                "{}: {s:?}",
                kind.name()
            );
        }
        if kind.timed() && kind != Kind::BulkExtract {
            assert!(
                s.sent > IN_FLIGHT as u64,
                "went on past the first burst: {s:?}"
            );
        }
    }
}

#[test]
fn bursty_client_runs_every_workload_and_checks_every_answer() {
    let pairs = Pairs::new(N);
    for kind in Kind::ALL {
        let dir = tempfile::tempdir().unwrap();
        let (_server, addr) = serve(dir.path());
        if kind != Kind::BulkInsert {
            trickle(&addr, &pairs, Kind::BulkInsert, &timing()).unwrap();
        }
        let run = bursty(&addr, &pairs, kind, &timing())
            .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        assert_complete(kind, &run, "bursty");
    }
}

#[test]
fn a_wrong_answer_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = serve(dir.path());
    let pairs = Pairs::new(N);
    trickle(&addr, &pairs, Kind::BulkInsert, &timing()).unwrap();
    // Bulk update rewrites the values, so the pairs' own are gone.
    trickle(&addr, &pairs, Kind::BulkUpdate, &timing()).unwrap();
    for kind in [Kind::RandomRead, Kind::BulkExtract] {
        let e = trickle(&addr, &pairs, kind, &timing()).expect_err(kind.name());
        assert!(e.0.contains(kind.name()), "{e}");
        let e = bursty(&addr, &pairs, kind, &timing()).expect_err(kind.name());
        assert!(e.0.contains(kind.name()), "{e}");
    }
    // A GET of a pair the store does not have is refused too.
    let more = Pairs::new(2 * N);
    let e = trickle(&addr, &more, Kind::RandomRead, &timing()).expect_err("missing pairs");
    assert!(e.0.contains("GET"), "{e}");
}

#[test]
fn an_unbuilt_kivaloo_is_refused_with_the_way_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(KIVI)
        .args(["bench", "--server", "-n", "10", "--kivaloo"])
        .arg(dir.path())
        .arg("--dir")
        .arg(dir.path().join("bench"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bench/kivaloo-build.sh"), "{err}");
}

/// kivaloo itself, from a built tree named by KIVALOO_DIR: both clients,
/// every workload, every answer checked. Ignored unless asked for (it needs
/// kivaloo built from source, bench/kivaloo-build.sh), so that a run
/// without kivaloo shows it as not run rather than passed.
#[test]
#[ignore = "needs kivaloo: KIVALOO_DIR=DIR cargo test --test bench_server -- --ignored"]
fn kivaloo_runs_every_workload() {
    let src = std::env::var_os("KIVALOO_DIR")
        .expect("KIVALOO_DIR names a kivaloo tree built by bench/kivaloo-build.sh");
    let src = Path::new(&src);
    Kivaloo::check(src).unwrap();
    let pairs = Pairs::new(N);
    for kind in Kind::ALL {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("w");
        let k = Kivaloo::start(src, &w).unwrap();
        let addr = k.socket.to_str().unwrap().to_string();
        if kind != Kind::BulkInsert {
            trickle(&addr, &pairs, Kind::BulkInsert, &timing()).unwrap();
        }
        let run = trickle(&addr, &pairs, kind, &timing())
            .unwrap_or_else(|e| panic!("kivaloo {}: {e}", kind.name()));
        assert_complete(kind, &run, "trickling");
        if kind != Kind::BulkInsert {
            let run = bursty(&addr, &pairs, kind, &timing())
                .unwrap_or_else(|e| panic!("kivaloo {}: {e}", kind.name()));
            assert_complete(kind, &run, "bursty");
        }
    }
}
