//! `kivi promote ADDR`: asks the follower `kivi serve --follow` at ADDR to
//! take over as its store's writer, as Redis tools do (REPLICAOF NO ONE).
//!
//! RESP by hand rather than a Redis client crate: one command and its
//! one-line answer (after AUTH when a password is given) are all it says.

use crate::error::{CliError, Result};
use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct PromoteArgs {
    /// The follower's RESP listener: host:port, or a Unix socket path
    pub addr: String,
    /// The password of the follower's default user (or of --user)
    #[arg(long, short = 'a', value_name = "PASSWORD")]
    pub password: Option<String>,
    /// The user to authenticate as (with --password)
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
}

/// A RESP command: an array of bulk strings.
fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Sends `args`; the one-line answer, or the error it is.
fn ask(
    writer: &mut dyn Write,
    reader: &mut dyn BufRead,
    addr: &str,
    args: &[&str],
) -> Result<String> {
    writer
        .write_all(&command(args))
        .and_then(|()| writer.flush())
        .map_err(|e| CliError::io(addr, e))?;
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| CliError::io(addr, e))?;
    let line = line.trim_end().to_string();
    match line.strip_prefix('-') {
        Some(err) => Err(CliError::Input(format!("{addr}: {err}"))),
        None if line.is_empty() => Err(CliError::Input(format!(
            "{addr}: the connection closed without an answer"
        ))),
        None => Ok(line),
    }
}

pub fn run(args: &PromoteArgs) -> Result<()> {
    let started = Instant::now();
    let timeout = Some(Duration::from_secs(60));
    let (mut writer, mut reader): (Box<dyn Write>, Box<dyn BufRead>) = if args.addr.contains('/') {
        let s = std::os::unix::net::UnixStream::connect(&args.addr)
            .map_err(|e| CliError::io(&args.addr, e))?;
        s.set_read_timeout(timeout).ok();
        (
            Box::new(s.try_clone().map_err(|e| CliError::io(&args.addr, e))?),
            Box::new(BufReader::new(s)),
        )
    } else {
        let s =
            std::net::TcpStream::connect(&args.addr).map_err(|e| CliError::io(&args.addr, e))?;
        s.set_read_timeout(timeout).ok();
        (
            Box::new(s.try_clone().map_err(|e| CliError::io(&args.addr, e))?),
            Box::new(BufReader::new(s)),
        )
    };
    if let Some(password) = &args.password {
        let auth: Vec<&str> = match &args.user {
            Some(user) => vec!["AUTH", user, password],
            None => vec!["AUTH", password],
        };
        ask(&mut writer, &mut reader, &args.addr, &auth)?;
    }
    ask(
        &mut writer,
        &mut reader,
        &args.addr,
        &["REPLICAOF", "NO", "ONE"],
    )?;
    println!(
        "{}: the store's writer now (in {} ms)",
        args.addr,
        started.elapsed().as_millis()
    );
    Ok(())
}
