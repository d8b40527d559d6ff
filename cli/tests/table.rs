//! End-to-end tests of `kivi table ...`: each runs the real binary.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const KIVI: &str = env!("CARGO_BIN_EXE_kivi");

fn run(args: &[&str], input: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(KIVI);
    cmd.args(args);
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run kivi");
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = run(args, None);
    assert!(
        out.status.success(),
        "kivi {args:?} failed with {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tables/testdata/sparkey")
        .join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn dump_of_every_fixture_equals_its_tsv() {
    for name in [
        "plain",
        "deletes",
        "snappy",
        "zstd",
        "binary",
        "binary_snappy",
        "binary_zstd",
        "hash64",
        "empty",
        "single",
        "full3",
        "incremental",
    ] {
        let base = fixture(name);
        let want = std::fs::read_to_string(base.with_extension("tsv")).unwrap();
        assert_eq!(ok(&["table", "dump", s(&base)]), want, "{name}");
        let v = ok(&["table", "verify", s(&base)]);
        assert!(
            v.starts_with("ok:") && v.contains("structural only"),
            "{name}: {v}"
        );
    }
}

#[test]
fn create_get_info_verify_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tsv");
    std::fs::write(&input, "a\t1\nbb\t22\na\t333\n\tempty key\n").unwrap();
    for c in ["none", "snappy", "zstd"] {
        let base = dir.path().join(format!("t-{c}"));
        let out = ok(&[
            "table",
            "create",
            s(&base),
            s(&input),
            "--compression",
            c,
            "--block-size",
            "16",
        ]);
        assert!(out.contains("3 live pairs"), "{out}");
        assert_eq!(ok(&["table", "get", s(&base), "a"]), "333\n");
        assert_eq!(ok(&["table", "get", s(&base), ""]), "empty key\n");
        assert_eq!(
            run(&["table", "get", s(&base), "zz"], None).status.code(),
            Some(1)
        );
        assert_eq!(
            ok(&["table", "dump", s(&base)]),
            "bb\t22\na\t333\n\tempty\\x20key\n"
        );
        assert!(ok(&["table", "info", s(&base)]).contains("Num entries: 3, Capacity: 5"));
        assert!(ok(&["table", "verify", s(&base)]).contains("checksummed"));
        let copy = dir.path().join(format!("copy-{c}"));
        ok(&["table", "rewrite", s(&base), s(&copy)]);
        assert_eq!(
            ok(&["table", "dump", s(&copy)]),
            "bb\t22\na\t333\n\tempty\\x20key\n"
        );
    }
    // Standard input and hex.
    let base = dir.path().join("hex");
    let out = run(
        &["--hex", "table", "create", s(&base)],
        Some(b"00ff\t0a0b\n"),
    );
    assert!(out.status.success());
    assert_eq!(ok(&["--hex", "table", "get", s(&base), "00ff"]), "0a0b\n");
    assert_eq!(ok(&["--hex", "table", "dump", s(&base)]), "00ff\t0a0b\n");
}

#[test]
fn verify_names_a_flipped_byte_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tsv");
    std::fs::write(&input, "key\tvalue\n").unwrap();
    let base = dir.path().join("t");
    ok(&["table", "create", s(&base), s(&input)]);
    let spl = base.with_extension("spl");
    let mut b = std::fs::read(&spl).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1; // inside the value: only the checksums can see it
    std::fs::write(&spl, &b).unwrap();
    let out = run(&["table", "verify", s(&base)], None);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("checksum mismatch"), "{text}");
}

