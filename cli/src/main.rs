//! `kivi`: the command-line tool for a kivi store. This file parses the
//! arguments and dispatches; each command lives in its own module.

// glibc malloc was the top item in the profile of the write path (many small
// short-lived key, value and page buffers across threads); mimalloc is faster
// there and never worse elsewhere.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The global allocator, for `kivi serve`'s INFO (`used_memory`).
pub const ALLOCATOR: kivi_server::Allocator = kivi_server::Allocator {
    name: "mimalloc",
    used_bytes: mimalloc_committed_bytes,
};

/// The bytes mimalloc has committed from the OS for its heaps now
/// (`mi_process_info`'s current_commit, which mimalloc tracks in every
/// build): the live allocations plus the free space inside the pages it
/// holds and has not yet returned. So it is at or above Redis's figure
/// (the bytes of live allocations, which mimalloc counts only in builds
/// with statistics on) and, as memory not yet touched is not resident,
/// near the RSS; memory the process maps outside the allocator is not in it.
fn mimalloc_committed_bytes() -> u64 {
    let mut v = [0usize; 8];
    let [elapsed, user, system, rss, peak_rss, commit, peak_commit, faults] = &mut v;
    // SAFETY: mi_process_info writes one usize through each pointer, all
    // to distinct elements of `v`, which outlives the call.
    unsafe {
        libmimalloc_sys::mi_process_info(
            elapsed,
            user,
            system,
            rss,
            peak_rss,
            commit,
            peak_commit,
            faults,
        )
    };
    *commit as u64
}

#[cfg(feature = "bench")]
mod bench;
mod codec;
mod commands;
mod config_file;
mod error;
mod load;
mod progress;
mod promote;
mod serve;
mod stats;
mod table;

use clap::{Args, Parser, Subcommand};
use codec::Codec;
use error::{CliError, Result};
use kivi::{Db, Durability, Options};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const DEFAULT_DIR: &str = "./kivi-data";

/// Reads of a store that a writer has open, tried at most this many times
/// when what they read changed under them (`Store::read_only_with`).
pub const READ_BESIDE_WRITER_TRIES: u32 = 5;

