//! The connection to the node server: the hello handshake, the locked write path, the
//! table of requests awaiting a reply, and the read token that decides who reads.
//!
//! Reading is done by whoever holds the read token. A thread blocked in a call takes
//! it and reads its own reply straight off the socket (one wake-up per call instead of
//! two); the background reader thread reads only while no call is blocked, so events
//! and async replies still flow when the application is busy elsewhere. Frames meant
//! for others are dispatched to their waiters by whichever thread read them.
//!
//! Nothing here knows about groups or puts; it moves frames and routes replies by id.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use cohort_proto::event::{codes, Event};
use cohort_proto::frame::{self, MAX_CLIENT_FRAME};
use cohort_proto::msg::{Hello, ReqId, Response, ServerFrame, Welcome};
use cohort_proto::{CohortError, ProcId, Rank, Value, PROTOCOL_VERSION};

use crate::events::EventMsg;

/// How long the hello handshake may take before `connect` gives up on a wedged server.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Info key of the synthesized `LOST_CONNECTION` event carrying why the link died.
pub const LOST_REASON_KEY: &str = "cohort.lost.reason";

/// A reply, or the error that replaced it.
pub(crate) type Reply = Result<Response, CohortError>;

/// Where a reply goes: a blocked thread or an awaiting future.
pub(crate) enum Waiter {
    Blocking(crossbeam_channel::Sender<Reply>),
    Async(tokio::sync::oneshot::Sender<Reply>),
}

impl Waiter {
    fn complete(self, reply: Reply) {
        // A waiter that gave up (deadline, dropped future) is not an error.
        match self {
            Waiter::Blocking(tx) => {
                let _ = tx.try_send(reply);
            }
            Waiter::Async(tx) => {
                let _ = tx.send(reply);
            }
        }
    }
}

#[derive(Default)]
struct PendingTable {
    waiters: HashMap<ReqId, Waiter>,
    /// Set once the connection is unusable; every later call fails with it at once.
    lost: Option<String>,
}

/// The live connection, shared by the client handles and the reader thread.
pub(crate) struct Conn {
    stream: UnixStream,
    /// Serializes whole frames onto the socket; held only for the write itself.
    write_lock: Mutex<()>,
    next_id: AtomicU64,
    pending: Mutex<PendingTable>,
    /// Set when this side closed the link (finalize, drop): no LOST_CONNECTION event then.
    closed_locally: AtomicBool,
    events: crossbeam_channel::Sender<EventMsg>,
    me: ProcId,
    /// Who may read: `true` while some thread is reading. Waiters for the token or
    /// for a dispatched reply sleep on `read_cv`.
    read_token: Mutex<bool>,
    read_cv: Condvar,
    /// Bytes read but not yet parsed into frames; only the token holder touches it.
    read_buf: Mutex<Vec<u8>>,
    /// Threads sleeping on `read_cv`; notifying costs a syscall, so only when non-zero.
    cv_sleepers: AtomicUsize,
    /// The background reader, and whether it is napping because calls were blocked:
    /// the last blocked call to leave wakes it, so an event arriving right after a
    /// call (an invitation, say) is read at once rather than after the nap.
    reader: std::sync::OnceLock<std::thread::Thread>,
    reader_napping: AtomicBool,
    /// Set once an event handler is registered: from then on events must be read
    /// promptly even between calls. Without handlers they are only cached, so pure
    /// request/reply users do not pay for waking the reader after every call.
    wants_events: AtomicBool,
    /// When this process last wrote to or read from the node server: the background
    /// reader and the event thread poll for the spin budget after it, since an answer
    /// (a reply, the next event of a construct) is then likely soon.
    io_clock: Arc<IoClock>,
}

