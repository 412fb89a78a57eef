//! One-line digests of what a rank saw of a group construct, so that two runs of the
//! same job — the simulator (`cohort-sim replay`) and real node servers (the
//! `sim-compare` scenario of the test rank program) — can be compared line by line.

use crate::ids::ProcId;
use crate::value::{Info, Value};

/// Group id the comparison job constructs.
pub const COMPARE_GROUP: &str = "sim-compare";
/// Key of the data every rank posts (remote scope).
pub const DATA_KEY: &str = "sim.data";
/// Key of every rank's group-info contribution.
pub const INFO_KEY: &str = "sim.rank";

/// The value rank `rank` posts under [`DATA_KEY`]: `len` bytes, a function of the rank.
pub fn posted_value(rank: u32, len: usize) -> Value {
    let seed = rank.wrapping_mul(2_654_435_761).to_le_bytes();
    Value::Bytes((0..len).map(|i| seed[i % 4] ^ (i as u8)).collect())
}

/// FNV-1a's starting state (its 64-bit offset basis).
pub const FNV1A_START: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(FNV1A_START, bytes)
}

/// FNV-1a state `h` after `bytes` more (so a key can be hashed in parts).
pub fn fnv1a_extend(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn value_digest(v: &Value) -> String {
    match v.as_bytes() {
        Some(b) => format!("{}B#{:016x}", b.len(), fnv1a(b)),
        None => format!("{v:?}"),
    }
}

/// `rank R members A,B,… ctx C info A:k=v;… data A:digest,…` — ranks are printed
/// without their namespace (the namespace is the caller's to fix).
pub fn group_view_line(
    rank: u32,
    members: &[ProcId],
    context_id: Option<u64>,
    group_info: &[(ProcId, Info)],
    data: &[(ProcId, Value)],
) -> String {
    let members = members
        .iter()
        .map(|p| p.rank.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let info = group_info
        .iter()
        .map(|(p, info)| {
            let kv = info
                .iter()
                .map(|(k, v)| format!("{k}={}", value_digest(v)))
                .collect::<Vec<_>>()
                .join("+");
            format!("{}:{kv}", p.rank)
        })
        .collect::<Vec<_>>()
        .join(";");
    let data = data
        .iter()
        .map(|(p, v)| format!("{}:{}", p.rank, value_digest(v)))
        .collect::<Vec<_>>()
        .join(",");
    let ctx = context_id.map_or("none".to_string(), |c| format!("{c:#x}"));
    format!("rank {rank} members {members} ctx {ctx} info {info} data {data}")
}
