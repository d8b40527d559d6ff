//! `kivi table ...`: sealed tables, files compatible with sparkey's
//! (`BASE.spl` log + `BASE.spi` index, plus kivi's `BASE.kvsum` checksums).

use crate::codec::Codec;
use crate::error::{plural, stdout_error, CliError, Result};
use crate::progress;
use crate::Store;
use clap::{Args, Subcommand, ValueEnum};
use kivi::table::{self as tables, Compression, Table, TableInfo, TableWriter, WriterOptions};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct TableArgs {
    #[command(subcommand)]
    command: TableCommand,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
enum Codecs {
    None,
    Snappy,
    Zstd,
}

#[derive(Args, Debug, Clone)]
struct WriteOpts {
    /// Block compression of the log [default: none; for rewrite, the source's]
    #[arg(long, value_enum)]
    compression: Option<Codecs>,
    /// Uncompressed bytes per compression block, 16..=1073741824 [default: 4096; for
    /// rewrite, the source's]
    #[arg(long, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(16..=(1 << 30)))]
    block_size: Option<u32>,
    /// Memory the index build may use, in MiB; larger tables are built
    /// through temporary files beside the table
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    memory_limit: u64,
    /// Replace a table that already exists under the new name
    #[arg(long)]
    force: bool,
}

/// Block size when none is given and none is inherited.
const DEFAULT_BLOCK_SIZE: u32 = 4096;

impl WriteOpts {
    /// The writer's options: what was given, else `inherited` (a
    /// rewrite's source: its compression and block size), else none.
    fn writer_options(&self, inherited: Option<(Compression, u32)>) -> WriterOptions {
        let (compression, block_size) = match (self.compression, inherited) {
            (Some(c), _) => (
                match c {
                    Codecs::None => Compression::None,
                    Codecs::Snappy => Compression::Snappy,
                    Codecs::Zstd => Compression::Zstd,
                },
                inherited.map_or(DEFAULT_BLOCK_SIZE, |(_, b)| b),
            ),
            (None, Some(source)) => source,
            (None, None) => (Compression::None, DEFAULT_BLOCK_SIZE),
        };
        let mut o = WriterOptions {
            compression,
            // An uncompressed source records no block size.
            block_size: self.block_size.unwrap_or(if block_size == 0 {
                DEFAULT_BLOCK_SIZE
            } else {
                block_size
            }),
            ..WriterOptions::default()
        };
        o.index.memory_limit = self.memory_limit.saturating_mul(1 << 20).max(1 << 16);
        o
    }

    /// Refuses to write over an existing table unless --force: a table
    /// is often the only copy of a bulk build's output.
    fn may_write(&self, base: &Path) -> Result<()> {
        if self.force {
            return Ok(());
        }
        let (log, index) = tables::table_paths(base);
        for path in [log, index] {
            if path.exists() {
                return Err(CliError::Input(format!(
                    "{} exists; give --force to replace the table {}",
                    path.display(),
                    base.display()
                )));
            }
        }
        Ok(())
    }
}

#[derive(Subcommand, Debug)]
enum TableCommand {
    /// Write a table from `key<TAB>value` lines of FILE (or standard input)
    #[command(
        long_about = "Write the table BASE.spl + BASE.spi (+ BASE.kvsum checksums) from \
        `key<TAB>value` lines of FILE, or standard input when FILE is absent or `-`. The key \
        ends at the first TAB. A backslash starts an escape (\\\\, \\t, \\n, \\r, \\xNN, as \
        `kivi scan` and `table dump` write them) unless --raw. Later lines replace earlier ones with the same key. The files \
        appear only when complete (written under temporary names, fsync'd, renamed)."
    )]
    Create {
        base: PathBuf,
        file: Option<PathBuf>,
        /// Take each line's bytes as they are: no backslash escapes
        #[arg(long)]
        raw: bool,
        #[command(flatten)]
        opts: WriteOpts,
    },
    /// Write a consistent snapshot of the kivi store (-d DIR) as the table BASE
    Export {
        base: PathBuf,
        #[command(flatten)]
        opts: WriteOpts,
    },
    /// Print the value stored under KEY in the table; exit 1 if absent
    Get { base: PathBuf, key: OsString },
    /// Print the header fields of BASE.spl and BASE.spi
    Info { base: PathBuf },
    /// Print every live pair as a `key<TAB>value` line, in write order
    #[command(
        long_about = "Print every live pair as a `key<TAB>value` line, in the order \
        they were written. In text mode every byte outside 0x21-0x7E, and the backslash, is \
        written \\xNN (as in sparkey's fixtures); with --hex keys and values are hex."
    )]
    Dump { base: PathBuf },
    /// Check every header field, block, entry and slot (and checksums, with BASE.kvsum)
    #[command(
        long_about = "Check every header field, that every compressed block decodes, \
        every index slot, and that each slot's entry hashes to it. With the checksum sidecar \
        BASE.kvsum (kivi writes one with every table) also every byte's checksum. Prints one \
        line per problem and exits 2, or one line saying which kind of check passed."
    )]
    Verify { base: PathBuf },
    /// Copy only the live pairs of BASE into the new table NEWBASE
    Rewrite {
        base: PathBuf,
        newbase: PathBuf,
        #[command(flatten)]
        opts: WriteOpts,
    },
}

