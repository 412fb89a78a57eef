//! Slurm hostlist expressions: `node[0-3]`, `n[1-4,7]`, `rack1-n[01-16]` (zero padding
//! follows the lower bound's width), `rack[1-2]-n[1-4]` (several brackets expand as a
//! product, leftmost slowest), and comma-separated lists of all of these
//! (`a,b[1-2],c`).
//!
//! [`expand`] turns an expression into names; [`compress`] writes names back as an
//! expression (used to log sets of nodes compactly).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Most names one expression may expand to (so `n[0-999999999]` is an error, not an
/// out-of-memory).
pub const MAX_NAMES: usize = 1 << 20;

/// Why a hostlist expression cannot be expanded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("empty host name in {expr:?}")]
    EmptyName { expr: String },
    #[error("unbalanced brackets in {expr:?}")]
    UnbalancedBracket { expr: String },
    #[error("nested brackets in {expr:?}")]
    NestedBracket { expr: String },
    #[error("bad range {range:?} in {expr:?} (expected N or LO-HI, decimal digits)")]
    BadRange { expr: String, range: String },
    #[error("range {range:?} in {expr:?} runs backwards")]
    ReversedRange { expr: String, range: String },
    #[error("{expr:?} expands to more than {MAX_NAMES} names")]
    TooMany { expr: String },
}

/// One piece of a bracketed element: literal text or a set of numbers.
enum Piece<'a> {
    Text(&'a str),
    /// `(lo, hi, width)` ranges, in the order written.
    Ranges(Vec<(u64, u64, usize)>),
}

/// Expands a hostlist expression into host names, in the order written. Duplicates are
/// kept (the caller decides what they mean).
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for element in split_top_level(expr)? {
        if element.is_empty() {
            return Err(HostlistError::EmptyName { expr: expr.into() });
        }
        expand_element(expr, element, &mut out)?;
    }
    Ok(out)
}

/// Splits at commas outside brackets; checks bracket balance.
fn split_top_level(expr: &str) -> Result<Vec<&str>, HostlistError> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '[' => {
                if depth > 0 {
                    return Err(HostlistError::NestedBracket { expr: expr.into() });
                }
                depth += 1;
            }
            ']' => {
                if depth == 0 {
                    return Err(HostlistError::UnbalancedBracket { expr: expr.into() });
                }
                depth -= 1;
            }
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(HostlistError::UnbalancedBracket { expr: expr.into() });
    }
    parts.push(&expr[start..]);
    Ok(parts)
}

fn expand_element(expr: &str, element: &str, out: &mut Vec<String>) -> Result<(), HostlistError> {
    let mut pieces = Vec::new();
    let mut rest = element;
    while let Some(open) = rest.find('[') {
        if open > 0 {
            pieces.push(Piece::Text(&rest[..open]));
        }
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| HostlistError::UnbalancedBracket { expr: expr.into() })?;
        pieces.push(Piece::Ranges(parse_ranges(expr, &rest[open + 1..close])?));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    // Size check before allocating anything.
    let mut total: usize = 1;
    for p in &pieces {
        if let Piece::Ranges(rs) = p {
            let count = rs.iter().fold(0usize, |acc, &(lo, hi, _)| {
                acc.saturating_add(
                    usize::try_from(hi - lo)
                        .unwrap_or(usize::MAX)
                        .saturating_add(1),
                )
            });
            total = total.saturating_mul(count);
        }
    }
    if total.saturating_add(out.len()) > MAX_NAMES {
        return Err(HostlistError::TooMany { expr: expr.into() });
    }
    let mut names = vec![String::new()];
    for p in &pieces {
        match p {
            Piece::Text(t) => names.iter_mut().for_each(|n| n.push_str(t)),
            Piece::Ranges(rs) => {
                let mut next = Vec::with_capacity(names.len());
                for n in &names {
                    for &(lo, hi, width) in rs {
                        for v in lo..=hi {
                            let mut s = n.clone();
                            let _ = write!(s, "{v:0width$}");
                            next.push(s);
                        }
                    }
                }
                names = next;
            }
        }
    }
    out.extend(names);
    Ok(())
}

