//! `load`: stores `key<TAB>value` lines from a file or standard input,
//! committing durably every 1,000 lines.

use crate::codec::Codec;
use crate::error::{plural, stdout_error, CliError, Result};
use crate::progress;
use crate::Store;
use indicatif::ProgressBar;
use kivi::limits::MAX_BATCH_BYTES;
use kivi::{Db, WriteBatch};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;

/// Lines per durable commit: large enough that the fdatasync is cheap per
/// line, small enough that an interrupted load loses little.
const LINES_PER_COMMIT: usize = 1000;

/// Where lines come from, and how to name it in messages.
struct Input {
    name: String,
    reader: Box<dyn BufRead>,
    progress: ProgressBar,
    /// Whether progress counts bytes (a file) or lines (a stream).
    counts_bytes: bool,
}

impl Input {
    fn open(file: Option<&Path>) -> Result<Input> {
        let Some(path) = file.filter(|p| *p != Path::new("-")) else {
            return Ok(Input {
                name: "standard input".into(),
                reader: Box::new(io::stdin().lock()),
                progress: progress::spinner("loading"),
                counts_bytes: false,
            });
        };
        let name = path.display().to_string();
        let f = File::open(path).map_err(|e| CliError::io(format!("open {name}"), e))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Input {
            progress: progress::bytes(len, &format!("loading {name}")),
            reader: Box::new(BufReader::with_capacity(1 << 20, f)),
            name,
            counts_bytes: true,
        })
    }

    /// The next line without its newline, or `None` at the end.
    fn next_line(&mut self, buf: &mut Vec<u8>) -> Result<Option<()>> {
        buf.clear();
        let n = self
            .reader
            .read_until(b'\n', buf)
            .map_err(|e| CliError::io(format!("read {}", self.name), e))?;
        if n == 0 {
            return Ok(None);
        }
        self.progress
            .inc(if self.counts_bytes { n as u64 } else { 1 });
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        Ok(Some(()))
    }
}

/// Splits a line at its first TAB and decodes both sides.
fn parse_line(codec: Codec, line: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    // A hex file edited on Windows ends lines with "\r\n"; "\r" is never hex.
    let line = match codec {
        Codec::Hex => line.strip_suffix(b"\r").unwrap_or(line),
        Codec::Text | Codec::Escaped => line,
    };
    let Some(tab) = line.iter().position(|&b| b == b'\t') else {
        return Err("no TAB between key and value".into());
    };
    let key = codec.decode(&line[..tab]).map_err(|e| format!("key {e}"))?;
    let value = codec
        .decode(&line[tab + 1..])
        .map_err(|e| format!("value {e}"))?;
    Ok((key, value))
}

/// Counts what has been committed, so an error can say what was kept.
struct Loader {
    db: Db,
    batch: WriteBatch,
    lines_in_batch: usize,
    stored: u64,
    commits: u64,
}

impl Loader {
    fn add(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), String> {
        // A batch has a byte limit too: commit early rather than fail.
        if self.batch.size_bytes() + key.len() + value.len() > MAX_BATCH_BYTES {
            self.commit().map_err(|e| e.to_string())?;
        }
        self.batch.put(key, value).map_err(|e| e.to_string())?;
        self.lines_in_batch += 1;
        if self.lines_in_batch == LINES_PER_COMMIT {
            self.commit().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.db.write(std::mem::take(&mut self.batch))?;
        self.stored += self.lines_in_batch as u64;
        self.lines_in_batch = 0;
        self.commits += 1;
        Ok(())
    }
}

pub fn run(store: &Store, file: Option<&Path>, raw: bool) -> Result<()> {
    let mut input = Input::open(file)?;
    let mut loader = Loader {
        db: store.open_writable()?,
        batch: WriteBatch::new(),
        lines_in_batch: 0,
        stored: 0,
        commits: 0,
    };
    let result = load_lines(store.codec.for_lines(raw), &mut input, &mut loader);
    input.progress.finish_and_clear();
    result?;
    let Loader {
        db,
        stored,
        commits,
        ..
    } = loader;
    crate::commands::close_after_write(db, || {
        format!(
            "{} from {} ({}) are",
            plural(stored, "pair", "pairs"),
            input.name,
            plural(commits, "commit", "commits")
        )
    })?;
    writeln!(
        io::stdout(),
        "loaded {} from {} ({})",
        plural(stored, "pair", "pairs"),
        input.name,
        plural(commits, "durable commit", "durable commits")
    )
    .map_err(stdout_error)
}

fn load_lines(codec: Codec, input: &mut Input, loader: &mut Loader) -> Result<()> {
    let mut line = Vec::new();
    let mut number = 0u64;
    // Blank lines are fine at the end of the input only: remember the first
    // of a run and complain if a pair follows it.
    let mut blank_since: Option<u64> = None;
    while input.next_line(&mut line)?.is_some() {
        number += 1;
        if line.is_empty() || line == b"\r" {
            blank_since.get_or_insert(number);
            continue;
        }
        if let Some(blank) = blank_since {
            return Err(line_error(
                input,
                loader,
                blank,
                "empty line (no TAB)".into(),
            ));
        }
        let added = parse_line(codec, &line).and_then(|(k, v)| loader.add(k, v));
        if let Err(problem) = added {
            return Err(line_error(input, loader, number, problem));
        }
    }
    loader.commit()
}

fn line_error(input: &Input, loader: &Loader, number: u64, problem: String) -> CliError {
    let kept = match loader.stored {
        0 => "nothing was stored".to_string(),
        n => format!("the first {n} pairs were stored"),
    };
    CliError::Input(format!("{} line {number}: {problem} ({kept})", input.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_at_the_first_tab() {
        let (k, v) = parse_line(Codec::Text, b"k\tv\tw").unwrap();
        assert_eq!((k.as_slice(), v.as_slice()), (&b"k"[..], &b"v\tw"[..]));
        assert!(parse_line(Codec::Text, b"kv")
            .unwrap_err()
            .contains("no TAB"));
        let (k, v) = parse_line(Codec::Hex, b"00ff\t0a\r").unwrap();
        assert_eq!((k, v), (vec![0, 255], vec![10]));
        assert!(parse_line(Codec::Hex, b"0\t00")
            .unwrap_err()
            .starts_with("key is not valid hex"));
    }
}