fn table_err(e: tables::Error) -> CliError {
    CliError::Input(e.to_string())
}

pub fn run(store: &Store, args: &TableArgs) -> Result<()> {
    match &args.command {
        TableCommand::Create {
            base,
            file,
            raw,
            opts,
        } => create(store.codec.for_lines(*raw), base, file.as_deref(), opts),
        TableCommand::Export { base, opts } => export(store, base, opts),
        TableCommand::Get { base, key } => get(store.codec, base, key),
        TableCommand::Info { base } => info(base),
        TableCommand::Dump { base } => dump(store.codec, base),
        TableCommand::Verify { base } => verify(base),
        TableCommand::Rewrite {
            base,
            newbase,
            opts,
        } => {
            let source = open(base)?;
            let h = source.log_header();
            let inherited = (h.compression, h.compression_block_size);
            drop(source);
            opts.may_write(newbase)?;
            let pb = progress::spinner("rewriting live pairs");
            let info = tables::rewrite(base, newbase, opts.writer_options(Some(inherited)), |n| {
                pb.set_position(n)
            });
            pb.finish_and_clear();
            report(newbase, &info.map_err(table_err)?)
        }
    }
}

fn report(base: &Path, info: &TableInfo) -> Result<()> {
    writeln!(
        io::stdout(),
        "wrote {}: {} ({} puts, {} deletes), {} bytes of log; index of {} slots{}",
        base.display(),
        plural(info.index.num_entries, "live pair", "live pairs"),
        info.log.num_puts,
        info.log.num_deletes,
        info.log.data_end,
        info.index.hash_capacity,
        if info.build.regions > 1 {
            format!(", built in {} regions", info.build.regions)
        } else {
            String::new()
        }
    )
    .map_err(stdout_error)
}

/// Builds the index under a spinner once the log is written.
fn finish(w: TableWriter, base: &Path) -> Result<()> {
    let pb = progress::spinner("building the index");
    let info = w.finish();
    pb.finish_and_clear();
    report(base, &info.map_err(table_err)?)
}

fn create(codec: Codec, base: &Path, file: Option<&Path>, opts: &WriteOpts) -> Result<()> {
    opts.may_write(base)?;
    let (name, reader, pb): (String, Box<dyn BufRead>, _) =
        match file.filter(|p| *p != Path::new("-")) {
            None => (
                "standard input".into(),
                Box::new(io::stdin().lock()),
                progress::spinner("reading"),
            ),
            Some(p) => {
                let name = p.display().to_string();
                let f = File::open(p).map_err(|e| CliError::io(format!("open {name}"), e))?;
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                (
                    name.clone(),
                    Box::new(BufReader::with_capacity(1 << 20, f)),
                    progress::bytes(len, &format!("reading {name}")),
                )
            }
        };
    let mut w = TableWriter::create(base, opts.writer_options(None)).map_err(table_err)?;
    let mut reader = reader;
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| CliError::io(format!("read {name}"), e))?;
        if n == 0 {
            break;
        }
        number += 1;
        pb.inc(if file.is_some() { n as u64 } else { 1 });
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if codec == Codec::Hex && line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        let Some(tab) = line.iter().position(|&b| b == b'\t') else {
            return Err(CliError::Input(format!(
                "{name} line {number}: no TAB between key and value (nothing was written)"
            )));
        };
        let key = codec
            .decode(&line[..tab])
            .map_err(|e| CliError::Input(format!("{name} line {number}: key {e}")))?;
        let value = codec
            .decode(&line[tab + 1..])
            .map_err(|e| CliError::Input(format!("{name} line {number}: value {e}")))?;
        w.put(&key, &value).map_err(table_err)?;
    }
    pb.finish_and_clear();
    finish(w, base)
}

