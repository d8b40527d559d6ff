//! RESP requests: arrays of bulk strings (what every client library sends)
//! and inline commands (a line of words, what a person types into telnet).
//! Sizes are checked as soon as a header announces them, so an oversized
//! bulk string is refused before any of it is buffered.

/// Longest bulk string accepted: the largest value kivi stores.
pub const MAX_BULK: usize = kivi::limits::MAX_VALUE_LEN;
/// Most arguments in one command.
pub const MAX_ARGS: usize = 1 << 20;
/// Longest inline command line, and longest header line.
pub const MAX_INLINE: usize = 64 << 10;
/// Most bytes one command may take, headers included: what the largest
/// batch holds, and a mebibyte for the rest. A longer command is refused
/// once its headers pass this, before it is buffered: a connection's
/// memory stays bounded whatever a client sends.
pub const MAX_REQUEST: usize = kivi::limits::MAX_BATCH_BYTES + (1 << 20);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: invalid multibulk length")]
    BadArrayLength,
    #[error("Protocol error: invalid bulk length")]
    BadBulkLength,
    #[error("Protocol error: bulk string of {0} bytes is over the limit of {MAX_BULK}")]
    BulkTooLarge(u64),
    #[error("Protocol error: expected '$', got '{0}'")]
    ExpectedBulk(char),
    #[error("Protocol error: too big inline request")]
    InlineTooLong,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: a bulk string is not followed by CRLF")]
    MissingCrlf,
    #[error("Protocol error: a request of more than {MAX_REQUEST} bytes")]
    RequestTooLarge,
}

/// One parsed command: the bytes it took, and for an inline command its
/// words, unquoted. An array's arguments are not copied: the parser
/// records where each lies in the buffer (`spans`), and [`Args`] reads
/// them there.
#[derive(Debug, PartialEq, Eq)]
pub struct Parsed {
    pub len: usize,
    pub inline: Option<Vec<Vec<u8>>>,
}

/// Where one argument of an array lies in the bytes parsed.
pub type Span = std::ops::Range<usize>;

/// How many more bytes the command at the front needs, when known: lets
/// the reader size its buffer for a large bulk string once.
pub type Need = Option<usize>;

/// Parses one connection's commands. It keeps its place in a command not
/// all read yet: the arguments found are not parsed again when more bytes
/// come, so a command parses in time linear in its size however many reads
/// bring it (a command of a million short arguments, started over at each
/// read, took time quadratic in its size).
#[derive(Debug, Default)]
pub struct Parser {
    /// Where the arguments of the last array parsed lie, in its bytes.
    spans: Vec<Span>,
    /// In an array not all there yet: its argument count, and where the
    /// next argument's header starts.
    partial: Option<(usize, usize)>,
}

impl Parser {
    /// The command at the front of `buf`, `Ok(Err(need))` if it is not all
    /// there yet; then the next call's `buf` must start with the same
    /// command, with more of it. An array's arguments are left in
    /// [`spans`](Self::spans), each a range of `buf`.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Result<Parsed, Need>, ProtocolError> {
        let r = match self.partial.take() {
            Some((n, at)) => {
                debug_assert_eq!(buf.first(), Some(&b'*'), "resumed on another command");
                self.array_from(buf, n, at)
            }
            None => {
                self.spans.clear();
                match buf.first() {
                    None => Ok(Err(None)),
                    Some(b'*') => self.array(buf),
                    Some(_) => parse_inline(buf),
                }
            }
        };
        if r.is_err() {
            self.partial = None;
        }
        r
    }

    /// The arguments of the last array parsed.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    fn array(&mut self, buf: &[u8]) -> Result<Result<Parsed, Need>, ProtocolError> {
        let Some((head, at)) = line(buf, 0)? else {
            return Ok(Err(None));
        };
        let n = number(&head[1..]).ok_or(ProtocolError::BadArrayLength)?;
        if n > MAX_ARGS as i64 {
            return Err(ProtocolError::BadArrayLength);
        }
        if n <= 0 {
            // An empty (or null) array: nothing to run; skip it.
            return Ok(Ok(Parsed {
                len: at,
                inline: None,
            }));
        }
        self.array_from(buf, n as usize, at)
    }

    /// Goes on with an array of `n` arguments whose next argument's header
    /// starts at `at` (`spans` holds those before).
    fn array_from(
        &mut self,
        buf: &[u8],
        n: usize,
        mut at: usize,
    ) -> Result<Result<Parsed, Need>, ProtocolError> {
        while self.spans.len() < n {
            let Some((h, body)) = line(buf, at)? else {
                self.partial = Some((n, at));
                return Ok(Err(None));
            };
            match h.first() {
                Some(b'$') => {}
                Some(&c) => return Err(ProtocolError::ExpectedBulk(c as char)),
                None => return Err(ProtocolError::ExpectedBulk(' ')),
            }
            let len = number(&h[1..]).ok_or(ProtocolError::BadBulkLength)?;
            if len < 0 {
                return Err(ProtocolError::BadBulkLength);
            }
            if len as u64 > MAX_BULK as u64 {
                return Err(ProtocolError::BulkTooLarge(len as u64));
            }
            let len = len as usize;
            let end = body + len + 2;
            if end > MAX_REQUEST {
                return Err(ProtocolError::RequestTooLarge);
            }
            if buf.len() < end {
                self.partial = Some((n, at));
                return Ok(Err(Some(end - buf.len())));
            }
            if &buf[body + len..end] != b"\r\n" {
                return Err(ProtocolError::MissingCrlf);
            }
            self.spans.push(body..body + len);
            at = end;
        }
        Ok(Ok(Parsed {
            len: at,
            inline: None,
        }))
    }
}