/// `1-4,7,09-11` → `[(1,4,1), (7,7,1), (9,11,2)]`.
fn parse_ranges(expr: &str, inside: &str) -> Result<Vec<(u64, u64, usize)>, HostlistError> {
    let bad = |range: &str| HostlistError::BadRange {
        expr: expr.into(),
        range: range.into(),
    };
    let number = |s: &str, range: &str| -> Result<u64, HostlistError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(range));
        }
        s.parse().map_err(|_| bad(range))
    };
    let mut out = Vec::new();
    for range in inside.split(',') {
        let (lo_s, hi_s) = range.split_once('-').unwrap_or((range, range));
        let (lo, hi) = (number(lo_s, range)?, number(hi_s, range)?);
        if hi < lo {
            return Err(HostlistError::ReversedRange {
                expr: expr.into(),
                range: range.into(),
            });
        }
        out.push((lo, hi, lo_s.len()));
    }
    Ok(out)
}

/// How the digits at the end of a name are written: zero-padded to a fixed width, or
/// plain (no leading zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Digits {
    Plain,
    Padded(usize),
}

/// Writes `names` as a hostlist expression that [`expand`]s to the same set of names:
/// names sharing a prefix and digit style are merged into bracketed ranges. Names are
/// grouped by prefix (in order of first appearance) and numbers sorted; duplicates
/// are dropped. Names containing `[`, `]` or `,` cannot be expressed and are written
/// as they are.
pub fn compress<S: AsRef<str>>(names: &[S]) -> String {
    // prefix+style → numbers, keeping the first-appearance order of groups.
    let mut groups: Vec<((String, Digits), Vec<u64>)> = Vec::new();
    let mut at: BTreeMap<(String, Digits), usize> = BTreeMap::new();
    let mut literal: Vec<&str> = Vec::new();
    for name in names {
        let name = name.as_ref();
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, num) = name.split_at(name.len() - digits);
        let parsed = num.parse::<u64>().ok().filter(|_| num.len() <= 19);
        let Some(value) = parsed else {
            if !literal.contains(&name) {
                literal.push(name);
            }
            continue;
        };
        let style = if num.len() > 1 && num.starts_with('0') {
            Digits::Padded(num.len())
        } else {
            Digits::Plain
        };
        let key = (prefix.to_string(), style);
        let i = *at.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(value);
    }
    let mut parts: Vec<String> = literal.into_iter().map(String::from).collect();
    for ((prefix, style), mut nums) in groups {
        nums.sort_unstable();
        nums.dedup();
        let width = match style {
            Digits::Plain => 0,
            Digits::Padded(w) => w,
        };
        if nums.len() == 1 {
            parts.push(format!("{prefix}{:0width$}", nums[0]));
            continue;
        }
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < nums.len() {
            let mut j = i;
            while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
                j += 1;
            }
            ranges.push(if i == j {
                format!("{:0width$}", nums[i])
            } else {
                format!("{:0width$}-{:0width$}", nums[i], nums[j])
            });
            i = j + 1;
        }
        parts.push(format!("{prefix}[{}]", ranges.join(",")));
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(expr: &str) -> Vec<String> {
        expand(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    #[test]
    fn slurm_examples() {
        assert_eq!(x("node[0-3]"), ["node0", "node1", "node2", "node3"]);
        assert_eq!(x("n[1-4,7]"), ["n1", "n2", "n3", "n4", "n7"]);
        assert_eq!(x("rack1-n[01-03]"), ["rack1-n01", "rack1-n02", "rack1-n03"]);
        assert_eq!(x("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(x("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(x("a,b[1-2],c"), ["a", "b1", "b2", "c"]);
        assert_eq!(x("solo"), ["solo"]);
        assert_eq!(x("n[5]"), ["n5"]);
        assert_eq!(x("n[07]x"), ["n07x"]);
        assert_eq!(
            x("r[1-2]-n[1-2]"),
            ["r1-n1", "r1-n2", "r2-n1", "r2-n2"],
            "several brackets expand as a product, leftmost slowest"
        );
        assert_eq!(x("s[1-2],top"), ["s1", "s2", "top"]);
    }

    #[test]
    fn malformed_expressions_are_typed_errors() {
        let e = |s: &str| expand(s).unwrap_err();
        assert!(matches!(
            e("n[1-3"),
            HostlistError::UnbalancedBracket { .. }
        ));
        assert!(matches!(
            e("n1-3]"),
            HostlistError::UnbalancedBracket { .. }
        ));
        assert!(matches!(e("n[[1]]"), HostlistError::NestedBracket { .. }));
        assert!(matches!(e("n[a-b]"), HostlistError::BadRange { .. }));
        assert!(matches!(e("n[]"), HostlistError::BadRange { .. }));
        assert!(matches!(e("n[1-]"), HostlistError::BadRange { .. }));
        assert!(matches!(e("n[1--2]"), HostlistError::BadRange { .. }));
        assert!(matches!(e("n[5-2]"), HostlistError::ReversedRange { .. }));
        assert!(matches!(e("a,,b"), HostlistError::EmptyName { .. }));
        assert!(matches!(e(""), HostlistError::EmptyName { .. }));
        assert!(matches!(e("a,"), HostlistError::EmptyName { .. }));
        assert!(matches!(e("n[0-999999999]"), HostlistError::TooMany { .. }));
        assert!(matches!(
            e("a[0-9999]b[0-9999]"),
            HostlistError::TooMany { .. }
        ));
        assert!(matches!(
            e("n[99999999999999999999999]"),
            HostlistError::BadRange { .. }
        ));
    }

    /// A small deterministic generator (no dependency on a randomness crate).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % below
        }
    }

    /// Property: an expression built from random prefixes, ranges and widths expands to
    /// exactly what a naive generator produces, and `compress` round-trips any set of
    /// names through `expand`.
    #[test]
    fn expansion_matches_a_naive_generator_and_compress_round_trips() {
        let prefixes = ["n", "node", "rack1-n", "cn-", "x9y"];
        let mut rng = Lcg(0x5eed);
        for _ in 0..500 {
            let mut expr_parts = Vec::new();
            let mut expected = Vec::new();
            for _ in 0..=rng.next(3) {
                let prefix = prefixes[rng.next(prefixes.len() as u64) as usize];
                let suffix = if rng.next(4) == 0 { "-ib" } else { "" };
                let mut ranges = Vec::new();
                let mut nums = Vec::new();
                for _ in 0..=rng.next(3) {
                    let width = 1 + rng.next(3) as usize;
                    let lo = rng.next(120);
                    let hi = lo + rng.next(12);
                    let lo_s = format!("{lo:0width$}");
                    if lo == hi && rng.next(2) == 0 {
                        ranges.push(lo_s.clone());
                    } else {
                        ranges.push(format!("{lo_s}-{hi}"));
                    }
                    let w = lo_s.len();
                    nums.extend((lo..=hi).map(|v| format!("{v:0w$}")));
                }
                expr_parts.push(format!("{prefix}[{}]{suffix}", ranges.join(",")));
                expected.extend(nums.into_iter().map(|n| format!("{prefix}{n}{suffix}")));
            }
            let expr = expr_parts.join(",");
            let got = x(&expr);
            assert_eq!(got, expected, "{expr}");

            // compress → expand gives back the same set (suffix-free names only: a
            // suffix after the digits is not something compress merges).
            let plain: Vec<String> = got
                .iter()
                .filter(|n| !n.ends_with("-ib"))
                .cloned()
                .collect();
            if plain.is_empty() {
                continue;
            }
            let mut want = plain.clone();
            want.sort();
            want.dedup();
            let packed = compress(&plain);
            let mut back = x(&packed);
            back.sort();
            let before = back.len();
            back.dedup();
            assert_eq!(before, back.len(), "compress wrote a name twice: {packed}");
            assert_eq!(back, want, "{packed}");
        }
    }

    #[test]
    fn compress_is_compact() {
        let names: Vec<String> = (0..8).map(|i| format!("node{i}")).collect();
        assert_eq!(compress(&names), "node[0-7]");
        assert_eq!(
            compress(&["n01", "n02", "n04", "n1", "a"]),
            "a,n[01-02,04],n1"
        );
        assert_eq!(compress(&["n9", "n10", "n11"]), "n[9-11]");
        assert_eq!(compress::<&str>(&[]), "");
    }
}
