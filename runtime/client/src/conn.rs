//! The connection to the node server: the hello handshake, the locked write path, the
//! table of requests awaiting a reply, and the single reader thread that completes them.
//!
//! Nothing here knows about groups or puts; it moves frames and routes replies by id.

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufReader, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

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
}

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
    stream.set_read_timeout(None)?;
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
        });
        let reader = Arc::clone(&conn);
        std::thread::Builder::new()
            .name("cohort-reader".into())
            .spawn(move || reader.read_loop())
            .map_err(|e| CohortError::Io(format!("cannot start the reader thread: {e}")))?;
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
    }

    /// Closes the link from this side (finalize or drop); pending calls fail with `reason`.
    pub(crate) fn close_locally(&self, reason: &str) {
        self.closed_locally.store(true, Ordering::SeqCst);
        self.fail_all(reason);
        // Wakes the reader thread, which then exits.
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    fn read_loop(self: Arc<Self>) {
        let mut reader = BufReader::with_capacity(64 << 10, &self.stream);
        let mut buf = Vec::new();
        let reason = loop {
            match frame::read_frame::<_, ServerFrame>(&mut reader, MAX_CLIENT_FRAME, &mut buf) {
                Ok(Some(ServerFrame::Reply { id, result })) => {
                    let waiter = lock(&self.pending).waiters.remove(&id);
                    match waiter {
                        Some(w) => w.complete(result),
                        None => tracing::debug!(id, "reply for a request nobody awaits any more"),
                    }
                }
                Ok(Some(ServerFrame::Event(event))) => {
                    let _ = self.events.send(EventMsg::Event(event));
                }
                Ok(Some(ServerFrame::Welcome(_))) => {
                    break "protocol error: the node server sent a second welcome".to_string();
                }
                Ok(None) => break "the node server closed the connection".to_string(),
                Err(e) => break format!("reading from the node server failed: {e}"),
            }
        };
        // Release buffered memory before anything else; large fence replies may be in it.
        drop(reader);
        drop(buf);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.fail_all(&reason);
        if !self.closed_locally.load(Ordering::SeqCst) {
            tracing::warn!(%reason, "lost the connection to the node server");
            let _ = self.events.send(EventMsg::Event(Event {
                code: codes::LOST_CONNECTION,
                source: self.me.clone(),
                affected: Vec::new(),
                info: vec![(LOST_REASON_KEY.to_string(), Value::Str(reason))],
            }));
        }
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
    let got = match deadline {
        Some(d) => rx.recv_timeout(d).map_err(|e| match e {
            crossbeam_channel::RecvTimeoutError::Timeout => CohortError::Timeout {
                op: op.to_string(),
                timeout_ms,
                missing: Vec::new(),
            },
            crossbeam_channel::RecvTimeoutError::Disconnected => guard.conn.lost_error(),
        }),
        None => rx.recv().map_err(|_| guard.conn.lost_error()),
    };
    if got.is_ok() {
        guard.armed = false;
    }
    got?
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
