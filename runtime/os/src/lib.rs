//! OS plumbing shared by the launcher (`cohort`) and the node server (`cohortd`):
//! the parent-death hook for the processes they spawn, and log setup.

use tracing_subscriber::EnvFilter;

/// Returns a `pre_exec` hook that delivers `signal` to the child when its parent
/// thread dies, and refuses to exec if the parent is already gone (`who` names the
/// parent in that error).
///
/// Spawn from the thread that lives as long as the job: the kernel ties the death
/// signal to the spawning *thread*.
pub fn parent_death_signal(
    signal: i32,
    who: &'static str,
) -> impl FnMut() -> std::io::Result<()> + Send + Sync {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    move || {
        // SAFETY: async-signal-safe syscalls with integer arguments, run in the child
        // between fork and exec.
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::other(format!(
                    "{who} exited before the child started"
                )));
            }
        }
        Ok(())
    }
}

/// Logs go to stderr, filtered by `COHORT_LOG`, else `RUST_LOG`, else `warn`.
pub fn init_tracing() {
    let filter = EnvFilter::try_from_env(cohort_proto::env::LOG)
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
