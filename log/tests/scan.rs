//! A torn tail is cut off; damage anywhere else is reported with its place.

use kivi_log::{
    scan_segment, RecordType, ScanEnd, SegmentAppender, SegmentKind, SEGMENT_HEADER_LEN,
};
use kivi_storage::{SimStorage, Storage};

fn write_records(sim: &SimStorage, n: usize) -> Vec<u64> {
    let mut app = SegmentAppender::create(sim, 1, [1; 16], SegmentKind::Commits, None).unwrap();
    let mut offsets = Vec::new();
    for i in 0..n {
        let synced = app.synced_len();
        let r = app
            .append_record(RecordType::Commit, |b| body(b, synced, i))
            .unwrap();
        app.sync().unwrap();
        offsets.push(u64::from(r.addr.offset));
    }
    offsets
}

/// A commit-like body: the synced-through claim, then some text.
fn body(out: &mut Vec<u8>, synced_through: u64, i: usize) {
    out.extend_from_slice(&synced_through.to_le_bytes());
    out.extend_from_slice(format!("record {i}").as_bytes());
}

fn scan_all(sim: &SimStorage, end: ScanEnd) -> Result<(Vec<String>, Option<u64>), kivi_log::Error> {
    let reader = sim.open_segment(1).unwrap();
    let mut scan = scan_segment(reader, 1, "seg1".into(), end)?.expect("header present");
    let mut out = Vec::new();
    while let Some(r) = scan.next_record()? {
        out.push(String::from_utf8(r.body[8..].to_vec()).unwrap());
    }
    Ok((out, scan.torn_at()))
}

#[test]
fn torn_tail_is_cut_off() {
    let sim = SimStorage::new();
    write_records(&sim, 5);
    let full = sim.segment_bytes(1).unwrap();
    let mut app_tail = full.clone();
    // A partial sixth record: a header promising more bytes than exist.
    app_tail.extend_from_slice(&[1, 2, 3, 4, 100, 0, 0, 0, 2, 9, 9]);
    let torn = SimStorage::new();
    let mut w = torn.create_segment(1).unwrap();
    w.append(&app_tail).unwrap();
    let (records, torn_at) = scan_all(&torn, ScanEnd::Tail).unwrap();
    assert_eq!(records.len(), 5);
    assert_eq!(torn_at, Some(full.len() as u64));
    // The same bytes with an exact end before the tail read cleanly.
    let (records, torn_at) = scan_all(&torn, ScanEnd::Exact(full.len() as u64)).unwrap();
    assert_eq!((records.len(), torn_at), (5, None));
}

#[test]
fn damage_before_valid_records_is_corruption_not_a_tail() {
    let sim = SimStorage::new();
    let offsets = write_records(&sim, 5);
    sim.corrupt(1, offsets[2] as usize + 12, b"X");
    let err = scan_all(&sim, ScanEnd::Tail).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&format!("offset {}", offsets[2])), "{msg}");
    assert!(msg.contains("not a torn tail"), "{msg}");
    match scan_all(
        &sim,
        ScanEnd::Exact(sim.segment_bytes(1).unwrap().len() as u64),
    ) {
        Err(kivi_log::Error::Corrupt(c)) => {
            assert_eq!(c.offset, offsets[2], "{c}");
        }
        r => panic!("an exact scan over damage: expected corruption, got {r:?}"),
    }
}

#[test]
fn damage_in_the_last_record_is_a_torn_tail() {
    let sim = SimStorage::new();
    let offsets = write_records(&sim, 3);
    sim.corrupt(1, offsets[2] as usize + 10, b"X");
    let (records, torn_at) = scan_all(&sim, ScanEnd::Tail).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(torn_at, Some(offsets[2]));
}

#[test]
fn a_segment_shorter_than_its_successor_says_is_corruption() {
    let sim = SimStorage::new();
    write_records(&sim, 2);
    let len = sim.segment_bytes(1).unwrap().len() as u64;
    assert!(scan_all(&sim, ScanEnd::Exact(len + 10))
        .unwrap_err()
        .to_string()
        .contains("successor"));
}

#[test]
fn a_torn_header_means_an_empty_segment_only_at_the_tail() {
    let sim = SimStorage::new();
    let mut w = sim.create_segment(1).unwrap();
    w.append(&[0u8; 20]).unwrap();
    let reader = sim.open_segment(1).unwrap();
    assert!(scan_segment(reader.clone(), 1, "s".into(), ScanEnd::Tail)
        .unwrap()
        .is_none());
    // Before the tail, a successor says the segment is whole: 20 bytes are
    // too short for what it says...
    match scan_segment(reader, 1, "s".into(), ScanEnd::Exact(SEGMENT_HEADER_LEN)) {
        Err(kivi_log::Error::Corrupt(c)) => assert!(c.what.contains("successor"), "{c}"),
        Err(e) => panic!("a short segment before the tail: expected corruption, got {e}"),
        Ok(_) => panic!("a short segment before the tail was accepted"),
    }
    // ...and a header's worth of zeros is not a header.
    w.append(&vec![0u8; SEGMENT_HEADER_LEN as usize - 20])
        .unwrap();
    let reader = sim.open_segment(1).unwrap();
    match scan_segment(reader, 1, "s".into(), ScanEnd::Exact(SEGMENT_HEADER_LEN)) {
        Err(kivi_log::Error::Corrupt(c)) => {
            assert_eq!(c.offset, 0, "{c}");
            assert!(c.what.contains("segment header"), "{c}");
        }
        Err(e) => panic!("a torn header before the tail: expected corruption, got {e}"),
        Ok(_) => panic!("a torn header before the tail was accepted"),
    }
}

#[test]
fn without_fsync_a_lost_write_before_later_ones_is_a_tail() {
    // Three appends, none synced: the first is damaged (as if it never
    // reached the disk) while the later two did. Nothing says the damaged
    // bytes were durable, so they and everything after them are a tail.
    let sim = SimStorage::new();
    let mut app = SegmentAppender::create(&sim, 1, [1; 16], SegmentKind::Commits, None).unwrap();
    let mut offsets = Vec::new();
    for i in 0..3 {
        let synced = app.synced_len();
        let r = app
            .append_record(RecordType::Commit, |b| body(b, synced, i))
            .unwrap();
        offsets.push(u64::from(r.addr.offset));
    }
    sim.corrupt(1, offsets[0] as usize + 12, b"X");
    let (records, torn_at) = scan_all(&sim, ScanEnd::Tail).unwrap();
    assert!(records.is_empty());
    assert_eq!(torn_at, Some(offsets[0]));
    // Once a later record says the first was synced, the same damage is corruption.
    let sim = SimStorage::new();
    let mut app = SegmentAppender::create(&sim, 1, [1; 16], SegmentKind::Commits, None).unwrap();
    let first = app
        .append_record(RecordType::Commit, |b| body(b, SEGMENT_HEADER_LEN, 0))
        .unwrap();
    app.sync().unwrap();
    let synced = app.synced_len();
    app.append_record(RecordType::Commit, |b| body(b, synced, 1))
        .unwrap();
    sim.corrupt(1, first.addr.offset as usize + 12, b"X");
    assert!(scan_all(&sim, ScanEnd::Tail)
        .unwrap_err()
        .to_string()
        .contains("not a torn tail"));
}
