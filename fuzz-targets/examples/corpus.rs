//! Writes the fuzz targets' corpora, `fuzz/corpus/<target>/`, from real
//! inputs: bytes kivi writes (a store's segments and identity, its pages,
//! sealed tables, object-store entries and leases) and requests as clients
//! send them. Run it again after a format change:
//!
//! ```text
//! cargo run -p kivi-fuzz-targets --example corpus
//! ```
//!
//! Each target's folder is emptied first; the inputs are small (a few KB to
//! a few hundred KB a target), so that they can be committed.

use kivi::storage::{MemoryStorage, Storage};
use kivi::{Clock, Db, Options, WriteBatch};
use kivi_fuzz_targets::layout::format::{
    chunk_name, created_name, encode_entry, log_name, Entry, EntryKind,
};
use kivi_fuzz_targets::layout::lease::Lease;
use kivi_fuzz_targets::layout::{at_prefix, segment_id};
use kivi_kvlds_wire::{packet, request};
use kivi_log::{
    decode_record_at, CheckpointRecord, PageRef, RecordType, ANY_DEADLINE, RECORD_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};
use kivi_tables::{Compression, TableWriter, WriterOptions};
use kivi_tree::DiskRef;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Writes one target's corpus.
struct Corpus {
    dir: PathBuf,
    count: usize,
}

impl Corpus {
    fn new(root: &Path, target: &str) -> Corpus {
        let dir = root.join(target);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("corpus folder");
        Corpus { dir, count: 0 }
    }