#[test]
fn bad_input_is_refused_without_leaving_files() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("t");
    let out = run(&["table", "create", s(&base)], Some(b"no tab here\n"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no TAB"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let out = run(&["table", "get", s(&dir.path().join("missing")), "k"], None);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn export_writes_a_snapshot_of_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let input = dir.path().join("in.tsv");
    std::fs::write(&input, "k1\tv1\nk2\tv2\nk3\tv3\n").unwrap();
    ok(&["-d", s(&store), "load", s(&input)]);
    ok(&["-d", s(&store), "del", "k2"]);
    let base = dir.path().join("t");
    ok(&[
        "-d",
        s(&store),
        "table",
        "export",
        s(&base),
        "--compression",
        "snappy",
    ]);
    assert_eq!(ok(&["table", "dump", s(&base)]), "k1\tv1\nk3\tv3\n");
    assert!(ok(&["table", "verify", s(&base)]).starts_with("ok:"));
}

#[test]
fn an_existing_table_is_replaced_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tsv");
    std::fs::write(&input, "k\tfirst\n").unwrap();
    let base = dir.path().join("t");
    ok(&["table", "create", s(&base), s(&input)]);
    std::fs::write(&input, "k\tsecond\n").unwrap();
    for args in [
        vec!["table", "create", s(&base), s(&input)],
        vec!["table", "rewrite", s(&base), s(&base)],
    ] {
        let out = run(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("exists; give --force"), "{err}");
        assert_eq!(ok(&["table", "get", s(&base), "k"]), "first\n");
    }
    let store = dir.path().join("store");
    ok(&["-d", s(&store), "put", "k", "exported"]);
    let out = run(&["-d", s(&store), "table", "export", s(&base)], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(ok(&["table", "get", s(&base), "k"]), "first\n");
    ok(&["table", "create", s(&base), s(&input), "--force"]);
    assert_eq!(ok(&["table", "get", s(&base), "k"]), "second\n");
    ok(&["-d", s(&store), "table", "export", s(&base), "--force"]);
    assert_eq!(ok(&["table", "get", s(&base), "k"]), "exported\n");
}

#[test]
fn rewrite_keeps_the_sources_compression_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tsv");
    let lines: String = (0..2000)
        .map(|i| format!("key{i}\tvalue {i} {}\n", "x".repeat(50)))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let base = dir.path().join("t");
    ok(&[
        "table",
        "create",
        s(&base),
        s(&input),
        "--compression",
        "zstd",
        "--block-size",
        "8192",
    ]);
    let info = |b: &Path| ok(&["table", "info", s(b)]);
    assert!(
        info(&base).contains("Compression: zstd, block size: 8192"),
        "{}",
        info(&base)
    );
    let kept = dir.path().join("kept");
    ok(&["table", "rewrite", s(&base), s(&kept)]);
    assert!(
        info(&kept).contains("Compression: zstd, block size: 8192"),
        "{}",
        info(&kept)
    );
    let size = |b: &Path| std::fs::metadata(b.with_extension("spl")).unwrap().len();
    assert!(
        size(&kept) <= size(&base),
        "{} > {}",
        size(&kept),
        size(&base)
    );
    let snappy = dir.path().join("snappy");
    ok(&[
        "table",
        "rewrite",
        s(&base),
        s(&snappy),
        "--compression",
        "snappy",
    ]);
    assert!(
        info(&snappy).contains("Compression: snappy, block size: 8192"),
        "{}",
        info(&snappy)
    );
    let plain = dir.path().join("plain");
    ok(&[
        "table",
        "rewrite",
        s(&base),
        s(&plain),
        "--compression",
        "none",
    ]);
    assert!(
        info(&plain).contains("Compression: none"),
        "{}",
        info(&plain)
    );
    assert!(size(&plain) > size(&base));
    for b in [&kept, &snappy, &plain] {
        assert_eq!(
            ok(&["table", "get", s(b), "key1999"]),
            format!("value 1999 {}\n", "x".repeat(50))
        );
    }
}

#[test]
fn dump_output_creates_the_same_table() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["binary", "plain"] {
        let dumped = ok(&["table", "dump", s(&fixture(name))]);
        let base = dir.path().join(name);
        let out = run(&["table", "create", s(&base)], Some(dumped.as_bytes()));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(ok(&["table", "dump", s(&base)]), dumped, "{name}");
    }
    // --raw takes a backslash as itself.
    let base = dir.path().join("raw");
    let out = run(
        &["table", "create", s(&base), "--raw"],
        Some(b"a\\x41\tv\n"),
    );
    assert!(out.status.success());
    assert_eq!(ok(&["table", "get", s(&base), "a\\x41"]), "v\n");
}