/// When a connection last carried something (see [`spin_budget`]), and whether a call
/// is blocked on it.
#[derive(Debug)]
pub(crate) struct IoClock {
    epoch: Instant,
    /// Microseconds since `epoch`.
    last_us: AtomicU64,
    /// Threads currently blocked in a call; while non-zero the background reader
    /// leaves the socket to them, and those threads are the ones polling.
    blockers: AtomicUsize,
}

impl IoClock {
    fn new() -> IoClock {
        IoClock {
            epoch: Instant::now(),
            last_us: AtomicU64::new(0),
            blockers: AtomicUsize::new(0),
        }
    }

    fn note(&self) {
        let us = self.epoch.elapsed().as_micros() as u64;
        self.last_us.store(us, Ordering::Relaxed);
    }

    /// Whether a call is blocked on the connection (and polls for its reply).
    pub(crate) fn call_blocked(&self) -> bool {
        self.blockers.load(Ordering::Relaxed) > 0
    }

    /// Whether the last exchange was less than `budget` ago.
    pub(crate) fn within(&self, budget: Duration) -> bool {
        let now = self.epoch.elapsed().as_micros() as u64;
        now.saturating_sub(self.last_us.load(Ordering::Relaxed)) < budget.as_micros() as u64
    }
}

/// How long the background reader naps while calls are blocked (they read for it).
const BACKGROUND_NAP: Duration = Duration::from_millis(5);
/// Longest a blocked caller's read waits before it looks at its deadline again (the
/// socket's SO_RCVTIMEO; waits shorter than this use poll with the exact timeout).
const READ_SLICE: Duration = Duration::from_secs(1);

/// Locks a mutex, ignoring poisoning: every critical section here leaves its data
/// consistent, and a panic in one application thread must not wedge the others.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Connects, says hello and waits for the welcome (bounded by [`HANDSHAKE_TIMEOUT`]).
pub(crate) fn handshake(
    path: &Path,
    nspace: &str,
    rank: Rank,
    token: &[u8],
) -> Result<(UnixStream, Welcome), CohortError> {
    let mut stream = UnixStream::connect(path).map_err(|e| {
        CohortError::ServerLost(format!(
            "cannot connect to the node server at {}: {e}",
            path.display()
        ))
    })?;
    let hello = Hello {
        version: PROTOCOL_VERSION,
        nspace: nspace.to_string(),
        rank,
        pid: std::process::id(),
        token: token.to_vec(),
    };
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream
        .write_all(&frame::encode(&hello))
        .map_err(|e| CohortError::ServerLost(format!("sending hello failed: {e}")))?;
    let mut buf = Vec::new();
    let first = frame::read_frame::<_, ServerFrame>(&mut stream, MAX_CLIENT_FRAME, &mut buf)
        .map_err(|e| match e {
            CohortError::Io(msg) => CohortError::ServerLost(format!(
                "reading the node server's welcome failed (waited at most {} s): {msg}",
                HANDSHAKE_TIMEOUT.as_secs()
            )),
            other => other,
        })?;
    let welcome = match first {
        Some(ServerFrame::Welcome(Ok(w))) => w,
        Some(ServerFrame::Welcome(Err(e))) => return Err(e),
        Some(other) => {
            return Err(CohortError::Protocol(format!(
                "expected a welcome as the server's first frame, got {}",
                frame_kind(&other)
            )))
        }
        None => {
            return Err(CohortError::ServerLost(
                "the node server closed the connection during the handshake".into(),
            ))
        }
    };
    // Every lookup in the job map (apps, process sets) trusts it from here on.
    welcome
        .job
        .validate()
        .map_err(|e| CohortError::Protocol(format!("the node server sent a bad job map: {e}")))?;
    // Blocking reads (a caller waiting for its reply) give up after this slice and
    // look at their deadline again; every other read is non-blocking.
    stream.set_read_timeout(Some(READ_SLICE))?;
    Ok((stream, welcome))
}

fn frame_kind(f: &ServerFrame) -> &'static str {
    match f {
        ServerFrame::Welcome(_) => "a welcome",
        ServerFrame::Reply { .. } => "a reply",
        ServerFrame::Event(_) => "an event",
    }
}

