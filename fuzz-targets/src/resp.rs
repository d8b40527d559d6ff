//! RESP requests (`kivi serve`'s Redis listener): what any client may send.

use parser::{Args, Parser, ProtocolError, MAX_INLINE};

/// `kivi serve`'s RESP parser, compiled from its own source file: the
/// server crate's dependencies (tokio, rustls, ...) are not needed for it.
/// (What the server uses and this does not is dead here; a lint that
/// spares a crate's exported API is not spared here.)
#[path = "../../server/src/resp/parser.rs"]
#[allow(dead_code, clippy::wrong_self_convention)]
mod parser;

/// What a connection makes of its bytes: each command's arguments and the
/// bytes it took, then how it stopped (`None`: waiting for more bytes).
type Outcome = (Vec<(Vec<Vec<u8>>, usize)>, Option<ProtocolError>);

/// Parses `data` as a connection that receives it in reads of the sizes
/// `reads` gives (cycled; the whole of it at once for an empty list).
fn parse_stream(data: &[u8], reads: &[usize]) -> Outcome {
    let mut parser = Parser::default();
    let mut commands = Vec::new();
    let (mut start, mut end) = (0, 0);
    let mut read = reads.iter().cycle();
    let mut next_read = |end: usize| match read.next() {
        Some(&n) => (end + n).min(data.len()),
        None => data.len(),
    };
    end = next_read(end);
    loop {
        let buf = &data[start..end];
        match parser.parse(buf) {
            Ok(Ok(parsed)) => {
                // Every command takes at least a byte, and only bytes it has.
                assert!(parsed.len > 0 && parsed.len <= buf.len(), "{parsed:?}");
                let args = Args::of(&parsed, buf, parser.spans());
                for s in parser.spans() {
                    assert!(s.start <= s.end && s.end <= parsed.len, "span {s:?}");
                }
                commands.push((args.to_vecs(), parsed.len));
                start += parsed.len;
            }
            Ok(Err(need)) => {
                if end == data.len() {
                    return (commands, None);
                }
                assert!(need.is_none_or(|n| n > 0), "needs 0 more bytes");
                end = next_read(end);
            }
            Err(e) => return (commands, Some(e)),
        }
    }
}

/// Parses the input as one connection's bytes, all at once and again in
/// reads of a few bytes each: the parser keeps its place in a command cut
/// across reads, and must read the same commands either way.
pub fn resp_request(data: &[u8]) {
    let whole = parse_stream(data, &[]);
    // A line longer than MAX_INLINE is refused when its end has not come
    // yet, as Redis does, so only shorter inputs read the same in pieces.
    if data.len() <= MAX_INLINE {
        let sizes: Vec<usize> = data
            .iter()
            .take(4)
            .map(|&b| usize::from(b % 16) + 1)
            .collect();
        let sizes = if sizes.is_empty() { vec![1] } else { sizes };
        assert_eq!(
            whole,
            parse_stream(data, &sizes),
            "read in pieces of {sizes:?}"
        );
    }
}
