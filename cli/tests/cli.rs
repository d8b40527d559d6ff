//! End-to-end tests: each runs the real `kivi` binary on a store in a
//! temporary directory and checks what it prints and how it exits.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::SystemTime;
use tempfile::TempDir;

const KIVI: &str = env!("CARGO_BIN_EXE_kivi");

/// A temporary directory with a store path inside it (not yet created).
struct Fixture {
    tmp: TempDir,
    store: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        Fixture { tmp, store }
    }

    /// Runs `kivi -d STORE ARGS...`.
    fn run(&self, args: &[&str]) -> Output {
        run_in(&self.store, args, None)
    }

    /// Runs it with `input` on standard input.
    fn run_with_input(&self, args: &[&str], input: &[u8]) -> Output {
        run_in(&self.store, args, Some(input))
    }

    /// Runs it and insists on success; returns standard output.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_success(&out, args);
        String::from_utf8(out.stdout).unwrap()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
}

fn run_in(store: &Path, args: &[&str], input: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(KIVI);
    cmd.arg("-d").arg(store).args(args);
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

fn assert_success(out: &Output, args: &[&str]) {
    assert!(
        out.status.success(),
        "kivi {args:?} failed with {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `count` lines `key00000<TAB>value-0`, ... in key order.
fn numbered_lines(count: usize) -> String {
    (0..count)
        .map(|i| format!("key{i:05}\tvalue-{i}\n"))
        .collect()
}

fn stats_json(f: &Fixture) -> serde_json::Value {
    serde_json::from_str(&f.ok(&["stats", "--json"])).expect("stats --json is JSON")
}

#[test]
fn put_get_del_round_trip() {
    let f = Fixture::new();
    f.ok(&["put", "greeting", "hello world"]);
    f.ok(&["put", "other", "x"]);
    assert_eq!(f.ok(&["get", "greeting"]), "hello world\n");
    f.ok(&["put", "greeting", "replaced"]);
    assert_eq!(f.ok(&["get", "greeting"]), "replaced\n");
    f.ok(&["del", "greeting"]);
    assert_eq!(f.run(&["get", "greeting"]).status.code(), Some(1));
    assert_eq!(f.ok(&["get", "other"]), "x\n");
    // Deleting an absent key is not an error.
    f.ok(&["del", "never-there"]);
}

#[test]
fn get_of_an_absent_key_exits_1_with_a_message() {
    let f = Fixture::new();
    f.ok(&["put", "a", "1"]);
    let out = f.run(&["get", "missing"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.starts_with("kivi: ") && err.contains("not found"),
        "{err}"
    );
    assert!(err.contains("missing"), "{err}");
}

#[test]
fn scan_honours_from_to_and_limit_in_key_order() {
    let f = Fixture::new();
    for k in ["d", "a", "c", "e", "b"] {
        f.ok(&["put", k, &format!("v{k}")]);
    }
    assert_eq!(f.ok(&["scan"]), "a\tva\nb\tvb\nc\tvc\nd\tvd\ne\tve\n");
    // --from is inclusive, --to exclusive.
    assert_eq!(
        f.ok(&["scan", "--from", "b", "--to", "d"]),
        "b\tvb\nc\tvc\n"
    );
    assert_eq!(f.ok(&["scan", "--from", "c"]), "c\tvc\nd\tvd\ne\tve\n");
    assert_eq!(f.ok(&["scan", "--to", "b"]), "a\tva\n");
    assert_eq!(f.ok(&["scan", "--limit", "2"]), "a\tva\nb\tvb\n");
    assert_eq!(
        f.ok(&["scan", "--from", "b", "--limit", "2"]),
        "b\tvb\nc\tvc\n"
    );
    assert_eq!(f.ok(&["scan", "--limit", "0"]), "");
}

#[test]
fn load_from_a_file_commits_every_1000_lines_and_scan_shows_them_all() {
    let f = Fixture::new();
    let lines = numbered_lines(2500);
    let file = f.path("pairs.tsv");
    fs::write(&file, &lines).unwrap();
    let said = f.ok(&["load", file.to_str().unwrap()]);
    assert!(
        said.contains("2500 pairs") && said.contains("3 durable commits"),
        "{said}"
    );
    assert_eq!(f.ok(&["scan"]), lines);
    let stats = stats_json(&f);
    assert_eq!(stats["pairs"], 2500);
    // One commit per 1,000 lines: sequence numbers count commits.
    assert_eq!(stats["seq"], 3, "{stats}");
    // Space amplification is file bytes over live bytes, in both forms.
    let (file, live) = (
        stats["file_bytes"].as_f64().unwrap(),
        stats["live_bytes"].as_f64().unwrap(),
    );
    assert!(live > 0.0 && file >= live, "{stats}");
    let amp = stats["space_amplification"].as_f64().expect("a number");
    assert!((amp - file / live).abs() < 1e-9, "{stats}");
    let human = f.ok(&["stats"]);
    assert!(
        human.contains(&format!(
            "space amplification  {amp:.2}x (file bytes / live bytes)"
        )),
        "{human}"
    );
}

#[test]
fn load_from_standard_input_commits_in_batches() {
    let f = Fixture::new();
    let lines = numbered_lines(1500);
    let out = f.run_with_input(&["load"], lines.as_bytes());
    assert_success(&out, &["load"]);
    assert_eq!(f.ok(&["scan"]), lines);
    assert_eq!(stats_json(&f)["seq"], 2);
    // `-` means standard input too; values may hold TABs, and a final
    // line without a newline counts.
    let out = f.run_with_input(&["load", "-"], b"tabbed\ta\tb\nlast\tone");
    assert_success(&out, &["load", "-"]);
    assert_eq!(f.ok(&["get", "tabbed"]), "a\tb\n");
    assert_eq!(f.ok(&["get", "last"]), "one\n");
}

#[test]
fn load_accepts_a_trailing_empty_line_and_names_the_line_without_a_tab() {
    let f = Fixture::new();
    let out = f.run_with_input(&["load"], b"a\t1\nb\t2\n\n");
    assert_success(&out, &["load"]);
    assert_eq!(f.ok(&["scan"]), "a\t1\nb\t2\n");

    let mut input = numbered_lines(1200).into_bytes();
    input.extend_from_slice(b"no tab here\nz\t9\n");
    let out = f.run_with_input(&["load"], &input);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("line 1201") && err.contains("TAB"), "{err}");
    // The first full batch was committed before the bad line was read.
    assert!(err.contains("first 1000 pairs were stored"), "{err}");
    assert_eq!(f.run(&["get", "z"]).status.code(), Some(1));
}

#[test]
fn load_of_a_missing_file_is_a_clear_error() {
    let f = Fixture::new();
    let missing = f.path("nope.tsv");
    let out = f.run(&["load", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("nope.tsv") && err.contains("No such file"),
        "{err}"
    );
}

#[test]
fn hex_round_trips_binary_keys_and_values() {
    let f = Fixture::new();
    let key = b"k\t\n\0\xff";
    let value = b"\n\tv\x00\x80\r";
    let (hk, hv) = (hex(key), hex(value));
    f.ok(&["--hex", "put", &hk, &hv]);
    assert_eq!(f.ok(&["--hex", "get", &hk]), format!("{hv}\n"));
    assert_eq!(f.ok(&["--hex", "scan"]), format!("{hk}\t{hv}\n"));
    // With --raw (and without --hex) the bytes come out unchanged.
    let out = f.run(&["scan", "--raw"]);
    assert_eq!(out.stdout, [&key[..], b"\t", value, b"\n"].concat());

    // A load file in hex, with upper-case digits and a CRLF line end.
    let file = f.path("hex.tsv");
    fs::write(&file, "00FF0A\t090A\r\n01\t\n").unwrap();
    f.ok(&["--hex", "load", file.to_str().unwrap()]);
    assert_eq!(f.ok(&["--hex", "get", "00ff0a"]), "090a\n");
    assert_eq!(f.ok(&["--hex", "get", "01"]), "\n");

    let out = f.run(&["--hex", "get", "0g"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not valid hex"), "{}", stderr(&out));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn check_is_quiet_and_successful_on_a_healthy_store() {
    let f = Fixture::new();
    let file = f.path("pairs.tsv");
    fs::write(&file, numbered_lines(3000)).unwrap();
    f.ok(&["load", file.to_str().unwrap()]);
    let out = f.run(&["check"]);
    assert_success(&out, &["check"]);
    let said = stdout(&out);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.starts_with("ok") && said.contains("3000 pairs"),
        "{said}"
    );
}

#[test]
fn check_names_the_segment_with_a_flipped_byte() {
    let f = Fixture::new();
    let file = f.path("pairs.tsv");
    fs::write(&file, numbered_lines(5000)).unwrap();
    f.ok(&["load", file.to_str().unwrap()]);
    f.ok(&["check"]);
    let seg = largest_segment(&f.store);
    let mut bytes = fs::read(&seg).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&seg, bytes).unwrap();

    let out = f.run(&["check"]);
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(1), "1 is only for a missing key");
    let said = stdout(&out) + &stderr(&out);
    let name = seg.file_name().unwrap().to_str().unwrap();
    assert!(said.contains(name), "check did not name {name}: {said}");
    assert!(stderr(&out).contains("found"), "{said}");
}

fn largest_segment(dir: &Path) -> PathBuf {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .expect("the store has segments")
}

#[test]
fn stats_json_counts_the_pairs() {
    let f = Fixture::new();
    for i in 0..7 {
        f.ok(&["put", &format!("k{i}"), "v"]);
    }
    f.ok(&["del", "k3"]);
    let stats = stats_json(&f);
    assert_eq!(stats["pairs"], 6, "{stats}");
    for field in [
        "live_bytes",
        "file_bytes",
        "segments",
        "tree_height",
        "cache_bytes",
    ] {
        assert!(stats[field].is_u64(), "{field} missing: {stats}");
    }
    assert!(stats["file_bytes"].as_u64().unwrap() > 0);
    let text = f.ok(&["stats"]);
    assert!(text.contains("pairs") && text.contains('6'), "{text}");
    assert!(text.contains("tree height"), "{text}");
}

#[test]
fn an_oversized_key_is_refused_with_the_limit() {
    let f = Fixture::new();
    let key = "k".repeat(4097);
    for args in [vec!["put", &key, "v"], vec!["get", &key], vec!["del", &key]] {
        let out = f.run(&args);
        assert_eq!(out.status.code(), Some(2), "{:?}", &args[0]);
        let err = stderr(&out);
        assert!(
            err.contains("4097") && err.contains("limit of 4096"),
            "{err}"
        );
    }
    // 4096 bytes is allowed.
    let key = "k".repeat(4096);
    f.ok(&["put", &key, "v"]);
    assert_eq!(f.ok(&["get", &key]), "v\n");
}

#[test]
fn a_directory_that_is_not_a_store_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("thesis.txt"), "years of work").unwrap();
    for args in [&["get", "k"][..], &["scan"], &["stats"], &["put", "k", "v"]] {
        let out = run_in(tmp.path(), args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("not a kivi store"),
            "{}",
            stderr(&out)
        );
    }
    let names: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        ["thesis.txt"],
        "kivi wrote into a stranger's directory"
    );
}