impl Conn {
    /// Wraps a welcomed stream and starts its reader thread.
    pub(crate) fn start(
        stream: UnixStream,
        me: ProcId,
        events: crossbeam_channel::Sender<EventMsg>,
    ) -> Result<Arc<Conn>, CohortError> {
        let conn = Arc::new(Conn {
            stream,
            write_lock: Mutex::new(()),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(PendingTable::default()),
            closed_locally: AtomicBool::new(false),
            events,
            me,
            read_token: Mutex::new(false),
            read_cv: Condvar::new(),
            read_buf: Mutex::new(Vec::with_capacity(64 << 10)),
            cv_sleepers: AtomicUsize::new(0),
            reader: std::sync::OnceLock::new(),
            reader_napping: AtomicBool::new(false),
            wants_events: AtomicBool::new(false),
            io_clock: Arc::new(IoClock::new()),
        });
        let reader = Arc::clone(&conn);
        let handle = std::thread::Builder::new()
            .name("cohort-reader".into())
            .spawn(move || reader.read_loop())
            .map_err(|e| CohortError::Io(format!("cannot start the reader thread: {e}")))?;
        let _ = conn.reader.set(handle.thread().clone());
        Ok(conn)
    }

    pub(crate) fn next_id(&self) -> ReqId {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Fails at once if the connection is already gone.
    pub(crate) fn check_alive(&self) -> Result<(), CohortError> {
        match &lock(&self.pending).lost {
            Some(reason) => Err(CohortError::ServerLost(reason.clone())),
            None => Ok(()),
        }
    }

    /// Registers `waiter` under `id`, then writes `bytes` (which must carry the request
    /// with that id). The waiter is registered first so a fast reply always finds it.
    /// A failed write kills the connection and so completes the waiter with ServerLost.
    pub(crate) fn submit(
        self: &Arc<Self>,
        id: ReqId,
        bytes: &[u8],
        waiter: Waiter,
    ) -> Result<PendingGuard, CohortError> {
        {
            let mut p = lock(&self.pending);
            if let Some(reason) = &p.lost {
                return Err(CohortError::ServerLost(reason.clone()));
            }
            p.waiters.insert(id, waiter);
        }
        let guard = PendingGuard {
            conn: Arc::clone(self),
            id,
            armed: true,
        };
        // Any write error is already reported to the waiter by `fail_all`.
        let _ = self.write(bytes);
        Ok(guard)
    }

    /// Writes whole frames that want no reply (commit).
    pub(crate) fn send_oneway(&self, bytes: &[u8]) -> Result<(), CohortError> {
        self.check_alive()?;
        self.write(bytes)
    }

    fn write(&self, bytes: &[u8]) -> Result<(), CohortError> {
        self.note_io();
        let result = {
            let _w = lock(&self.write_lock);
            send_all(&self.stream, bytes)
        };
        result.map_err(|e| {
            let reason = format!("writing to the node server failed: {e}");
            self.fail_all(&reason);
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
            CohortError::ServerLost(reason)
        })
    }

    /// The error for a call whose waiter was dropped without a reply.
    fn lost_error(&self) -> CohortError {
        let reason = lock(&self.pending).lost.clone();
        CohortError::ServerLost(reason.unwrap_or_else(|| "the connection was closed".into()))
    }

    /// Removes a waiter that gave up; a reply arriving later is dropped.
    fn forget(&self, id: ReqId) {
        lock(&self.pending).waiters.remove(&id);
    }

    /// Marks the connection lost (keeping the first reason) and fails every waiter.
    fn fail_all(&self, reason: &str) {
        let (reason, waiters) = {
            let mut p = lock(&self.pending);
            let reason = p.lost.get_or_insert_with(|| reason.to_string()).clone();
            (reason, std::mem::take(&mut p.waiters))
        };
        for (_, w) in waiters {
            w.complete(Err(CohortError::ServerLost(reason.clone())));
        }
        self.read_cv.notify_all();
    }

    /// Closes the link from this side (finalize or drop); pending calls fail with `reason`.
    pub(crate) fn close_locally(&self, reason: &str) {
        self.closed_locally.store(true, Ordering::SeqCst);
        self.fail_all(reason);
        // Wakes the reader thread, which then exits.
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    /// Background reader: reads whenever no call is blocked reading for itself.
    fn read_loop(self: Arc<Self>) {
        let fd = self.stream.as_raw_fd();
        loop {
            if lock(&self.pending).lost.is_some() {
                break;
            }
            if self.io_clock.blockers.load(Ordering::SeqCst) > 0 {
                // Blocked calls read for us; nap without being woken by their traffic.
                // Announce the nap, then re-check: the last call to leave either sees
                // the announcement (and unparks us) or we see it gone.
                self.reader_napping.store(true, Ordering::SeqCst);
                if self.io_clock.blockers.load(Ordering::SeqCst) > 0 {
                    std::thread::park_timeout(BACKGROUND_NAP);
                }
                self.reader_napping.store(false, Ordering::SeqCst);
                continue;
            }
            match self.poll_after_io(fd) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    self.lose(format!("waiting for the node server failed: {e}"));
                    break;
                }
            }
            if self.io_clock.blockers.load(Ordering::Acquire) > 0 || !self.take_token() {
                continue;
            }
            let r = self.read_batch();
            self.release_token();
            if let Err(reason) = r {
                self.lose(reason);
                break;
            }
        }
    }

