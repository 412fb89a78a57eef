//! Environment variables the launcher and node servers set.

/// Path of the node server's Unix socket (set for ranks).
pub const SERVER_URI: &str = "COHORT_SERVER_URI";
/// The job's client token, hex (set for ranks; never logged).
pub const CLIENT_TOKEN: &str = "COHORT_TOKEN";
/// Namespace of the job.
pub const NSPACE: &str = "COHORT_NSPACE";
/// Rank of this process in its namespace.
pub const RANK: &str = "COHORT_RANK";
/// Number of ranks in the job.
pub const SIZE: &str = "COHORT_SIZE";
/// Application context (MPMD program, 0-based, PMIX_APPNUM) of this rank.
pub const APPNUM: &str = "COHORT_APPNUM";
/// Local rank on the node.
pub const LOCAL_RANK: &str = "COHORT_LOCAL_RANK";
/// Node index of the hosting node server.
pub const NODE_ID: &str = "COHORT_NODE_ID";
/// Node name of the hosting node server.
pub const NODE_NAME: &str = "COHORT_NODE_NAME";
/// CPUs this rank is bound to, as a list (`0-1,4`), or `none` (set for ranks).
pub const BINDING: &str = "COHORT_BINDING";
/// Per-job secret node servers prove to each other and to the launcher (hex; set only
/// in node servers' environment, never on a command line).
pub const JOB_SECRET: &str = "COHORT_JOB_SECRET";
/// How the job's node servers gather fences and collective-method constructs (`tree`,
/// `dissemination` or `auto`; see `cohort_topology::Allgather`). Set for ranks by
/// their node server, for tools that model the collectives' critical path.
pub const ALLGATHER: &str = "COHORT_ALLGATHER";
/// Log filter (falls back to RUST_LOG).
pub const LOG: &str = "COHORT_LOG";
/// How long, in microseconds, a call blocked on its node server polls before it
/// sleeps in the kernel (see [`DEFAULT_SPIN_US`]; `0` never polls). Set for ranks from
/// `cohort run --spin-us`.
pub const SPIN_US: &str = "COHORT_SPIN_US";
/// Default polling budget of blocked calls and of node servers after activity.
///
/// Waking a sleeping process costs tens of microseconds on virtual machines (an idle
/// vCPU must be woken by an inter-processor interrupt through the hypervisor) and
/// several on bare metal; a collective's critical path has one wake-up per hop. A short
/// poll with `sched_yield` keeps the waiter runnable, so a reply is picked up without a
/// wake-up, and gives the CPU away to any other runnable process meanwhile.
pub const DEFAULT_SPIN_US: u64 = 150;

/// One turn of a polling loop: gives the CPU to any other runnable process first.
pub fn yield_cpu() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// Reads a polling budget in microseconds from `var` (`DEFAULT_SPIN_US` when unset or
/// not a number).
pub fn spin_budget_from_env(var: &str) -> std::time::Duration {
    let us = std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_SPIN_US);
    std::time::Duration::from_micros(us)
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses lower/upper-case hex; `None` on odd length or a non-hex digit.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Constant-time comparison of secrets.
pub fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `n` random bytes from the kernel.
pub fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn hex_roundtrip_and_compare() {
        let b = random_bytes(16).unwrap();
        assert_eq!(from_hex(&to_hex(&b)).unwrap(), b);
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
        assert!(secrets_equal(&b, &b));
        assert!(!secrets_equal(&b, &b[..15]));
    }
}