/// A command's arguments, wherever they lie: in the bytes read (an array,
/// by spans) or in vectors of their own (an inline command, or a command
/// held for later). Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub enum Args<'a> {
    Wire { buf: &'a [u8], spans: &'a [Span] },
    Owned(&'a [Vec<u8>]),
}

impl<'a> Args<'a> {
    /// The arguments of `parsed`, parsed from `buf` into `spans`.
    pub fn of(parsed: &'a Parsed, buf: &'a [u8], spans: &'a [Span]) -> Args<'a> {
        match &parsed.inline {
            Some(words) => Args::Owned(words),
            None => Args::Wire { buf, spans },
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Args::Wire { spans, .. } => spans.len(),
            Args::Owned(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Argument `i`; panics past the end, as a slice does.
    pub fn get(&self, i: usize) -> &'a [u8] {
        match *self {
            Args::Wire { buf, spans } => &buf[spans[i].clone()],
            Args::Owned(v) => &v[i],
        }
    }

    /// The arguments from `from` on.
    pub fn from(&self, from: usize) -> Args<'a> {
        match *self {
            Args::Wire { buf, spans } => Args::Wire {
                buf,
                spans: &spans[from..],
            },
            Args::Owned(v) => Args::Owned(&v[from..]),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let this = *self;
        (0..this.len()).map(move |i| this.get(i))
    }

    /// Each argument copied into a vector of its own: for a command that
    /// is kept (queued in a transaction) or runs off the hot path.
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }
}

impl std::ops::Index<usize> for Args<'_> {
    type Output = [u8];

    fn index(&self, i: usize) -> &[u8] {
        self.get(i)
    }
}

/// The line starting at `at`, without its CRLF, and where the next starts.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let rest = &buf[at..];
    match rest.iter().position(|&b| b == b'\n') {
        Some(i) => {
            let l = &rest[..i];
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            Ok(Some((l, at + i + 1)))
        }
        None if rest.len() > MAX_INLINE => Err(ProtocolError::InlineTooLong),
        None => Ok(None),
    }
}

/// A decimal number as RESP headers write it (an optional `-`, digits), by
/// hand: headers come before every argument, and `str::parse` wants UTF-8
/// checked first.
fn number(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        // At most 18 digits: no overflow.
        n = n * 10 + i64::from(d - b'0');
    }
    Some(if negative { -n } else { n })
}