    /// Events will be handled: read them promptly from now on.
    pub(crate) fn want_events(&self) {
        self.wants_events.store(true, Ordering::SeqCst);
    }

    /// Whether something must be read before the next blocked call: handled events, or
    /// replies of async calls.
    fn needs_prompt_reader(&self) -> bool {
        self.wants_events.load(Ordering::SeqCst)
            || lock(&self.pending)
                .waiters
                .values()
                .any(|w| matches!(w, Waiter::Async(_)))
    }

    /// Tries to become the reader; `false` when another thread is reading.
    fn take_token(&self) -> bool {
        let mut held = lock(&self.read_token);
        if *held {
            return false;
        }
        *held = true;
        true
    }

    fn release_token(&self) {
        *lock(&self.read_token) = false;
        self.wake_sleepers();
    }

    fn wake_sleepers(&self) {
        if self.cv_sleepers.load(Ordering::Acquire) > 0 {
            self.read_cv.notify_all();
        }
    }

    /// Token holder: reads what the socket has (without blocking) and dispatches every
    /// complete frame. `Err` means the connection is gone.
    fn read_batch(&self) -> Result<(), String> {
        self.read_batch_from(libc::MSG_DONTWAIT)
    }

    /// Reads whatever the node server has sent and dispatches it; the first read
    /// blocks until something arrives unless `first_flags` has `MSG_DONTWAIT` (one
    /// system call instead of a poll and a read, for a caller without a deadline).
    fn read_batch_from(&self, first_flags: libc::c_int) -> Result<(), String> {
        let fd = self.stream.as_raw_fd();
        let mut buf = lock(&self.read_buf);
        let mut dispatched = false;
        let mut flags = first_flags;
        loop {
            if buf.capacity() - buf.len() < 16 << 10 {
                buf.reserve(64 << 10);
            }
            let spare = buf.capacity() - buf.len();
            // SAFETY: the pointer/length pair describes the spare capacity of `buf`,
            // which recv initializes up to the returned count before we extend len.
            let n = unsafe {
                libc::recv(
                    fd,
                    buf.as_mut_ptr().add(buf.len()).cast::<libc::c_void>(),
                    spare,
                    flags,
                )
            };
            flags = libc::MSG_DONTWAIT;
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::Interrupted => continue,
                    std::io::ErrorKind::WouldBlock => break,
                    _ => return Err(format!("reading from the node server failed: {e}")),
                }
            }
            if n == 0 {
                self.dispatch_buffered(&mut buf)?;
                return Err("the node server closed the connection".to_string());
            }
            // SAFETY: recv wrote `n` bytes into the spare capacity.
            let filled = buf.len() + n as usize;
            unsafe { buf.set_len(filled) };
            dispatched |= self.dispatch_buffered(&mut buf)?;
            if (n as usize) < spare {
                break;
            }
        }
        if dispatched {
            self.note_io();
            self.wake_sleepers();
        }
        Ok(())
    }

    /// Parses and dispatches every complete frame at the front of `buf`.
    fn dispatch_buffered(&self, buf: &mut Vec<u8>) -> Result<bool, String> {
        let mut at = 0;
        let mut any = false;
        while buf.len() - at >= 4 {
            let len = u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
            let len = frame::check_len(len, MAX_CLIENT_FRAME).map_err(|e| e.to_string())?;
            if buf.len() - at - 4 < len {
                break;
            }
            let f: ServerFrame =
                frame::decode_body(&buf[at + 4..at + 4 + len]).map_err(|e| e.to_string())?;
            at += 4 + len;
            self.dispatch(f)?;
            any = true;
        }
        buf.drain(..at);
        Ok(any)
    }

    fn dispatch(&self, f: ServerFrame) -> Result<(), String> {
        match f {
            ServerFrame::Reply { id, result } => {
                let waiter = lock(&self.pending).waiters.remove(&id);
                match waiter {
                    Some(w) => w.complete(result),
                    None => tracing::debug!(id, "reply for a request nobody awaits any more"),
                }
            }
            ServerFrame::Event(event) => {
                let _ = self.events.send(EventMsg::Event(event));
            }
            ServerFrame::Welcome(_) => {
                return Err("protocol error: the node server sent a second welcome".to_string())
            }
        }
        Ok(())
    }

    /// The connection died: fail everyone, wake every waiter, raise LOST_CONNECTION.
    fn lose(&self, reason: String) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        let first = lock(&self.pending).lost.is_none();
        self.fail_all(&reason);
        self.read_cv.notify_all();
        if first && !self.closed_locally.load(Ordering::SeqCst) {
            tracing::warn!(%reason, "lost the connection to the node server");
            let _ = self.events.send(EventMsg::Event(Event {
                code: codes::LOST_CONNECTION,
                source: self.me.clone(),
                affected: Vec::new(),
                info: vec![(LOST_REASON_KEY.to_string(), Value::Str(reason))],
            }));
        }
    }

    /// A blocked call: read for ourselves while nobody else is reading, otherwise wait
    /// for the reader to hand our reply over. `None` when `deadline` passed.
    fn wait_reply(
        &self,
        rx: &crossbeam_channel::Receiver<Reply>,
        deadline: Option<Instant>,
    ) -> Option<Reply> {
        self.io_clock.blockers.fetch_add(1, Ordering::SeqCst);
        let got = self.wait_reply_inner(rx, deadline);
        if self.io_clock.blockers.fetch_sub(1, Ordering::SeqCst) == 1
            && self.reader_napping.load(Ordering::SeqCst)
            && self.needs_prompt_reader()
        {
            if let Some(t) = self.reader.get() {
                t.unpark();
            }
        }
        got
    }

    fn wait_reply_inner(
        &self,
        rx: &crossbeam_channel::Receiver<Reply>,
        deadline: Option<Instant>,
    ) -> Option<Reply> {
        let fd = self.stream.as_raw_fd();
        loop {
            if let Ok(r) = rx.try_recv() {
                return Some(r);
            }
            let remaining = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(r) if !r.is_zero() => Some(r),
                    _ => return None,
                },
                None => None,
            };
            if !self.take_token() {
                // Someone else reads; it notifies after dispatching.
                let token = lock(&self.read_token);
                if *token && rx.is_empty() {
                    let nap = remaining.unwrap_or(Duration::from_secs(1));
                    self.cv_sleepers.fetch_add(1, Ordering::AcqRel);
                    let _ = self.read_cv.wait_timeout(token, nap);
                    self.cv_sleepers.fetch_sub(1, Ordering::AcqRel);
                }
                continue;
            }
            if let Some(reason) = lock(&self.pending).lost.clone() {
                self.release_token();
                return Some(Err(CohortError::ServerLost(reason)));
            }
            // Our reply may have been dispatched while we took the token.
            if let Ok(r) = rx.try_recv() {
                self.release_token();
                return Some(r);
            }
            let outcome = match remaining {
                // No deadline, or one beyond the socket's read timeout: poll for the
                // spin budget, then block in the read itself (it returns after at most
                // READ_SLICE).
                _ if remaining.is_none_or(|r| r >= READ_SLICE) => self
                    .poll_for_reply(rx)
                    .unwrap_or_else(|| self.read_batch_from(0)),
                _ => match poll_readable(fd, remaining) {
                    Ok(true) => self.read_batch(),
                    Ok(false) => Ok(()),
                    Err(e) => Err(format!("waiting for the node server failed: {e}")),
                },
            };
            self.release_token();
            if let Err(reason) = outcome {
                self.lose(reason);
            }
        }
    }
}

