//! Glob patterns as Redis matches them (`SCAN ... MATCH`, `CONFIG GET`):
//! `*` any bytes, `?` one byte, `[abc]`, `[^abc]`, `[a-z]` sets, `\x` the
//! byte x itself. Bytes, not characters.

/// Whether `s` matches `pattern` whole.
pub fn matches(pattern: &[u8], s: &[u8]) -> bool {
    // Iterative with one backtrack point for the last `*`: linear in
    // practice, and never recursion a hostile pattern could exhaust.
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, i));
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((hit, after)) = set(pattern, p, s[i]) {
                        if hit {
                            p = after;
                            i += 1;
                            continue;
                        }
                    } else if s[i] == b'[' {
                        // An unclosed `[` is a literal.
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == s[i] {
                        p += 2;
                        i += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[i] {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last `*` take one more byte.
        match star {
            Some((sp, si)) => {
                star = Some((sp, si + 1));
                p = sp;
                i = si + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether byte `c` is in the set starting at `pattern[at] == b'['`, and
/// where the pattern continues after it; `None` if the set is not closed.
fn set(pattern: &[u8], at: usize, c: u8) -> Option<(bool, usize)> {
    let mut p = at + 1;
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut hit = false;
    let mut first = true;
    loop {
        let b = *pattern.get(p)?;
        if b == b']' && !first {
            return Some((hit != negate, p + 1));
        }
        first = false;
        if b == b'\\' {
            let e = *pattern.get(p + 1)?;
            hit |= e == c;
            p += 2;
        } else if pattern.get(p + 1) == Some(&b'-')
            && pattern.get(p + 2).is_some_and(|&e| e != b']')
        {
            let (lo, hi) = (b.min(pattern[p + 2]), b.max(pattern[p + 2]));
            hit |= (lo..=hi).contains(&c);
            p += 3;
        } else {
            hit |= b == c;
            p += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_rules() {
        let yes = |p: &str, s: &str| assert!(matches(p.as_bytes(), s.as_bytes()), "{p} ~ {s}");
        let no = |p: &str, s: &str| assert!(!matches(p.as_bytes(), s.as_bytes()), "{p} !~ {s}");
        yes("*", "");
        yes("*", "anything");
        yes("user:*", "user:1");
        no("user:*", "use");
        yes("h?llo", "hello");
        no("h?llo", "hllo");
        yes("h[ae]llo", "hallo");
        no("h[ae]llo", "hillo");
        yes("h[^e]llo", "hallo");
        no("h[^e]llo", "hello");
        yes("h[a-b]llo", "hbllo");
        no("h[a-b]llo", "hcllo");
        yes("a\\*b", "a*b");
        no("a\\*b", "axb");
        yes("*a*b*c*", "xxaxxbxxcxx");
        no("*a*b*c*", "xxaxxcxxbxx");
        yes("[", "[");
        yes("a*", "a");
        yes("**x", "x");
        no("", "x");
        yes("", "");
        // Backtracking stays linear: this would take ages with naive recursion.
        let long = "a".repeat(10_000);
        no(&"*a".repeat(50), &format!("{long}b"));
    }
}
