//! Sets of CPUs (Linux OS indices, as `sched_setaffinity` and `/proc/*/status` number
//! them) and their list syntax `0-3,8,10-11`, the form cohort prints, logs and passes
//! to ranks in `COHORT_BINDING`.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Highest CPU number accepted from text (bounds what a hostile string can allocate).
pub const MAX_CPU: u32 = 1 << 16;

/// A set of CPUs by OS index. Serialized as its list string (`"0-3,8"`).
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    pub fn new() -> CpuSet {
        CpuSet::default()
    }

    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }

    /// Every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    pub fn intersects(&self, other: &CpuSet) -> bool {
        !self.0.is_disjoint(&other.0)
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> CpuSet {
        CpuSet(iter.into_iter().collect())
    }
}

impl<const N: usize> From<[u32; N]> for CpuSet {
    fn from(cpus: [u32; N]) -> CpuSet {
        cpus.into_iter().collect()
    }
}

/// The list syntax: ranges of consecutive CPUs joined by commas; empty for no CPU.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut cpus = self.0.iter().copied().peekable();
        let mut first = true;
        while let Some(start) = cpus.next() {
            let mut end = start;
            while cpus.peek() == Some(&(end + 1)) {
                end += 1;
                cpus.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

/// Why a CPU list did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a CPU list like 0-3,8: {why}")]
pub struct CpuListError {
    pub text: String,
    pub why: &'static str,
}

impl FromStr for CpuSet {
    type Err = CpuListError;

    /// Parses `0-3,8,10-11` (whitespace around items is ignored; empty = no CPU).
    fn from_str(s: &str) -> Result<CpuSet, CpuListError> {
        let err = |why| CpuListError {
            text: s.chars().take(80).collect(),
            why,
        };
        let cpu = |t: &str| -> Result<u32, CpuListError> {
            let n: u32 = t.trim().parse().map_err(|_| err("not a CPU number"))?;
            if n > MAX_CPU {
                return Err(err("CPU number too large"));
            }
            Ok(n)
        };
        let mut set = CpuSet::new();
        if s.trim().is_empty() {
            return Ok(set);
        }
        for item in s.split(',') {
            match item.split_once('-') {
                Some((lo, hi)) => {
                    let (lo, hi) = (cpu(lo)?, cpu(hi)?);
                    if lo > hi {
                        return Err(err("descending range"));
                    }
                    set.0.extend(lo..=hi);
                }
                None => set.insert(cpu(item)?),
            }
        }
        Ok(set)
    }
}

impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CpuSet, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_syntax_roundtrips() {
        for text in ["", "0", "0-1", "0-3,8,10-11", "5,7,9"] {
            let set: CpuSet = text.parse().unwrap();
            assert_eq!(set.to_string(), text);
        }
        let set: CpuSet = " 3, 0-1 ,2".parse().unwrap();
        assert_eq!(set.to_string(), "0-3");
        assert_eq!(set.len(), 4);
    }

    #[test]
    fn bad_lists_are_refused() {
        for text in ["a", "1-", "3-1", "1,,2", "-", "99999999"] {
            assert!(text.parse::<CpuSet>().is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::from([0, 1, 2]);
        let b = CpuSet::from([2, 3]);
        assert!(a.intersects(&b));
        assert_eq!(a.intersection(&b), CpuSet::from([2]));
        assert_eq!(a.union(&b).to_string(), "0-3");
        assert!(CpuSet::from([1]).is_subset(&a));
        assert!(!b.is_subset(&a));
    }
}