impl Conn {
    fn note_io(&self) {
        self.io_clock.note();
    }

    /// The clock of this connection's last exchange, for the event thread.
    pub(crate) fn io_clock(&self) -> Arc<IoClock> {
        Arc::clone(&self.io_clock)
    }

    /// The background reader's wait for input: polls (yielding the CPU) while the
    /// last exchange with the node server is within the spin budget and input must
    /// be read promptly, then blocks.
    /// `Ok(false)` as soon as a call is blocked: that call reads, and a reader asleep
    /// in `poll` would only be woken along with it by the reply.
    fn poll_after_io(&self, fd: std::os::unix::io::RawFd) -> std::io::Result<bool> {
        // Only when something must be read promptly (handled events, async replies):
        // otherwise the reader would just compete with the process's own threads.
        let budget = if self.needs_prompt_reader() {
            spin_budget()
        } else {
            Duration::ZERO
        };
        while !budget.is_zero() && self.io_clock.within(budget) {
            if self.io_clock.call_blocked() {
                return Ok(false);
            }
            if poll_readable(fd, Some(Duration::ZERO))? {
                return Ok(true);
            }
            cohort_proto::env::yield_cpu();
        }
        if self.io_clock.call_blocked() {
            return Ok(false);
        }
        poll_readable(fd, None)
    }