#[derive(Parser, Debug)]
#[command(
    name = "kivi",
    version,
    about = "Use a kivi store: a durable, crash-only, log-structured key-value store.",
    long_about = "Use a kivi store: a durable, crash-only, log-structured key-value store.\n\n\
        Keys and values are taken and printed as text (their raw bytes) unless --hex is given. \
        Writes are durable (fdatasync) before a command returns unless --no-fsync is given.\n\n\
        Exit status: 0 on success, 1 when `get` finds no such key, 2 on any error.",
    after_help = "Examples:\n  kivi put greeting hello\n  kivi get greeting\n  \
        kivi scan --from a --to m --limit 10\n  kivi load pairs.tsv\n  kivi --hex get 00ff\n  \
        kivi -d /var/lib/mystore stats --json"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Store directory, or an object store's URL (s3://BUCKET/PREFIX, file:///PATH) [default: ./kivi-data]
    #[arg(short = 'd', long = "data-dir", value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Read keys and values (arguments, load files) as hex, and print them as hex
    #[arg(long, global = true)]
    pub hex: bool,
    /// Acknowledge writes without fdatasync: a machine crash may lose the latest writes
    #[arg(long, global = true)]
    pub no_fsync: bool,
    /// Log level or filter for the log on standard error (error, warn, info, debug,
    /// trace, or RUST_LOG's syntax); overrides RUST_LOG [default: info]
    #[arg(long, value_name = "LEVEL", global = true)]
    log_level: Option<String>,
    /// For a store on an object store (-d s3://BUCKET/PREFIX): where its local cache of
    /// objects lives, emptied at start, one store at a time [default: a temporary
    /// directory, removed at exit or, after a crash, by the next start]
    #[arg(long, value_name = "DIR", global = true)]
    pub object_cache_dir: Option<PathBuf>,
    /// For a store on an object store: the local cache's size in MiB [default: 1024]
    #[arg(long, value_name = "MIB", global = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub object_cache_mib: Option<u64>,
    /// How long a group commit waits for more writes to join it, in milliseconds: more
    /// latency, fewer commits (on an object store, fewer PUTs) [default: 0]
    #[arg(long, value_name = "MS", global = true, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub commit_wait_ms: Option<u64>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Store VALUE under KEY (durable when the command returns)
    #[command(
        after_help = "Examples:\n  kivi put greeting hello\n  kivi put photo --value-file photo.jpg\n  \
        pg_dump db | kivi put backup --value-file -\n  kivi put --key-file key.bin --value-file value.bin"
    )]
    Put {
        /// KEY (at most 4096 bytes) then VALUE (at most 16 MiB), less the ones read from
        /// files; put `--` before one starting with '-'
        #[arg(value_name = "KEY VALUE", num_args = 0..=2)]
        args: Vec<OsString>,
        /// Read the key from FILE, all its bytes as they are (`-`: standard input)
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// Read the value from FILE, all its bytes as they are (`-`: standard input)
        #[arg(long, value_name = "FILE")]
        value_file: Option<PathBuf>,
    },
    /// Print the value stored under KEY, followed by a newline; exit 1 if absent
    Get {
        #[arg(required_unless_present = "key_file")]
        key: Option<OsString>,
        /// Read the key from FILE, all its bytes as they are (`-`: standard input)
        #[arg(long, value_name = "FILE", conflicts_with = "key")]
        key_file: Option<PathBuf>,
    },
    /// Remove KEY (nothing happens if it is absent)
    Del {
        #[arg(required_unless_present = "key_file")]
        key: Option<OsString>,
        /// Read the key from FILE, all its bytes as they are (`-`: standard input)
        #[arg(long, value_name = "FILE", conflicts_with = "key")]
        key_file: Option<PathBuf>,
    },
    /// Print pairs in key order, one `key<TAB>value` line each
    #[command(
        long_about = "Print pairs in key order, one `key<TAB>value` line each. A backslash, \
        TAB, newline or carriage return inside a key or value is written \\\\, \\t, \\n or \\r, \
        any other control byte \\xNN, so that each line is one pair and `kivi load` reads \
        the output back into the same pairs; --raw prints the bytes as they are."
    )]
    Scan {
        /// First key to print (inclusive)
        #[arg(long, value_name = "KEY")]
        from: Option<OsString>,
        /// Stop before this key (exclusive)
        #[arg(long, value_name = "KEY")]
        to: Option<OsString>,
        /// Print at most N pairs
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Print keys and values as they are, without escaping TAB, newline and backslash
        /// (the output may then not split back into pairs)
        #[arg(long)]
        raw: bool,
    },
    /// Store `key<TAB>value` lines read from FILE (or standard input)
    #[command(
        long_about = "Store `key<TAB>value` lines read from FILE, or from standard input \
        when FILE is absent or `-`.\n\nThe key ends at the first TAB; the rest of the line \
        (which may hold more TABs in text mode) is the value. A backslash starts an escape \
        (\\\\, \\t, \\n, \\r, \\xNN), as `kivi scan` and `kivi table dump` write them, unless \
        --raw: the bytes are then taken as they are. Lines are committed durably \
        1,000 at a time, so an error on a line leaves the lines before its batch stored."
    )]
    Load {
        /// File of `key<TAB>value` lines; standard input when absent or `-`
        file: Option<PathBuf>,
        /// Take each line's bytes as they are: no backslash escapes
        #[arg(long)]
        raw: bool,
    },
    /// Verify every segment, record and reachable page (read-only)
    #[command(
        long_about = "Read every segment record by record and every reachable page, \
        checking every checksum and invariant. Opens the store read-only.\n\n\
        Healthy: prints a one-line summary and exits 0. Otherwise prints one line per problem, \
        naming the file and offset, and exits 2."
    )]
    Check,
    /// Copy every live page into new segments and delete every file that no longer holds anything live
    #[command(
        long_about = "Clean the whole store now: copy every page and value still in use into \
        new segments, start a new commit log segment, and delete every file that no longer \
        holds anything live. The background cleaner keeps the files within twice the live \
        bytes on its own; this brings them down to little more than the live bytes, for \
        example after deleting much of the data. Prints the file bytes before and after."
    )]
    Compact,
    /// Print the store's numbers: pairs, bytes, segments, tree height, cache use, ...
    Stats {
        /// Print one JSON object (snake_case field names) instead of text
        #[arg(long)]
        json: bool,
    },
    /// Make a follower (kivi serve --follow URL) its store's writer: REPLICAOF NO ONE
    #[command(
        long_about = "Ask the follower whose RESP listener is at ADDR (kivi serve --follow URL) \
        to take over as its store's writer, as Redis tools do with REPLICAOF NO ONE. The \
        follower reads the writer's log to its end and fences it: the writer there was, \
        alive or not, can make nothing more durable (its next commit fails and it writes \
        no more). Every write it acknowledged is kept. Exits 0 once the follower accepts \
        writes.",
        after_help = "Examples:\n  kivi serve --follow s3://bucket/store --resp 127.0.0.1:6381\n  \
        kivi promote 127.0.0.1:6381\n  kivi promote 10.0.0.7:6380 -a s3cret"
    )]
    Promote(promote::PromoteArgs),
    /// Serve the store to many clients over TCP or Unix sockets: RESP (Redis clients) and kivaloo's kvlds protocol
    #[command(
        long_about = "Serve the store to many clients at once over TCP or Unix sockets, in RESP \
        (so redis-cli and every Redis client library work) and, when --kvlds is given, in \
        kivaloo's kvlds protocol. Every write is durable before it is answered (unless \
        --no-fsync); writes from all connections share group commits. The same data is \
        visible through both protocols.\n\n\
        Binds to loopback unless told otherwise. RESP asks for a password once one is set \
        (--requirepass, --user); without one, and for kvlds (which has no authentication) \
        unless --kvlds-allow-remote, a listener other machines could reach refuses to start. \
        With --tls, RESP over TLS too; a TLS listener other machines could reach needs a \
        password or client certificates (--tls-ca-cert). SIGHUP rereads the TLS files \
        (new connections get them). \
        SIGTERM or SIGINT: stop accepting, answer what was read, close the store. After a \
        kill -9 nothing acknowledged is lost.\n\n\
        Every setting can come from a TOML file instead (--config FILE; each key the long \
        name of a flag, users as [[user]] tables; see docs/config.md); a flag given on the \
        command line wins. CONFIG SET changes timeout, output-timeout and max-connections \
        while the server runs.",
        after_help = "Examples:\n  kivi -d /var/lib/kivi serve\n  redis-cli -p 6380 set greeting hello\n  \
        kivi serve --resp 0.0.0.0:6380 --requirepass s3cret --kvlds 127.0.0.1:1234\n  \
        kivi serve --requirepass s3cret --user reports:read-only:r3ad\n  \
        redis-cli -p 6380 -a s3cret ping\n  kivi serve --resp ./kivi.sock\n  \
        kivi serve --tls 127.0.0.1:6443 --tls-cert cert.pem --tls-key key.pem\n  \
        redis-cli --tls --cacert ca.pem -p 6443 ping\n  \
        kivi serve --config /etc/kivi/serve.toml"
    )]
    Serve(Box<serve::ServeFlags>),
    /// Measure kivi, and other stores, on kv40 data (40-byte keys and values)
    #[command(
        long_about = "Measure kivi, and with a build with `--features peers` the stores users \
        would pick instead, on kv40 data (40-byte keys and values): the workloads of \
        docs/workloads.md, every write durable, every read checked, rounds interleaving the \
        stores; then a table per workload with each store's best round and its ratio to kivi. \
        Before the rounds, a durability check counts each store's fsync-family calls per commit \
        under strace.\n\n\
        With --server, `kivi serve` instead: kivaloo's six kvlds workloads on kivaloo's data, \
        each driven by a trickling client (as kivaloo's bench tools drive a server: 4,096 in \
        flight, one new request per answer, 4 KiB reads and writes) and by a bursty one, the \
        rate the median of --seconds one-second windows after --warmup seconds; with \
        --kivaloo DIR, kivaloo too in the same rounds, with kivi's ratio to it; then \
        redis-benchmark against kivi serve and redis-server.\n\n\
        DIR is deleted and recreated first; a DIR that exists and is neither empty nor a \
        previous bench directory is refused. The global -d, --hex and --no-fsync options do \
        not apply."
    )]
    #[cfg(feature = "bench")]
    Bench(Box<bench::BenchArgs>),
    /// Measure kivi and other stores (needs a build with `--features bench`)
    #[cfg(not(feature = "bench"))]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
    /// Sealed tables: sparkey-compatible immutable hash tables (create, export, get, info, dump, verify, rewrite)
    Table(table::TableArgs),
}