fn export(store: &Store, base: &Path, opts: &WriteOpts) -> Result<()> {
    opts.may_write(base)?;
    let db = store.open_read_only()?;
    // One snapshot: the table is the store as of one moment.
    let snap = db.snapshot();
    let pb = progress::spinner("exporting");
    let mut w = TableWriter::create(base, opts.writer_options(None)).map_err(table_err)?;
    let mut scan = snap.scan::<&[u8], _>(..);
    while let Some((k, v)) = scan.next()? {
        w.put(k, v).map_err(table_err)?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    drop(scan);
    drop(snap);
    finish(w, base)
}

fn open(base: &Path) -> Result<Table> {
    Table::open(base).map_err(table_err)
}

fn get(codec: Codec, base: &Path, key: &std::ffi::OsStr) -> Result<()> {
    let key = codec.decode_arg("KEY", key)?;
    let t = open(base)?;
    let Some(v) = t.get(&key).map_err(table_err)? else {
        return Err(CliError::NotFound(codec.show(&key)));
    };
    let mut out = io::stdout().lock();
    codec.write(&mut out, &v).map_err(stdout_error)?;
    out.write_all(b"\n").map_err(stdout_error)
}

fn info(base: &Path) -> Result<()> {
    let t = open(base)?;
    let (l, i) = (t.log_header(), t.index_header());
    let mut out = io::stdout().lock();
    let avg = if i.num_entries == 0 {
        "-".to_string()
    } else {
        format!("{:.2}", i.total_displacement as f64 / i.num_entries as f64)
    };
    writeln!(
        out,
        "Filename: {}\nLog file version {}.{}\nIdentifier: {:08x}\nPuts: {}, Deletes: {}\n\
         Max key size: {}, Max value size: {}\nCompression: {}, block size: {}\n\
         Data end: {}, put size: {}, delete size: {}, max entries per block: {}\n\n\
         Filename: {}\nHash file version {}.{}\nIdentifier: {:08x}\nHash seed: {:08x}\n\
         Max key size: {}, Max value size: {}\nHash size: {} bit Murmurhash3\n\
         Num entries: {}, Capacity: {}\nNum collisions: {}, Max displacement: {}, Average displacement: {}\n\
         Data size: {}, Garbage size: {}\nAddress size: {}, entry block bits: {}, num puts: {}",
        t.log_path().display(),
        l.major,
        l.minor,
        l.file_identifier,
        l.num_puts,
        l.num_deletes,
        l.max_key_len,
        l.max_value_len,
        l.compression.name(),
        l.compression_block_size,
        l.data_end,
        l.put_size,
        l.delete_size,
        l.max_entries_per_block,
        t.index_path().display(),
        i.major,
        i.minor,
        i.file_identifier,
        i.hash_seed,
        i.max_key_len,
        i.max_value_len,
        i.hash_size.bytes() * 8,
        i.num_entries,
        i.hash_capacity,
        i.hash_collisions,
        i.max_displacement,
        avg,
        i.data_end,
        i.garbage_size,
        i.address_size,
        i.entry_block_bits,
        i.num_puts,
    )
    .map_err(stdout_error)
}

/// The fixtures' text form: bytes 0x21..=0x7E except `\` as themselves,
/// everything else `\xNN`.
fn escape(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    for &b in bytes {
        if (0x21..=0x7e).contains(&b) && b != b'\\' {
            out.write_all(&[b])?;
        } else {
            write!(out, "\\x{b:02x}")?;
        }
    }
    Ok(())
}

fn dump(codec: Codec, base: &Path) -> Result<()> {
    let t = open(base)?;
    let mut out = BufWriter::new(io::stdout().lock());
    let mut it = t.iter();
    while let Some((k, v)) = it.next().map_err(table_err)? {
        let w = |out: &mut BufWriter<_>, b: &[u8]| match codec {
            Codec::Text | Codec::Escaped => escape(out, b),
            Codec::Hex => codec.write(out, b),
        };
        w(&mut out, k).map_err(stdout_error)?;
        out.write_all(b"\t").map_err(stdout_error)?;
        w(&mut out, v).map_err(stdout_error)?;
        out.write_all(b"\n").map_err(stdout_error)?;
    }
    out.flush().map_err(stdout_error)
}

fn verify(base: &Path) -> Result<()> {
    let pb = progress::spinner("verifying");
    let r = tables::verify(base);
    pb.finish_and_clear();
    let kind = match r.kind {
        tables::CheckKind::Checksummed => "checksummed (structure and every byte's checksum)",
        tables::CheckKind::Structural => "structural only (no BASE.kvsum sidecar)",
    };
    let mut out = io::stdout().lock();
    if r.is_ok() {
        return writeln!(
            out,
            "ok: {}: {} live pairs, {} entries, {} blocks, {} slots; check: {kind}",
            base.display(),
            r.live,
            r.entries,
            r.blocks,
            r.slots
        )
        .map_err(stdout_error);
    }
    for p in &r.problems {
        writeln!(out, "{p}").map_err(stdout_error)?;
    }
    writeln!(out, "check: {kind}").map_err(stdout_error)?;
    Err(CliError::Unhealthy {
        dir: base.display().to_string(),
        count: r.problems.len() as u64,
    })
}