    /// Token holder: looks for input without blocking, yielding the CPU between looks,
    /// until something for `rx` (or an error) arrived or the spin budget is spent
    /// (`None`: nothing came, go to sleep).
    ///
    /// It looks with `poll`, which reads the socket's queue without its lock, and reads
    /// only once there is something: a `recv` on an empty socket takes the lock that
    /// the node server's send needs, and a rank polling with `recv` made each reply
    /// wait for it (on a virtual machine a quarter of a node server's time went to
    /// that lock's slow path).
    fn poll_for_reply(
        &self,
        rx: &crossbeam_channel::Receiver<Reply>,
    ) -> Option<Result<(), String>> {
        let budget = spin_budget();
        if budget.is_zero() {
            return None;
        }
        let fd = self.stream.as_raw_fd();
        let start = Instant::now();
        loop {
            match poll_readable(fd, Some(Duration::ZERO)) {
                Err(e) => {
                    return Some(Err(format!(
                        "polling the node server connection failed: {e}"
                    )))
                }
                Ok(false) => {}
                Ok(true) => {
                    let r = self.read_batch();
                    if r.is_err() || !rx.is_empty() {
                        return Some(r);
                    }
                }
            }
            if start.elapsed() >= budget {
                return None;
            }
            cohort_proto::env::yield_cpu();
        }
    }
}

