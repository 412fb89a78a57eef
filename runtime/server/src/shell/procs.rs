//! The few raw process calls the shell needs: parent-death signals for ranks,
//! signalling the process groups we created, and finding what is left in them.

/// A `pre_exec` hook: the child gets `signal` when this (spawning) thread dies, and
/// refuses to exec when we are already gone.
pub fn parent_death_signal(signal: i32) -> impl FnMut() -> std::io::Result<()> + Send + Sync {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    move || {
        // SAFETY: async-signal-safe syscalls with integer arguments, between fork and exec.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "cohortd exited before the rank started",
                ));
            }
        }
        Ok(())
    }
}

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