#[test]
fn a_file_given_as_the_store_directory_is_a_clear_error() {
    let f = Fixture::new();
    let file = f.path("plain-file");
    fs::write(&file, "x").unwrap();
    for args in [&["get", "k"][..], &["put", "k", "v"]] {
        let out = run_in(&file, args, None);
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        assert!(
            err.contains("plain-file") && err.contains("not a directory"),
            "{err}"
        );
    }
    assert_eq!(fs::read(&file).unwrap(), b"x");
}

#[test]
fn reading_commands_never_write_and_need_an_existing_store() {
    let f = Fixture::new();
    f.ok(&["put", "a", "1"]);
    f.ok(&["put", "b", "2"]);
    let before = listing(&f.store);
    f.ok(&["get", "a"]);
    f.ok(&["scan"]);
    f.ok(&["check"]);
    f.ok(&["stats"]);
    f.ok(&["stats", "--json"]);
    assert_eq!(
        listing(&f.store),
        before,
        "a reading command changed the store"
    );

    let absent = f.path("absent");
    let out = run_in(&absent, &["get", "a"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no such directory"),
        "{}",
        stderr(&out)
    );
    assert!(!absent.exists(), "a reading command created the store");
}

#[test]
fn only_commands_that_store_something_create_a_store() {
    let f = Fixture::new();
    let absent = f.path("mistyped");
    for args in [&["del", "a"][..], &["compact"], &["table", "export", "t"]] {
        let out = run_in(&absent, args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains(absent.to_str().unwrap()) && err.contains("no such directory"),
            "{args:?}: {err}"
        );
        assert!(!absent.exists(), "{args:?} created a store");
    }
    // put, load (and serve) make one.
    run_in(&absent, &["put", "a", "1"], None);
    assert!(absent.exists());
}

#[test]
fn keys_and_values_come_from_files_or_standard_input() {
    let f = Fixture::new();
    // Bigger than a command line can carry.
    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    let file = f.path("value.bin");
    fs::write(&file, &big).unwrap();
    f.ok(&["put", "big", "--value-file", file.to_str().unwrap()]);
    let out = f.run(&["get", "big"]);
    assert_success(&out, &["get", "big"]);
    assert_eq!(&out.stdout[..big.len()], &big[..]);
    let out = f.run_with_input(&["put", "piped", "--value-file", "-"], b"from\tstdin\n");
    assert_success(&out, &["put"]);
    assert_eq!(f.ok(&["get", "piped"]), "from\tstdin\n\n");
    let key = f.path("key.bin");
    fs::write(&key, b"a key\nwith a newline").unwrap();
    f.ok(&["put", "--key-file", key.to_str().unwrap(), "v"]);
    assert_eq!(f.ok(&["get", "--key-file", key.to_str().unwrap()]), "v\n");
    f.ok(&["del", "--key-file", key.to_str().unwrap()]);
    assert_eq!(
        f.run(&["get", "--key-file", key.to_str().unwrap()])
            .status
            .code(),
        Some(1)
    );
    // Too big, both from standard input, a missing file, a missing argument.
    let huge = f.path("huge.bin");
    fs::write(&huge, vec![0u8; (16 << 20) + 1]).unwrap();
    for (args, says) in [
        (
            vec!["put", "k", "--value-file", huge.to_str().unwrap()],
            "over 16777216 bytes",
        ),
        (
            vec!["put", "--key-file", huge.to_str().unwrap(), "v"],
            "over 4096 bytes",
        ),
        (
            vec!["put", "--key-file", "-", "--value-file", "-"],
            "cannot both read standard input",
        ),
        (
            vec!["put", "k", "--value-file", "/nonexistent/v"],
            "/nonexistent/v",
        ),
        (vec!["put", "k"], "put takes KEY and VALUE here"),
        (
            vec!["put", "k", "v", "--value-file", file.to_str().unwrap()],
            "KEY only",
        ),
    ] {
        let out = f.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(
        f.run(&["get", "k"]).status.code(),
        Some(1),
        "nothing stored under k"
    );
}

#[test]
fn scan_output_loads_back_into_the_same_pairs() {
    let f = Fixture::new();
    let pairs: &[(&[u8], &[u8])] = &[
        (b"tab\tkey", b"new\nline"),
        (b"back\\slash", b"cr\r and \x01 and \x7f"),
        ("héllo wörld".as_bytes(), b"plain value"),
        (b"x\\x41", b"\\n is not a newline"),
    ];
    for (k, v) in pairs {
        let (kf, vf) = (f.path("k"), f.path("v"));
        fs::write(&kf, k).unwrap();
        fs::write(&vf, v).unwrap();
        f.ok(&[
            "put",
            "--key-file",
            kf.to_str().unwrap(),
            "--value-file",
            vf.to_str().unwrap(),
        ]);
    }
    let out = f.ok(&["scan"]);
    assert_eq!(out.lines().count(), pairs.len(), "{out}");
    assert!(out.contains("héllo wörld\tplain value\n"), "{out}");
    assert!(out.contains("tab\\tkey\tnew\\nline\n"), "{out}");
    let copy = f.path("copy");
    let out2 = run_in(&copy, &["load"], Some(out.as_bytes()));
    assert_success(&out2, &["load"]);
    assert_eq!(run_in(&copy, &["scan"], None).stdout, out.as_bytes());
    for (k, v) in pairs {
        let kf = f.path("k");
        fs::write(&kf, k).unwrap();
        let got = run_in(&copy, &["get", "--key-file", kf.to_str().unwrap()], None);
        assert_eq!(&got.stdout[..got.stdout.len() - 1], *v);
    }
    // --raw: the bytes as they are, and load --raw takes a backslash as itself.
    let raw = f
        .run(&["scan", "--raw", "--from", "back", "--to", "bb"])
        .stdout;
    assert_eq!(raw, b"back\\slash\tcr\r and \x01 and \x7f\n");
    let raw_copy = f.path("raw");
    assert_success(
        &run_in(&raw_copy, &["load", "--raw"], Some(b"a\\tb\tc\\n\n")),
        &["load"],
    );
    assert_eq!(run_in(&raw_copy, &["get", "a\\tb"], None).stdout, b"c\\n\n");
    // A bad escape names its line.
    let out = run_in(&f.path("bad"), &["load"], Some(b"k\tv\\q\n"));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("line 1") && stderr(&out).contains("bad escape"),
        "{}",
        stderr(&out)
    );
}

/// Names, sizes and modification times of a directory's files.
fn listing(dir: &Path) -> Vec<(String, u64, SystemTime)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, m.len(), m.modified().unwrap())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn check_reports_a_store_that_cannot_be_opened() {
    let f = Fixture::new();
    let out = f.run(&["check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains("no such directory"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn no_fsync_writes_are_stored_too() {
    let f = Fixture::new();
    f.ok(&["--no-fsync", "put", "k", "v"]);
    let out = f.run_with_input(&["load", "--no-fsync"], numbered_lines(10).as_bytes());
    assert_success(&out, &["load"]);
    assert_eq!(f.ok(&["get", "k"]), "v\n");
    assert_eq!(stats_json(&f)["pairs"], 11);
}

#[test]
fn help_lists_every_command() {
    let out = Command::new(KIVI).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = stdout(&out);
    for cmd in [
        "put", "get", "del", "scan", "load", "check", "stats", "bench",
    ] {
        assert!(help.contains(&format!("  {cmd} ")), "{cmd} missing: {help}");
    }
    assert!(help.contains("--hex") && help.contains("--no-fsync") && help.contains("-d"));
    let out = Command::new(KIVI)
        .args(["scan", "--help"])
        .output()
        .unwrap();
    let help = stdout(&out);
    assert!(
        help.contains("inclusive") && help.contains("exclusive"),
        "{help}"
    );
}

/// A kivi built without the suite says how to get it, and fails.
#[cfg(not(feature = "bench"))]
#[test]
fn bench_without_the_suite_says_how_to_build_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(KIVI)
        .args(["bench", "-n", "1000", "--dir"])
        .arg(tmp.path().join("bench"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--features bench"), "{err}");
    assert!(!tmp.path().join("bench").exists(), "nothing was measured");
}

#[cfg(feature = "bench")]
#[test]
fn bench_smoke_run_prints_every_figure() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bench");
    let json = tmp.path().join("bench.json");
    let out = Command::new(KIVI)
        .args(["bench", "-n", "10000", "--rounds", "2", "--dir"])
        .arg(&dir)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert_success(&out, &["bench"]);
    let said = stdout(&out);
    let throughput = [
        "bulk_insert",
        "random_read",
        "random_update",
        "random_mixed",
        "range_scan",
        "hotspot_read",
        "single_put",
        "concurrent_put_1",
        "concurrent_put_2",
        "concurrent_put_8",
        "concurrent_put_64",
    ];
    let space = ["space_after_load", "space_after_updates", "space_steady"];
    for w in throughput
        .iter()
        .chain(&space)
        .chain(&["recovery", "fdatasync", "best of 2 round(s)"])
    {
        assert!(said.contains(w), "{w} missing:\n{said}");
    }
    let lines: Vec<serde_json::Value> = fs::read_to_string(&json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for round in [1, 2] {
        let of_round = |w: &str| {
            lines
                .iter()
                .find(|l| l["round"] == round && l["workload"] == w && l["store"] == "kivi")
                .unwrap_or_else(|| panic!("no {w} in round {round}"))
        };
        for w in throughput {
            let l = of_round(w);
            assert_eq!(l["n"], 10000);
            assert!(l["ops_per_sec"].as_f64().unwrap() > 0.0, "{l}");
            assert!(l["cpu_us_per_op"].is_f64(), "{l}");
            assert!(l.get("peak_rss_bytes").is_some(), "{l}");
        }
        for w in space {
            let l = of_round(w);
            assert!(l["bytes_per_pair"].as_f64().unwrap() > 40.0, "{l}");
            // The long update run of workload 9 has a rate; the space
            // measurements after load and after workloads 3 and 4 do not.
            assert_eq!(l["ops_per_sec"].is_null(), w != "space_steady", "{l}");
        }
        // kivi counts its live bytes, so its space is also sampled as
        // amplification (bytes on disk over live bytes).
        let steady = of_round("space_steady");
        let amp = steady["amplification_samples"].as_array().expect("samples");
        assert_eq!(amp.len(), steady["space_samples"].as_array().unwrap().len());
        assert!(amp.iter().all(|s| s[1].as_f64().unwrap() > 1.0), "{steady}");
        assert!(of_round("single_put")["p50_us"].as_f64().unwrap() > 0.0);
        assert!(of_round("recovery")["reopen_seconds"].as_f64().unwrap() > 0.0);
    }
    let machine = lines.iter().find(|l| l["store"] == "machine").unwrap();
    assert_eq!(machine["workload"], "fdatasync");
    assert!(machine["p50_us"].as_f64().unwrap() > 0.0);
}

#[cfg(feature = "bench")]
#[test]
fn bench_refuses_unknown_stores_and_workloads() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(KIVI)
            .arg("bench")
            .args(args)
            .arg("--dir")
            .arg(tmp.path().join("b"))
            .output()
            .unwrap()
    };
    let out = run(&["--stores", "kivi,nosuchdb", "-n", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown store \"nosuchdb\""),
        "{}",
        stderr(&out)
    );
    let out = run(&["--workloads", "0-3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("workload"), "{}", stderr(&out));
}

#[cfg(feature = "bench")]
#[test]
fn bench_refuses_a_directory_that_is_not_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("keep.txt"), "mine").unwrap();
    let out = Command::new(KIVI)
        .args(["bench", "-n", "1000", "--dir"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("refusing"), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(tmp.path().join("keep.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn compact_after_deleting_everything_brings_the_files_under_a_mib() {
    let f = Fixture::new();
    // 100 pairs of 30 KB values (out of line), written twice: ~6 MB of files.
    let lines: String = (0..100)
        .map(|i| format!("key{i:03}\t{}\n", "v".repeat(30_000 + i)))
        .collect();
    let file = f.path("pairs.tsv");
    fs::write(&file, &lines).unwrap();
    f.ok(&["load", file.to_str().unwrap()]);
    f.ok(&["load", file.to_str().unwrap()]);
    let before = stats_json(&f)["file_bytes"].as_u64().unwrap();
    assert!(before > 2 << 20, "{before}");
    for i in 0..100 {
        f.ok(&["del", &format!("key{i:03}")]);
    }
    let said = f.ok(&["compact"]);
    assert!(
        said.starts_with("compacted ") && said.contains(" 0 pairs"),
        "{said}"
    );
    let after = stats_json(&f);
    assert_eq!(after["pairs"], 0, "{after}");
    let bytes = after["file_bytes"].as_u64().unwrap();
    assert!(
        bytes < 1 << 20,
        "{bytes} bytes after compacting an empty store"
    );
    assert_eq!(f.ok(&["scan"]), "");
    f.ok(&["check"]);
}

/// `-d` takes an object store's URL (here `file://`, the same code as
/// `s3://`): writes, reads, scans, check and stats work there, the local
/// cache goes where --object-cache-dir says, and stats count the requests.
#[test]
fn a_store_on_an_object_store_by_url() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("file://{}", tmp.path().join("bucket/store").display());
    let cache = tmp.path().join("cache");
    let cache_arg = cache.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(KIVI)
            .args(["-d", &url, "--object-cache-dir", cache_arg])
            .args(args)
            .output()
            .unwrap();
        assert_success(&out, args);
        stdout(&out)
    };
    run(&["put", "k1", "v1"]);
    run(&["put", "k2", "v2"]);
    assert!(
        std::fs::read_dir(&cache).unwrap().count() > 0,
        "the cache holds what was written"
    );
    assert_eq!(run(&["get", "k1"]), "v1\n");
    assert_eq!(run(&["scan"]), "k1\tv1\nk2\tv2\n");
    assert!(run(&["check"]).contains("no problems"));
    let stats = run(&["stats"]);
    assert!(
        stats.contains("object gets") && stats.contains("local object cache"),
        "{stats}"
    );
    assert!(tmp.path().join("bucket/store/meta/KIVI").exists());
    // An empty prefix with create-if-missing off is no store.
    let missing = format!("file://{}", tmp.path().join("bucket/other").display());
    let out = Command::new(KIVI)
        .args(["-d", &missing, "del", "k"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not a kivi store"),
        "{}",
        stderr(&out)
    );
    assert!(
        !tmp.path().join("bucket/other").exists(),
        "refusing wrote nothing"
    );
}