/// An inline command: words separated by spaces, with "double" (escapes
/// \n \r \t \\ \" \xHH) and 'single' quoted words, as redis-server reads it.
fn parse_inline(buf: &[u8]) -> Result<Result<Parsed, Need>, ProtocolError> {
    let Some((l, next)) = line(buf, 0)? else {
        return Ok(Err(None));
    };
    let mut args = Vec::new();
    let mut i = 0;
    while i < l.len() {
        while i < l.len() && l[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == l.len() {
            break;
        }
        let mut word = Vec::new();
        match l[i] {
            b'"' => {
                i += 1;
                loop {
                    match l.get(i) {
                        None => return Err(ProtocolError::UnbalancedQuotes),
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => {
                            let c = *l.get(i + 1).ok_or(ProtocolError::UnbalancedQuotes)?;
                            let hex = l
                                .get(i + 2..i + 4)
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u8::from_str_radix(h, 16).ok());
                            match (c, hex) {
                                (b'x', Some(h)) => {
                                    word.push(h);
                                    i += 4;
                                    continue;
                                }
                                (b'n', _) => word.push(b'\n'),
                                (b'r', _) => word.push(b'\r'),
                                (b't', _) => word.push(b'\t'),
                                (b'b', _) => word.push(8),
                                (b'a', _) => word.push(7),
                                (c, _) => word.push(c),
                            }
                            i += 2;
                        }
                        Some(&c) => {
                            word.push(c);
                            i += 1;
                        }
                    }
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    match l.get(i) {
                        None => return Err(ProtocolError::UnbalancedQuotes),
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') if l.get(i + 1) == Some(&b'\'') => {
                            word.push(b'\'');
                            i += 2;
                        }
                        Some(&c) => {
                            word.push(c);
                            i += 1;
                        }
                    }
                }
            }
            _ => {
                while i < l.len() && !l[i].is_ascii_whitespace() {
                    word.push(l[i]);
                    i += 1;
                }
            }
        }
        // A closing quote must end the word.
        if i < l.len() && !l[i].is_ascii_whitespace() && matches!(l[i - 1], b'"' | b'\'') {
            return Err(ProtocolError::UnbalancedQuotes);
        }
        args.push(word);
    }
    Ok(Ok(Parsed {
        len: next,
        inline: Some(args),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command's arguments, copied out, and the bytes it took.
    type Command = (Vec<Vec<u8>>, usize);

    /// `parse`, with the arguments copied out.
    fn parse(buf: &[u8]) -> Result<Result<Command, Need>, ProtocolError> {
        let mut parser = Parser::default();
        Ok(parser.parse(buf)?.map(|p| {
            let args = Args::of(&p, buf, parser.spans()).to_vecs();
            (args, p.len)
        }))
    }

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn arrays_parse_whole_and_wait_when_cut() {
        let wire = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nva\r\nl\r\n*1\r\n$4\r\nPING\r\n";
        let first = 31;
        assert_eq!(
            parse(wire),
            Ok(Ok((
                vec![b"SET".to_vec(), b"k".to_vec(), b"va\r\nl".to_vec()],
                first
            )))
        );
        for cut in 0..first {
            assert!(matches!(parse(&wire[..cut]), Ok(Err(_))), "cut at {cut}");
        }
        assert_eq!(
            parse(&wire[first..]),
            Ok(Ok((args(&["PING"]), wire.len() - first)))
        );
    }

    #[test]
    fn args_read_the_same_from_the_wire_and_from_vectors() {
        let wire = b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$2\r\nEX\r\n";
        let mut parser = Parser::default();
        let p = parser.parse(wire).unwrap().unwrap();
        let on_wire = Args::of(&p, wire, parser.spans());
        let owned = args(&["SET", "k", "", "EX"]);
        for a in [on_wire, Args::Owned(&owned)] {
            assert_eq!((a.len(), a.is_empty()), (4, false));
            assert_eq!(
                (&a[0], a.get(2), &a[3]),
                (&b"SET"[..], &b""[..], &b"EX"[..])
            );
            assert_eq!(a.from(1).to_vecs(), owned[1..].to_vec());
            assert_eq!(a.iter().map(<[u8]>::len).sum::<usize>(), 6);
        }
    }

    #[test]
    fn numbers_are_decimal_and_bounded() {
        assert_eq!(number(b"0"), Some(0));
        assert_eq!(number(b"-1"), Some(-1));
        assert_eq!(number(b"123456789012345678"), Some(123_456_789_012_345_678));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"1x",
            b" 1",
            b"1234567890123456789",
            b"\xff",
        ] {
            assert_eq!(number(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_command_read_in_pieces_is_parsed_where_it_was_left() {
        let wire: Vec<u8> = {
            let mut w = b"*1001\r\n$4\r\nMSET\r\n".to_vec();
            for i in 0..500 {
                w.extend(format!("$5\r\nk{i:04}\r\n$3\r\nv{:02}\r\n", i % 100).bytes());
            }
            w
        };
        let whole = parse(&wire).unwrap().unwrap();
        for piece in [1, 7, 100, 4096] {
            let mut parser = Parser::default();
            let mut upto = 0;
            let got = loop {
                upto = (upto + piece).min(wire.len());
                match parser.parse(&wire[..upto]).unwrap() {
                    Ok(p) => break (Args::of(&p, &wire, parser.spans()).to_vecs(), p.len),
                    Err(_) => assert!(upto < wire.len(), "complete but not parsed"),
                }
            };
            assert_eq!(got, whole, "pieces of {piece}");
        }
        // Resumed, it does not read again what it found: a header it has
        // passed may change under it unnoticed (the caller never does that).
        let mut parser = Parser::default();
        assert!(parser.parse(&wire[..wire.len() / 2]).unwrap().is_err());
        let mut changed = wire.clone();
        changed[8] = b'x';
        let p = parser.parse(&changed).unwrap().unwrap();
        assert_eq!(p.len, wire.len());
        // A fresh parser refuses it.
        assert!(Parser::default().parse(&changed).is_err());
        // After a complete command the next starts afresh.
        let mut parser = Parser::default();
        assert!(parser.parse(b"*2\r\n$3\r\nGET\r\n").unwrap().is_err());
        assert!(parser
            .parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
            .unwrap()
            .is_ok());
        let p = parser.parse(b"*1\r\n$4\r\nPING\r\n").unwrap().unwrap();
        assert_eq!(
            Args::of(&p, b"*1\r\n$4\r\nPING\r\n", parser.spans()).to_vecs(),
            args(&["PING"])
        );
    }

    #[test]
    fn a_request_past_the_limit_is_refused_before_it_is_buffered() {
        // Four values of the largest size, and a fifth announced: refused
        // at the fifth header, its bytes never asked for.
        let big = MAX_BULK;
        let mut wire = b"*6\r\n$4\r\nMSET\r\n".to_vec();
        for _ in 0..4 {
            wire.extend(format!("${big}\r\n").bytes());
            wire.resize(wire.len() + big, b'v');
            wire.extend(b"\r\n");
        }
        assert!(wire.len() < MAX_REQUEST);
        let mut before = wire.clone();
        before.extend(b"$1\r\n");
        assert_eq!(parse(&before), Ok(Err(Some(3))));
        wire.extend(format!("${big}\r\n").bytes());
        assert_eq!(parse(&wire), Err(ProtocolError::RequestTooLarge));
    }

    #[test]
    fn a_large_bulk_string_says_how_much_it_needs() {
        assert_eq!(
            parse(b"*2\r\n$3\r\nGET\r\n$1000\r\nab"),
            Ok(Err(Some(1000)))
        );
    }

    #[test]
    fn oversized_and_malformed_frames_are_refused() {
        let huge = format!("*2\r\n$3\r\nSET\r\n${}\r\n", MAX_BULK + 1);
        assert_eq!(
            parse(huge.as_bytes()),
            Err(ProtocolError::BulkTooLarge(MAX_BULK as u64 + 1))
        );
        assert_eq!(parse(b"*x\r\n"), Err(ProtocolError::BadArrayLength));
        assert_eq!(
            parse(format!("*{}\r\n", MAX_ARGS + 1).as_bytes()),
            Err(ProtocolError::BadArrayLength)
        );
        assert_eq!(
            parse(b"*1\r\n+OK\r\n"),
            Err(ProtocolError::ExpectedBulk('+'))
        );
        assert_eq!(parse(b"*1\r\n$-1\r\n"), Err(ProtocolError::BadBulkLength));
        assert_eq!(parse(b"*1\r\n$2\r\nabcd"), Err(ProtocolError::MissingCrlf));
        let long = vec![b'a'; MAX_INLINE + 1];
        assert_eq!(parse(&long), Err(ProtocolError::InlineTooLong));
    }

    #[test]
    fn inline_commands_split_and_unquote() {
        let (words, _) = parse(b"set \"a b\\x41\\n\" 'it\\'s'  x\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            words,
            vec![
                b"set".to_vec(),
                b"a bA\n".to_vec(),
                b"it's".to_vec(),
                b"x".to_vec()
            ]
        );
        assert_eq!(
            parse(b"get \"open\r\n"),
            Err(ProtocolError::UnbalancedQuotes)
        );
        assert_eq!(
            parse(b"get \"a\"b\r\n"),
            Err(ProtocolError::UnbalancedQuotes)
        );
        assert_eq!(parse(b"ping"), Ok(Err(None)));
        assert_eq!(parse(b"\r\n"), Ok(Ok((vec![], 2))));
    }
}