/// mimalloc's `mi_option_purge_delay` (mimalloc.h, v2 and v3: the entry
/// before `mi_option_use_numa_nodes`, 16, which libmimalloc-sys names).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// In a container, memory the allocator frees goes back to the kernel at
/// once rather than 10 ms later: with the delay, a store churning node
/// versions held RSS 262 MiB for a live heap of 105 MiB, and 1M pairs
/// loaded in a 64 MiB cgroup were killed for want of memory; without it
/// the same load and workloads ran at a peak RSS of 56-70 MiB (`kivi bench
/// --stores kivi --memory-limit 64MiB -n 1000000 --workloads 1-6`; the
/// heap figures from `MEMORY_TRACE=1` engine/examples/memory_bench). Outside a container
/// the default stays: returning memory costs system calls, and there the
/// machine's memory is the limit the cache was sized for.
fn fit_allocator_to_container() {
    if kivi::container_memory_limit().is_some() {
        // SAFETY: mi_option_set only stores an integer in mimalloc's option
        // table (an atomic store); any option number in range and any value
        // are valid, and 15 is purge_delay in the mimalloc this links.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}

fn main() -> ExitCode {
    fit_allocator_to_container();
    let cli = Cli::parse();
    // `serve` starts its log once it has read its config file, which may
    // set the level.
    if !matches!(cli.command, Command::Serve(_)) {
        if let Err(e) = init_logging(cli.global.log_level.as_deref()) {
            eprintln!("kivi: {e}");
            return ExitCode::from(e.exit_code());
        }
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if !matches!(e, CliError::BrokenPipe) {
                eprintln!("kivi: {e}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// The log: one line per event on standard error, with its time (UTC,
/// RFC 3339) and level, filtered by `--log-level`, else RUST_LOG, else
/// `info`. The engine and the server only emit events (`tracing`); this is
/// where they are written.
pub fn init_logging(level: Option<&str>) -> Result<()> {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(l) => {
            EnvFilter::try_new(l).map_err(|e| CliError::Input(format!("--log-level {l:?}: {e}")))?
        }
        // RUST_LOG unset or empty: info. A RUST_LOG that does not parse is
        // not a reason to refuse to run: its valid directives are kept.
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.trim().is_empty() => EnvFilter::new(v),
            _ => EnvFilter::new("info"),
        },
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    let g = &cli.global;
    #[cfg(not(feature = "bench"))]
    if let Command::Bench { .. } = &cli.command {
        return Err(CliError::Input(
            "this kivi was built without the benchmark suite; build it with \
             `cargo build --release -p kivi-cli --features bench` (or `--features peers`, \
             for the other stores too, and `--features slatedb`, for SlateDB in \
             `kivi bench --object-store`)"
                .into(),
        ));
    }
    #[cfg(feature = "bench")]
    if let Command::Bench(args) = &cli.command {
        if g.data_dir.is_some() || g.no_fsync || g.hex {
            return Err(CliError::Input(
                "bench takes its directory from --dir and always writes durably; \
                 -d, --hex and --no-fsync do not apply"
                    .into(),
            ));
        }
        return bench::run(args);
    }
    let store = Store::new(g);
    match &cli.command {
        Command::Put {
            args,
            key_file,
            value_file,
        } => commands::put(&store, args, key_file.as_deref(), value_file.as_deref()),
        Command::Get { key, key_file } => {
            commands::get(&store, &commands::Given::of(key, key_file))
        }
        Command::Del { key, key_file } => {
            commands::del(&store, &commands::Given::of(key, key_file))
        }
        Command::Scan {
            from,
            to,
            limit,
            raw,
        } => commands::scan(&store, from.as_deref(), to.as_deref(), *limit, *raw),
        Command::Load { file, raw } => load::run(&store, file.as_deref(), *raw),
        Command::Check => commands::check(&store),
        Command::Compact => commands::compact(&store),
        Command::Stats { json } => stats::run(&store, *json),
        Command::Serve(flags) => serve::run(g, flags),
        Command::Promote(args) => promote::run(args),
        Command::Table(args) => table::run(&store, args),
        #[cfg(feature = "bench")]
        Command::Bench(_) => unreachable!("handled above"),
        #[cfg(not(feature = "bench"))]
        Command::Bench { .. } => unreachable!("handled above"),
    }
}

/// The store a command works on, and how to show its keys and values.
pub struct Store {
    pub dir: PathBuf,
    pub codec: Codec,
    durability: Durability,
    /// For a store on an object store: its local cache (directory, bytes).
    object_cache: (Option<PathBuf>, Option<u64>),
    commit_wait: Duration,
}

impl Store {
    fn new(g: &Global) -> Self {
        Self::with(g.data_dir.clone(), g.hex, g.no_fsync).tuned(g)
    }

    /// With the object-store cache and the commit wait the global flags give.
    pub fn tuned(mut self, g: &Global) -> Self {
        self.object_cache = (
            g.object_cache_dir.clone(),
            g.object_cache_mib.map(|m| m << 20),
        );
        self.commit_wait = Duration::from_millis(g.commit_wait_ms.unwrap_or(0));
        self
    }

    /// The options every open starts from.
    fn base_options(&self) -> Options {
        let d = Options::default();
        Options {
            object_cache_dir: self.object_cache.0.clone(),
            object_cache_bytes: self.object_cache.1.unwrap_or(d.object_cache_bytes),
            commit_wait: self.commit_wait,
            ..d
        }
    }

    /// The store in `dir` (the default directory when `None`).
    pub fn with(dir: Option<PathBuf>, hex: bool, no_fsync: bool) -> Self {
        Store {
            dir: dir.unwrap_or_else(|| DEFAULT_DIR.into()),
            codec: Codec::new(hex),
            durability: if no_fsync {
                Durability::NoFsync
            } else {
                Durability::Fsync
            },
            object_cache: (None, None),
            commit_wait: Duration::ZERO,
        }
    }

    /// For reading commands: never creates or writes anything, so it works
    /// on a read-only directory and cannot disturb the store.
    pub fn open_read_only(&self) -> Result<Db> {
        let opts = Options {
            read_only: true,
            create_if_missing: false,
            ..self.base_options()
        };
        Ok(Db::open(&self.dir, opts)?)
    }

    /// Whether a writer (`kivi serve`, another program) has the store open.
    pub fn in_use_by_writer(&self) -> bool {
        kivi::storage::LocalDir::writer_holds_lock(&self.dir)
    }

    /// `f` on a read-only open of the store. Beside a writer the store
    /// changes while it is read, and a file the open or `f` needed may be
    /// deleted (the cleaner) before it is read: then the open is tried
    /// again, up to `READ_BESIDE_WRITER_TRIES` times in all.
    pub fn read_only_with<T>(&self, f: impl Fn(&Db) -> Result<T>) -> Result<T> {
        let mut tries = 0;
        loop {
            tries += 1;
            let result = self.open_read_only().and_then(|db| f(&db));
            match result {
                Err(_) if tries < READ_BESIDE_WRITER_TRIES && self.in_use_by_writer() => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    /// For commands that change a store but make no sense on a new one
    /// (del, compact): a missing store is an error naming the directory,
    /// not an empty store made by a typo.
    pub fn open_existing(&self) -> Result<Db> {
        let opts = Options {
            durability: self.durability,
            create_if_missing: false,
            ..self.base_options()
        };
        Ok(Db::open(&self.dir, opts)?)
    }

    /// A follower of the store (an object store's URL) that another
    /// process writes: read-only, kept up with that writer's commits.
    /// `take_over_after`: a standby (see `Options::take_over_after`).
    pub fn open_follower(&self, take_over_after: Option<Duration>) -> Result<Db> {
        let opts = Options {
            create_if_missing: false,
            take_over_after,
            ..self.base_options()
        };
        Ok(Db::follow(&self.dir, opts)?)
    }

    /// For writing commands: creates the store if the directory holds none.
    pub fn open_writable(&self) -> Result<Db> {
        let opts = Options {
            durability: self.durability,
            ..self.base_options()
        };
        Ok(Db::open(&self.dir, opts)?)
    }

    pub fn shown_dir(&self) -> String {
        self.dir.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
