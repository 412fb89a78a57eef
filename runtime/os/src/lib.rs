//! OS plumbing shared by the launcher (`cohort`) and the node server (`cohortd`):
//! the parent-death hook for the processes they spawn, the terminating-signal
//! listener, log setup, and `TCP_USER_TIMEOUT` (also for the fabric).

use tracing_subscriber::EnvFilter;

/// Sets `TCP_USER_TIMEOUT` on the TCP socket `sock`: data sent and not acknowledged
/// by the peer's kernel for `t` breaks the connection (`ETIMEDOUT`), where TCP would
/// retransmit for many minutes to a host that is gone or cut off. `None` leaves the
/// kernel's default. (A peer whose process is frozen still has its data acknowledged.)
pub fn set_tcp_user_timeout(
    sock: &impl std::os::fd::AsRawFd,
    t: Option<std::time::Duration>,
) -> std::io::Result<()> {
    let Some(t) = t else {
        return Ok(());
    };
    let ms = libc::c_uint::try_from(t.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: setsockopt on a socket the caller owns, with a c_uint value of that size.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

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

/// The open-file limit this process started with (set by [`raise_fd_limit`]).
static ORIGINAL_FD_LIMIT: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// Raises this process's open-file soft limit to its hard limit, as runtimes do: a
/// node server holds a connection per peer it talks to (a collective's root, one per
/// participating server) and one per local rank, the launcher one per node server,
/// and the usual soft limit of 1024 runs out in jobs of a few thousand nodes. Children
/// get the limit back through [`restore_fd_limit`]. Logs the limits (debug), or why it
/// could not (warn: the limit then stays as it was).
pub fn raise_fd_limit() {
    match try_raise_fd_limit() {
        Ok((before, after)) => tracing::debug!(before, after, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
}

/// [`raise_fd_limit`]; returns `(before, after)`.
fn try_raise_fd_limit() -> std::io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let original = *ORIGINAL_FD_LIMIT.get_or_init(|| lim);
    if lim.rlim_cur >= lim.rlim_max {
        return Ok((original.rlim_cur, lim.rlim_cur));
    }
    let raised = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((original.rlim_cur, raised.rlim_cur))
}

/// Returns a `pre_exec` hook that gives the child the open-file limit this process
/// started with, before [`raise_fd_limit`] (nothing to do if it was never called):
/// applications keep the limit their user set (programs using `select(2)` break on
/// descriptors above 1024).
pub fn restore_fd_limit() -> impl FnMut() -> std::io::Result<()> + Send + Sync {
    let original = ORIGINAL_FD_LIMIT.get().copied();
    move || {
        if let Some(lim) = original {
            // SAFETY: setrlimit is async-signal-safe and reads a struct we own.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
                return Err(std::io::Error::last_os_error());
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

/// The signals that end a job or a node server: SIGINT, SIGTERM, SIGHUP. Must be
/// created inside a tokio runtime.
pub struct TerminatingSignals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl TerminatingSignals {
    pub fn new() -> std::io::Result<TerminatingSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(TerminatingSignals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for the next one; returns its number.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// This host's name as `gethostname` gives it (this UTS namespace's), which is what
/// the processes started here see; empty if it cannot be read.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
