//! Process hygiene: the launcher never leaves a node server or a rank behind.
//!
//! * every node server runs in its own process group and dies with the launcher
//!   (`PR_SET_PDEATHSIG`);
//! * the launcher is a child subreaper, so processes orphaned by a dying node server
//!   (a rank's own children) are re-parented to it and swept at the end of the job.

use std::time::{Duration, Instant};

/// Makes processes orphaned below us re-parent to us instead of init.
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!(
            "PR_SET_CHILD_SUBREAPER failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Sends `signal` to process group `pgid`. `false` if it no longer exists.
pub fn signal_group(pgid: u32, signal: i32) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: plain kill(2) on a negative (group) id we created.
    unsafe { libc::kill(-pgid, signal) == 0 }
}

/// Pids whose parent is `parent` (from /proc).
pub fn children_of(parent: u32) -> Vec<u32> {
    proc_stats()
        .filter(|s| s.ppid == parent)
        .map(|s| s.pid)
        .collect()
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    pub state: u8,
    pub ppid: u32,
    pub pgrp: u32,
}

/// Parses a `/proc/<pid>/stat` line; the command name may contain spaces and parens.
pub fn parse_stat(line: &str) -> Option<ProcStat> {
    let (head, tail) = line.rsplit_once(')')?;
    let pid = head.split_once('(')?.0.trim().parse().ok()?;
    let mut fields = tail.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
    })
}

/// Every process visible in /proc.
pub fn proc_stats() -> impl Iterator<Item = ProcStat> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let pid: u32 = name.to_str()?.parse().ok()?;
            let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(&line)
        })
}

/// SIGKILLs and reaps every remaining child of this process (orphans re-parented to
/// us), repeating while killing them orphans more, for at most `budget`. Call only
/// once every child we spawned ourselves has been waited for.
pub fn sweep_orphans(budget: Duration) -> usize {
    let deadline = Instant::now() + budget;
    let me = std::process::id();
    let mut swept = 0;
    loop {
        let orphans = children_of(me);
        if orphans.is_empty() || Instant::now() >= deadline {
            return swept;
        }
        for &pid in &orphans {
            tracing::debug!(pid, "killing an orphaned process of the job");
            // SAFETY: kill/waitpid on a pid whose parent is us: it cannot be recycled
            // until we reap it.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        for &pid in &orphans {
            while Instant::now() < deadline {
                // SAFETY: as above.
                let rc = unsafe {
                    libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG)
                };
                if rc != 0 {
                    swept += 1;
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_names() {
        let s = parse_stat("4242 (a (b) c) S 1 4242 4242 0 -1 4194560 0").unwrap();
        assert_eq!(
            s,
            ProcStat {
                pid: 4242,
                state: b'S',
                ppid: 1,
                pgrp: 4242
            }
        );
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn we_are_visible_in_proc() {
        let me = std::process::id();
        assert!(proc_stats().any(|s| s.pid == me));
    }
}