    fn add(&mut self, name: &str, bytes: &[u8]) {
        self.count += 1;
        let name = name.replace(':', "-");
        let file = self.dir.join(format!("{:03}-{name}", self.count));
        std::fs::write(file, bytes).expect("corpus file");
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    resp(&mut Corpus::new(&root, "resp_request"));
    kvlds(&root);
    let stores = [store(false), store(true)];
    log_records(&root, &stores[0]);
    segments(&root, &stores);
    tree(&root, &stores[0]);
    identity(&mut Corpus::new(&root, "engine_identity"), &stores[0]);
    tables(&root);
    objects(&root);
    println!("corpora written to {}", root.display());
}

/// A command as client libraries send it: an array of bulk strings.
fn array(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn resp(c: &mut Corpus) {
    c.add("set", &array(&[b"SET", b"user:1", b"ada"]));
    c.add(
        "redis-py-connect",
        &[
            array(&[b"CLIENT", b"SETINFO", b"LIB-NAME", b"redis-py"]),
            array(&[b"CLIENT", b"SETINFO", b"LIB-VER", b"5.2.1"]),
            array(&[b"HELLO", b"3"]),
        ]
        .concat(),
    );
    c.add(
        "pipeline",
        &[
            array(&[b"SET", b"k", b"v", b"PX", b"1000", b"NX"]),
            array(&[b"GET", b"k"]),
            array(&[b"INCRBY", b"counter", b"-5"]),
            array(&[b"MGET", b"a", b"b", b"c"]),
            array(&[b"DEL", b"k", b"counter"]),
        ]
        .concat(),
    );
    c.add(
        "transaction",
        &[
            array(&[b"WATCH", b"balance"]),
            array(&[b"MULTI"]),
            array(&[b"DECRBY", b"balance", b"10"]),
            array(&[b"RPUSH", b"log", b"spent 10"]),
            array(&[b"EXEC"]),
        ]
        .concat(),
    );
    c.add(
        "scan-and-hash",
        &[
            array(&[b"SCAN", b"0", b"MATCH", b"user:*", b"COUNT", b"100"]),
            array(&[b"HSET", b"h", b"f1", b"v1", b"f2", b"v2"]),
            array(&[b"EXPIRE", b"h", b"60"]),
            array(&[b"CONFIG", b"GET", b"appendfsync"]),
        ]
        .concat(),
    );
    c.add(
        "binary-value",
        &array(&[b"SET", b"\x00\xff\r\n", &[7u8; 1500]]),
    );
    c.add(
        "empty-and-null-arrays",
        b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n",
    );
    c.add(
        "inline",
        b"PING\r\nSET greeting \"hello\\x21 \\\"you\\\"\\n\" 'it''s'\r\nGET greeting\n",
    );
    c.add("inline-telnet", b"  set   a   b  \r\n\r\nquit\r\n");
    c.add(
        "cut-mid-bulk",
        &array(&[b"SET", b"key", b"a value cut short"])[..25],
    );
}

fn kvlds(root: &Path) {
    let mut records = Corpus::new(root, "kvlds_request");
    let mut packets = Corpus::new(root, "kvlds_packet");
    let record = |ty: u32, fields: &[&[u8]]| {
        let mut out = ty.to_be_bytes().to_vec();
        for f in fields {
            request::push_string(&mut out, f);
        }
        out
    };
    let mut range = request::RANGE.to_be_bytes().to_vec();
    range.extend_from_slice(&65536u32.to_be_bytes());
    request::push_string(&mut range, b"a");
    request::push_string(&mut range, b"z");
    let all = [
        ("params", record(request::PARAMS, &[])),
        ("set", record(request::SET, &[b"key", b"value"])),
        ("cas", record(request::CAS, &[b"key", b"value", b"new"])),
        ("add", record(request::ADD, &[b"k", &[0xab; 255]])),
        ("modify", record(request::MODIFY, &[b"k", b""])),
        ("delete", record(request::DELETE, &[b"key"])),
        ("cad", record(request::CAD, &[b"key", b"value"])),
        ("get", record(request::GET, &[b"key"])),
        ("range", range),
    ];
    let mut pipeline = Vec::new();
    for (id, (name, rec)) in all.iter().enumerate() {
        records.add(name, rec);
        let mut p = Vec::new();
        packet::write(&mut p, id as u64, rec);
        packets.add(name, &p);
        pipeline.extend_from_slice(&p);
    }
    packets.add("pipeline", &pipeline);
    packets.add("cut", &pipeline[..pipeline.len() - 3]);
}

/// A store's files: its identity, and each segment's id and bytes.
struct Store {
    identity: Vec<u8>,
    segments: Vec<(u64, Vec<u8>)>,
}

/// Within a year of the clock the stores are written by.
const NOW: u64 = 1_000_000_000_000;

fn key(i: u32) -> Vec<u8> {
    format!("user:{i:05}").into_bytes()
}

/// A store written the way kivi writes one: commits, big values (blobs),
/// deadlines, deletes, checkpoints with delta pages, reopened (a new
/// commit segment each time); `clear`ed once too if asked.
fn store(clear: bool) -> Store {
    let storage = MemoryStorage::new();
    let opts = Options {
        page_size: 512,
        cache_bytes: 1 << 20,
        write_buffer_bytes: 1 << 20,
        clock: Clock::manual(NOW),
        // No cleaning: a leaf whose page the cleaner moves is written
        // whole, not as a delta.
        space_amplification_max: 1000.0,
        ..Options::default()
    };
    let open = || Db::open_with_storage(Arc::new(storage.clone()), opts.clone()).expect("open");
    let db = open();
    for round in 0..3u32 {
        let mut b = WriteBatch::new();
        for i in (round * 60)..(round * 60 + 60) {
            let value = if i % 37 == 0 {
                vec![b'B'; 1500] // a blob
            } else {
                format!("value {i} of round {round}").into_bytes()
            };
            b.put(key(i), value).expect("batch");
        }
        db.write(b).expect("write");
    }
    let deadline = kivi::Deadline::from_unix_millis(NOW + 365 * 86_400_000);
    db.put_with_deadline(b"session:1", b"token", Some(deadline))
        .expect("put");
    db.checkpoint().expect("checkpoint");
    db.close().expect("close");
    // A few changes over leaves read back from disk: delta pages at the
    // next checkpoint.
    let db = open();
    db.put(&key(3), b"changed").expect("put");
    db.delete(&key(70)).expect("delete");
    db.put(&key(150), b"changed too").expect("put");
    db.put(&key(500), b"new").expect("put");
    db.checkpoint().expect("checkpoint");
    db.put(&key(4), b"after the checkpoint").expect("put");
    db.close().expect("close");
    let db = open();
    if clear {
        db.clear().expect("clear");
    }
    db.put(b"reopened", b"yes").expect("put");
    db.delete(&key(5)).expect("delete");
    db.close().expect("close");
    let segments = storage
        .list_segments()
        .expect("list")
        .into_iter()
        .map(|id| {
            let r = storage.open_segment(id).expect("open segment");
            let mut bytes = vec![0; r.size().expect("size") as usize];
            r.read_at(0, &mut bytes).expect("read");
            (id, bytes)
        })
        .collect();
    Store {
        identity: storage.read_meta("KIVI").expect("meta").expect("identity"),
        segments,
    }
}

/// The records of a segment: offset, type, body.
fn records(id: u64, bytes: &[u8]) -> Vec<(usize, RecordType, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Ok((ty, body, len)) = decode_record_at(&bytes[at..], id, at as u64) {
        out.push((at, ty, body));
        at += len;
    }
    out
}

/// Records of every type, raw (with their address) and as type and body.
fn log_records(root: &Path, store: &Store) {
    let mut raw = Corpus::new(root, "log_record");
    let mut bodies = Corpus::new(root, "log_record_body");
    let mut taken: BTreeMap<u8, usize> = BTreeMap::new();
    for (id, bytes) in &store.segments {
        for (at, ty, body) in records(*id, bytes) {
            let n = taken.entry(ty as u8).or_default();
            if *n >= 6 {
                continue;
            }
            *n += 1;
            let name = format!("{ty:?}-{id}-{at}").to_lowercase();
            let mut input = (*id as u32).to_le_bytes().to_vec();
            input.extend_from_slice(&(at as u32).to_le_bytes());
            input.extend_from_slice(&bytes[at..at + RECORD_HEADER_LEN + body.len()]);
            raw.add(&name, &input);
            bodies.add(&name, &[&[ty as u8][..], body].concat());
        }
    }
}

/// Whole segments, and whole stores.
fn segments(root: &Path, stores: &[Store]) {
    let mut segs = Corpus::new(root, "log_segment");
    for (id, bytes) in &stores[0].segments {
        // The newest segment is scanned for its tail; the others to the end.
        for flags in [0u8, 1, 2] {
            segs.add(
                &format!("segment-{id}-flags-{flags}"),
                &[&[flags][..], bytes].concat(),
            );
        }
        let torn = &bytes[..bytes.len() - bytes.len().min(5)];
        segs.add(&format!("segment-{id}-torn"), &[&[0u8][..], torn].concat());
    }
    let mut recovery = Corpus::new(root, "store_recovery");
    for (n, store) in stores.iter().enumerate() {
        let all: Vec<u8> = store.segments.iter().flat_map(|(_, b)| b.clone()).collect();
        for flags in [0u8, 1, 2] {
            recovery.add(
                &format!("store-{n}-flags-{flags}"),
                &[&[flags][..], &all].concat(),
            );
        }
        // The target finds each segment's id in its header.
        for (id, bytes) in &store.segments {
            assert_eq!(segment_id(bytes), Some(*id));
        }
    }
}

/// The pages of the newest checkpoint's tree, each with the reference it
/// is read through: the walk recovery and `check` make.
fn tree(root: &Path, store: &Store) {
    let mut pages = Corpus::new(root, "tree_page");
    let mut deltas = Corpus::new(root, "tree_delta");
    let checkpoint = store
        .segments
        .iter()
        .flat_map(|(id, b)| records(*id, b))
        .filter(|(_, ty, _)| *ty == RecordType::Checkpoint)
        .map(|(_, _, body)| CheckpointRecord::decode(body).expect("checkpoint"))
        .next_back()
        .expect("a checkpoint");
    let root_page = checkpoint.root.expect("a tree");
    let mut todo = vec![(
        checkpoint.root_level,
        DiskRef {
            page: root_page,
            subtree: checkpoint.tree_bytes,
            oldest: checkpoint.root_oldest,
            earliest: ANY_DEADLINE,
        },
    )];
    let (mut leaves, mut internals) = (0, 0);
    while let Some((level, at)) = todo.pop() {
        let (ty, body) = record_at(store, at.page);
        let input = [at_prefix(level, at), body.to_vec()].concat();
        if ty == RecordType::Delta {
            let node = kivi_tree::fuzzing::decode_delta(body, at).expect("a delta page");
            deltas.add(&format!("delta-{}", at.page.addr), &input);
            todo.push((0, kivi_tree::fuzzing::delta_base(&node).expect("its base")));
            continue;
        }
        let node = kivi_tree::fuzzing::decode_page(body, at, level).expect("a page");
        if level == 0 {
            leaves += 1;
            if leaves > 12 {
                continue;
            }
        } else {
            internals += 1;
            for i in 0..node.children_len() {
                todo.push((level - 1, node.child_ref(i).page().expect("on disk")));
            }
        }
        pages.add(&format!("level-{level}-{}", at.page.addr), &input);
    }
    assert!(
        internals > 0 && deltas.count > 0,
        "a tree of levels and deltas"
    );
}

/// The type and body of the record `page` names.
fn record_at(store: &Store, page: PageRef) -> (RecordType, &[u8]) {
    let (id, bytes) = store
        .segments
        .iter()
        .find(|(id, _)| *id == u64::from(page.addr.segment))
        .expect("the segment of a page");
    let at = page.addr.offset as usize;
    let (ty, body, _) = decode_record_at(&bytes[at..], *id, at as u64).expect("a record");
    assert!(at as u64 >= SEGMENT_HEADER_LEN);
    (ty, body)
}

fn identity(c: &mut Corpus, store: &Store) {
    c.add("identity", &store.identity);
    let text = String::from_utf8(store.identity.clone()).expect("text");
    let current = format!("format {}", kivi_log::FORMAT_VERSION);
    for old in [3, 4] {
        c.add(
            &format!("format-{old}"),
            text.replace(&current, &format!("format {old}")).as_bytes(),
        );
    }
}

/// Sealed tables of each compression, with deletes and an overwrite.
fn tables(root: &Path) {
    let mut open = Corpus::new(root, "table_open");
    let mut headers = Corpus::new(root, "table_headers");
    let mut blocks = Corpus::new(root, "table_block");
    let dir = tempfile::tempdir().expect("temporary directory");
    for (name, compression, block_size) in [
        ("none", Compression::None, 0),
        ("snappy", Compression::Snappy, 256),
        ("zstd", Compression::Zstd, 512),
    ] {
        let base = dir.path().join(name);
        let opts = WriterOptions {
            compression,
            block_size: block_size.max(16),
            ..WriterOptions::default()
        };
        let mut w = TableWriter::create(&base, opts).expect("table");
        for i in 0..40u32 {
            let value = format!("value {i} {}", "x".repeat((i % 7) as usize * 20));
            w.put(&key(i), value.as_bytes()).expect("put");
        }
        w.put(&key(3), b"overwritten").expect("put");
        w.delete(&key(4)).expect("delete");
        w.put(&key(1000), &[0x5a; 300]).expect("put");
        w.finish().expect("finish");
        let (log, index) = kivi_tables::table_paths(&base);
        let log = std::fs::read(log).expect("log");
        let index = std::fs::read(index).expect("index");
        let sidecar = std::fs::read(kivi_tables::sidecar_path(&base)).expect("sidecar");
        open.add(name, &[&[0u8][..], &log, &index, &sidecar].concat());
        open.add(
            &format!("{name}-no-sidecar"),
            &[&[0u8][..], &log, &index].concat(),
        );
        open.add(
            &format!("{name}-build"),
            &[&[3u8][..], &log, &index].concat(),
        );
        let file_len = |n: usize| (n as u64).to_le_bytes();
        headers.add(
            &format!("{name}-log"),
            &[&[0u8][..], &file_len(log.len()), &log[..84]].concat(),
        );
        headers.add(
            &format!("{name}-index"),
            &[&[1u8][..], &file_len(index.len()), &index[..112]].concat(),
        );
        headers.add(
            &format!("{name}-sidecar"),
            &[&[2u8][..], &[0; 8], &sidecar].concat(),
        );
        if compression != Compression::None {
            // The blocks: each a VLQ length, then the compressed bytes.
            let kind = if compression == Compression::Snappy {
                1u8
            } else {
                2
            };
            let mut at = 84;
            for n in 0..4 {
                let Ok((len, hdr)) = kivi_tables::vlq::decode(&log[at..]) else {
                    break;
                };
                let block = &log[at + hdr..at + hdr + len as usize];
                let max = (block_size as u16).to_le_bytes();
                blocks.add(
                    &format!("{name}-block-{n}"),
                    &[&[kind][..], &max, block].concat(),
                );
                at += hdr + len as usize;
                if at >= log.len() {
                    break;
                }
            }
        }
    }
    for v in [0u64, 127, 128, 300, 1 << 35, u64::MAX] {
        let mut out = vec![0u8, 0, 0];
        kivi_tables::vlq::encode(v, &mut out);
        blocks.add(&format!("vlq-{v}"), &out);
    }
    blocks.add("plain", b"\x03\x00\x01uncompressed bytes");
}

fn objects(root: &Path) {
    let mut entries = Corpus::new(root, "object_log_entry");
    let writer = *b"0123456789abcdef";
    let payload = b"a commit segment's appended bytes";
    for (kind, segment, offset, payload) in [
        (EntryKind::Fence, 0, 64, &b""[..]),
        (EntryKind::Create, 3, 0, &b""[..]),
        (EntryKind::Data, 3, 62, &payload[..]),
        (EntryKind::Delete, 2, 0, &b""[..]),
    ] {
        let e = Entry {
            kind,
            epoch: 12,
            writer,
            segment,
            offset,
            payload_len: payload.len() as u64,
            time_ms: NOW,
        };
        entries.add(
            &format!("{kind:?}").to_lowercase(),
            &[&[0u8][..], &encode_entry(&e, payload)].concat(),
        );
    }
    let mut leases = Corpus::new(root, "object_lease");
    let lease = Lease {
        writer,
        epoch: 640,
        renewal: 7,
        time_ms: NOW,
        note: "10.0.0.7:6380".into(),
    };
    leases.add("lease", &[&[0u8][..], &lease.encode()].concat());
    let quiet = Lease {
        note: String::new(),
        ..lease
    };
    leases.add("lease-no-note", &[&[0u8][..], &quiet.encode()].concat());
    for name in [log_name(1234), created_name(7), chunk_name(7, 8 << 20)] {
        leases.add("name", &[&[1u8][..], name.as_bytes()].concat());
    }
}