/// This process's polling budget (`COHORT_SPIN_US`, read once).
pub(crate) fn spin_budget() -> Duration {
    static BUDGET: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *BUDGET.get_or_init(|| cohort_proto::env::spin_budget_from_env(cohort_proto::env::SPIN_US))
}

/// Waits until `fd` is readable (or hung up); `Ok(false)` on timeout.
fn poll_readable(fd: std::os::unix::io::RawFd, timeout: Option<Duration>) -> std::io::Result<bool> {
    let ms = match timeout {
        Some(t) if t.is_zero() => 0,
        Some(t) => t.as_millis().clamp(1, i32::MAX as u128) as i32,
        None => -1,
    };
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is a valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(n > 0);
    }
}

/// Writes all of `bytes` with `MSG_NOSIGNAL`: a server that vanished must give this
/// process an error, not a SIGPIPE (C applications rarely ignore it).
fn send_all(stream: &UnixStream, mut bytes: &[u8]) -> std::io::Result<()> {
    let fd = stream.as_raw_fd();
    while !bytes.is_empty() {
        // SAFETY: `fd` is a live socket owned by `stream`, borrowed for this call, and
        // the pointer/length pair describes the initialized slice `bytes`.
        let n = unsafe {
            libc::send(
                fd,
                bytes.as_ptr().cast::<libc::c_void>(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Removes a request's waiter if the caller stops waiting before the reply (deadline,
/// dropped future), so the table never grows with abandoned ids.
pub(crate) struct PendingGuard {
    conn: Arc<Conn>,
    id: ReqId,
    armed: bool,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if self.armed {
            self.conn.forget(self.id);
        }
    }
}

/// Blocks until the reply arrives, the connection dies, or `deadline` passes.
pub(crate) fn wait_blocking(
    rx: &crossbeam_channel::Receiver<Reply>,
    mut guard: PendingGuard,
    deadline: Option<Duration>,
    op: &'static str,
    timeout_ms: u64,
) -> Reply {
    let until = deadline.map(|d| Instant::now() + d);
    match guard.conn.wait_reply(rx, until) {
        Some(reply) => {
            guard.armed = false;
            reply
        }
        None => Err(CohortError::Timeout {
            op: op.to_string(),
            timeout_ms,
            missing: Vec::new(),
        }),
    }
}

/// The reply of a request made through an `*_async` call. Works under any executor:
/// it is woken by the reader thread through a `tokio::sync::oneshot`, which needs no
/// tokio runtime.
pub(crate) struct ReplyFuture {
    state: Result<(tokio::sync::oneshot::Receiver<Reply>, PendingGuard), Option<CohortError>>,
}

impl ReplyFuture {
    pub(crate) fn new(rx: tokio::sync::oneshot::Receiver<Reply>, guard: PendingGuard) -> Self {
        ReplyFuture {
            state: Ok((rx, guard)),
        }
    }

    /// A request that failed before it was sent.
    pub(crate) fn failed(e: CohortError) -> Self {
        ReplyFuture {
            state: Err(Some(e)),
        }
    }
}

impl Future for ReplyFuture {
    type Output = Reply;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        let this = self.get_mut();
        let reply = match &mut this.state {
            Err(e) => Err(e.take().unwrap_or_else(|| {
                CohortError::BadRequest("reply future polled after completion".into())
            })),
            Ok((rx, guard)) => match Pin::new(rx).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(reply)) => {
                    guard.armed = false;
                    reply
                }
                Poll::Ready(Err(_)) => Err(guard.conn.lost_error()),
            },
        };
        this.state = Err(None);
        Poll::Ready(reply)
    }
}
