//! The rank guard: a small process of cohortd's own binary that outlives cohortd, so
//! that what its ranks started does not outlive it.
//!
//! Ranks die with cohortd (their parent-death signal), but their own children do not:
//! a rank's `sh -c 'server &'` or an MPI library's helper would run on, reparented to
//! init, after cohortd was SIGKILLed or crashed. Locally the launcher (a subreaper)
//! sweeps them up at the end of the job; over ssh, or under Slurm without cgroup
//! process tracking, nothing would.
//!
//! cohortd tells the guard, over a pipe that is the guard's stdin, each process group
//! it creates (one per rank: `+PGID`). When cohortd stops normally it kills what is
//! left itself and then says `done`, and the guard exits. When the pipe closes without
//! `done` (cohortd died), the guard SIGKILLs every one of those groups that still has
//! members, says so on stderr, and exits. It runs in a session of its own, so that a
//! signal to cohortd's process group does not reach it, and is named `cohortd-guard`
//! from its exec on: it is started through a symbolic link of that name in cohortd's
//! private directory (a process's name is the base name of the path it was executed
//! by). Named only once its `main` ran, it went by `cohortd` while it loaded, and a
//! script that took the last `cohortd` of a node for the node server killed the guard
//! (the CI Slurm job, in session 38).

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::procs::{live_groups, signal_group};
use super::say;

/// cohortd's first argument when it runs as the guard.
pub const GUARD_ARG: &str = "--rank-guard";

/// The guard's process name (at most 15 bytes, as the kernel keeps it).
const GUARD_NAME: &str = "cohortd-guard";

/// How long a normal stop waits for the guard to exit after `done`.
const DISMISS_WAIT: Duration = Duration::from_secs(2);

/// cohortd's end of the guard.
pub struct Guard {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Guard {
    /// Starts the guard for node server `node_name`, through a link named
    /// `cohortd-guard` made in `dir` (cohortd's private directory; without the link, by
    /// the binary's own path); `None` (with a warning) when it cannot, and the node
    /// server goes on without one.
    pub fn start(node_name: &str, dir: &Path) -> Option<Guard> {
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                tracing::warn!("no rank guard: cannot find cohortd's own binary: {e}");
                return None;
            }
        };
        let mut cmd = Command::new(named_link(&exe, dir).unwrap_or(exe));
        cmd.arg(GUARD_ARG)
            .arg(node_name)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: setsid is async-signal-safe; it runs in the child before exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut child) => {
                let pipe = child.stdin.take();
                Some(Guard { child, pipe })
            }
            Err(e) => {
                tracing::warn!("no rank guard: cannot start it: {e}");
                None
            }
        }
    }

    fn tell(&mut self, line: &str) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        // One write of a short line: atomic on a pipe, so the guard never reads half.
        if let Err(e) = pipe.write_all(format!("{line}\n").as_bytes()) {
            tracing::warn!("the rank guard is gone ({e}); a rank's children may outlive us");
            self.pipe = None;
        }
    }

    /// Process group `pgid` (a rank's) is to be killed if cohortd dies.
    pub fn watch(&mut self, pgid: u32) {
        self.tell(&format!("+{pgid}"));
    }

    /// A normal stop: the ranks' groups were swept already; the guard exits.
    pub fn dismiss(mut self) {
        self.tell("done");
        self.pipe = None;
        let deadline = Instant::now() + DISMISS_WAIT;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                _ => return,
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A symbolic link `dir/cohortd-guard` to `exe`, for the guard to be executed by (and
/// so named); `None`, with the reason at debug level, when it cannot be made.
fn named_link(exe: &Path, dir: &Path) -> Option<PathBuf> {
    let link = dir.join(GUARD_NAME);
    let _ = std::fs::remove_file(&link);
    match std::os::unix::fs::symlink(exe, &link) {
        Ok(()) => Some(link),
        Err(e) => {
            tracing::debug!(
                "rank guard started by its binary's path (no link in {}: {e})",
                dir.display()
            );
            None
        }
    }
}

/// What the guard does with what cohortd told it: the groups to kill, or `None` when
/// cohortd said `done`. Only whole lines count.
fn groups_to_kill(mut input: impl BufRead) -> Option<Vec<u32>> {
    let mut groups = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return Some(groups),
            Ok(_) if !line.ends_with('\n') => return Some(groups),
            Ok(_) => {}
        }
        match line.trim_end() {
            "done" => return None,
            l => {
                if let Some(pgid) = l.strip_prefix('+').and_then(|n| n.parse::<u32>().ok()) {
                    if pgid > 1 {
                        groups.push(pgid);
                    }
                }
            }
        }
    }
}

/// The guard's main (`cohortd --rank-guard NODE_NAME`); returns the exit status.
pub fn run(node_name: &str) -> i32 {
    // Its own name, so that nobody looking for cohortd (by /proc/PID/comm, pgrep)
    // takes the guard for it (already so when it was executed by its link); terminal
    // signals are cohortd's business, and the guard ends with its pipe.
    // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes; the signal
    // calls set dispositions of standard signals to ignore.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"cohortd-guard".as_ptr(), 0, 0, 0);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let Some(groups) = groups_to_kill(std::io::stdin().lock()) else {
        return 0;
    };
    let live = live_groups(&groups);
    for &pgid in &live {
        signal_group(pgid, libc::SIGKILL);
    }
    if !live.is_empty() {
        say(format_args!(
            "{node_name}: cohortd died, so its rank guard killed {} process group(s) its ranks left: {live:?}",
            live.len()
        ));
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guard bears its own name from its exec on, not cohortd's (or here, the test
    /// binary's): nothing looking for a process by name can take it for the node
    /// server while it loads. (`spawn` returns once the exec succeeded; this binary,
    /// not knowing `--rank-guard`, then exits, saying so on stderr.)
    #[test]
    fn the_guard_is_named_from_its_exec_on() {
        let dir = std::env::temp_dir().join(format!("cohort-guard-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let guard = Guard::start("node-test", &dir).expect("a guard");
        let pid = guard.child.id();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        guard.dismiss();
        std::fs::remove_dir_all(&dir).unwrap();
        // A process already reaped has no comm to read: the guard outlives the read
        // because `dismiss` reaps it only after.
        assert_eq!(comm.trim_end(), GUARD_NAME);
    }

    #[test]
    fn the_guard_kills_what_it_was_told_unless_dismissed() {
        assert_eq!(groups_to_kill(&b"+100\n+200\n"[..]), Some(vec![100, 200]));
        // Cut off mid-line: only whole lines count.
        assert_eq!(groups_to_kill(&b"+100\n+2"[..]), Some(vec![100]));
        assert_eq!(groups_to_kill(&b"+100\n+200\ndone\n"[..]), None);
        // Nonsense, and groups 0 and 1 (never a rank's), are ignored.
        assert_eq!(groups_to_kill(&b"x\n+0\n+1\n-5\n+7\n"[..]), Some(vec![7]));
    }
}
