//! A background failure is logged (through `tracing`) with its step and its
//! error, and the store times its fdatasyncs (`Db::sync_times`).

use kivi::{Db, Options};
use kivi_storage::{Fault, SimOp, SimStorage};
use parking_lot::Mutex;
use std::io::Write;
use std::sync::Arc;

/// The log's lines, as the binary would write them.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failed_checkpoint_is_logged_with_its_step_and_error() {
    let log = Capture::default();
    let sink = log.clone();
    // Global: the checkpoint thread is not this one.
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .init();

    let sim = SimStorage::new();
    let db = Db::open_with_storage(Arc::new(sim.clone()), Options::default()).unwrap();
    for i in 0..100u32 {
        db.put(format!("key{i}").as_bytes(), b"value").unwrap();
    }
    let syncs = db.sync_times();
    assert!(syncs.commit_log.count() >= 100, "{syncs:?}");
    assert_eq!(
        syncs.commit_log.counts.len(),
        syncs.commit_log.bounds.len() + 1
    );

    // The page log's sync fails: the checkpoint does.
    sim.inject(Some(SimOp::Sync), 0, Fault::Io, true);
    assert!(db.checkpoint().is_err());
    sim.heal();

    let text = String::from_utf8(log.0.lock().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("checkpoint") && l.contains("ERROR"))
        .unwrap_or_else(|| panic!("no checkpoint error logged:\n{text}"));
    // A time (RFC 3339, UTC), the level, the step, the call that failed.
    assert!(
        line.as_bytes()[..4].iter().all(u8::is_ascii_digit),
        "{line}"
    );
    assert!(line.contains("Z ") || line.contains("Z  "), "{line}");
    assert!(line.contains("step=\"checkpoint"), "{line}");
    assert!(
        line.contains("fdatasync") && line.contains("injected EIO"),
        "{line}"
    );
    assert!(db
        .stats()
        .unwrap()
        .last_error
        .unwrap()
        .starts_with("checkpoint"));
    drop(db);
}
