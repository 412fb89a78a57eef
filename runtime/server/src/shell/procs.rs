//! The few raw process calls the shell needs: parent-death signals for ranks,
//! signalling the process groups we created, and finding what is left in them.

/// Sends `signal` to process group `pgid`; `false` if the group is gone.
pub fn signal_group(pgid: u32, signal: i32) -> bool {
    match libc::pid_t::try_from(pgid) {
        // SAFETY: kill(2) on a group id we created.
        Ok(pgid) if pgid > 1 => unsafe { libc::kill(-pgid, signal) == 0 },
        _ => false,
    }
}

/// Process groups among `pgids` that still have members (from /proc).
pub fn live_groups(pgids: &[u32]) -> Vec<u32> {
    let mut live: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            stat_pgrp(&stat)
        })
        .filter(|g| pgids.contains(g))
        .collect();
    live.sort_unstable();
    live.dedup();
    live
}

/// The process group field of a `/proc/<pid>/stat` line (the command name may hold
/// spaces and parentheses, so fields are counted after the last `)`).
fn stat_pgrp(stat: &str) -> Option<u32> {
    let (_, tail) = stat.rsplit_once(')')?;
    tail.split_ascii_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgrp_of_odd_names() {
        assert_eq!(stat_pgrp("12 (a) b (c)) S 1 77 77 0"), Some(77));
        assert_eq!(stat_pgrp("junk"), None);
    }

    #[test]
    fn our_own_group_is_live() {
        // SAFETY: getpgrp has no preconditions.
        let me = unsafe { libc::getpgrp() } as u32;
        assert_eq!(live_groups(&[me]), vec![me]);
    }
}
