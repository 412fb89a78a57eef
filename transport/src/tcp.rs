//! The TCP backend: tokio sockets, one task per connection, frames both ways.
//!
//! A peer we send to gets one connection, opened on the first `send`, unless that peer
//! already connected to us: then our frames go back over its connection, so one
//! connection carries both directions and each message's acknowledgement rides on the
//! reply (two one-way connections cost every message a separate pure ACK, a third more
//! latency on loopback). If both ends connect at the same moment, each keeps sending on
//! its own connection and reads from both; a sender never switches connections while
//! one works, which keeps per-peer order. Each connection's task reads frames and
//! delivers them while writing its queue (whatever is queued goes out as one vectored
//! write). While nothing queued is still unwritten, `send` writes the frame straight to
//! the socket instead (non-blocking, on the write half it shares with the task; a
//! part the kernel does not take is queued), which saves waking the task for the
//! common lone message. A goodbye is a control word in the frame stream, written
//! after the queue is flushed.
//!
//! Locking: one `std::sync::Mutex` guards the peer table, the queues and the
//! [`Liveness`] bookkeeping; it is never held across an `.await`. Events are emitted
//! while holding it, which is what orders a `PeerLost` after the last `Message` from
//! the same incarnation.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;
use tokio::time::timeout;
use tracing::{debug, info, warn, Instrument};

use crate::handshake::{self, closing, new_incarnation, Identity, TaskCount};
use crate::links::{self, EventHandler, Links, OutLink, Outgoing, Sink, Spawner};
use crate::liveness::{ConnId, LinkEnd};
use crate::wire::{self, Frame, FrameDecoder, Hello, Reply, GOODBYE, WIRE_VERSION};
use crate::{Fabric, FabricConfig, FabricError, FabricEvent, NodeId, CLOSE_GRACE};

/// At most this many frames go into one vectored write (well under `IOV_MAX`).
const MAX_BATCH_FRAMES: usize = 64;
/// A batch stops growing once it holds this many payload bytes.
const MAX_BATCH_BYTES: usize = 1 << 20;
/// A reader yields to the consumer each time it delivered this many payload bytes.
const YIELD_AFTER_BYTES: usize = 128 << 10;
/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The TCP fabric. Cheap to clone; every clone drives the same sockets. Dropping the
/// last clone without [`close`](Fabric::close) tears every connection down abruptly
/// (peers then report this node lost, as they would for a crash).
#[derive(Clone)]
pub struct TcpFabric {
    owner: Arc<Owner>,
}

/// Dropped with the last user handle; tasks hold `Shared` only.
struct Owner {
    shared: Arc<Shared>,
}

struct Shared {
    me: NodeId,
    local_addr: SocketAddr,
    /// Source IP of outbound connections (the listen IP, unless that is unspecified).
    source_ip: Option<IpAddr>,
    secret: Vec<u8>,
    decoder: FrameDecoder,
    connect_timeout: Duration,
    /// `FabricConfig::stall_timeout`.
    stall_timeout: Option<Duration>,
    incarnation: u64,
    spawner: Spawner,
    closing: watch::Sender<bool>,
    tasks_live: Arc<TaskCount>,
    state: Mutex<Links>,
    /// Adaptive polling (`FabricConfig::spinner`): hot links are read directly.
    spinner: Option<Arc<crate::Spinner>>,
    /// Events go to a handler (called by the reading task itself), not a channel.
    inline_events: bool,
}

impl TcpFabric {
    /// Listens on `cfg.listen` and returns the fabric and its event channel. Must be
    /// called inside a tokio runtime (current-thread or multi-thread, with I/O and time
    /// enabled); the fabric's tasks are spawned on that runtime, so `send` and `close`
    /// may then be called from any thread.
    pub async fn bind(
        cfg: FabricConfig,
    ) -> io::Result<(TcpFabric, UnboundedReceiver<FabricEvent>)> {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let fabric = Self::bind_sink(cfg, Sink::Channel(events_tx)).await?;
        Ok((fabric, events_rx))
    }

    /// Like [`bind`](TcpFabric::bind), with the events handed to `handler` instead of
    /// a channel (see [`crate::AnyFabric::bind_handler`]).
    pub async fn bind_handler(cfg: FabricConfig, handler: EventHandler) -> io::Result<TcpFabric> {
        Self::bind_sink(cfg, Sink::Handler(handler)).await
    }

    async fn bind_sink(cfg: FabricConfig, sink: Sink) -> io::Result<TcpFabric> {
        handshake::check_secret_len(&cfg.secret)?;
        let listener = TcpListener::bind(cfg.listen).await?;
        let local_addr = listener.local_addr()?;
        let inline_events = matches!(sink, Sink::Handler(_));
        let shared = Arc::new(Shared {
            me: cfg.node,
            local_addr,
            source_ip: Some(local_addr.ip()).filter(|ip| !ip.is_unspecified()),
            secret: cfg.secret,
            decoder: FrameDecoder::new(cfg.max_frame),
            connect_timeout: cfg.connect_timeout,
            stall_timeout: cfg.stall_timeout,
            incarnation: new_incarnation(),
            spawner: Spawner::current(cfg.local_tasks),
            closing: watch::channel(false).0,
            tasks_live: Arc::default(),
            state: Mutex::new(Links::new(sink, cfg.spinner.clone())),
            spinner: cfg.spinner.clone(),
            inline_events,
        });
        {
            let mut st = shared.lock();
            let task_shared = shared.clone();
            shared.spawn_tracked(&mut st, move |_| accept_loop(task_shared, listener));
        }
        info!(backend = "tcp", node = shared.me, addr = %local_addr, "fabric listening");
        let owner = Arc::new(Owner { shared });
        Ok(TcpFabric { owner })
    }

    /// [`close`](Fabric::close), then waits until every goodbye was acknowledged by
    /// its peer (or [`CLOSE_GRACE`] passed, after which the rest is dropped).
    pub async fn shutdown(&self) {
        let shared = &self.owner.shared;
        shared.close();
        if timeout(CLOSE_GRACE, shared.tasks_live.wait_idle())
            .await
            .is_err()
        {
            warn!(
                node = shared.me,
                "fabric goodbyes not acknowledged within {CLOSE_GRACE:?}; dropping connections"
            );
            shared.abort_all();
        }
    }
}

impl std::fmt::Debug for TcpFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpFabric")
            .field("node", &self.owner.shared.me)
            .field("addr", &self.owner.shared.local_addr)
            .finish_non_exhaustive()
    }
}

impl Fabric for TcpFabric {
    fn backend(&self) -> &'static str {
        "tcp"
    }

    fn node(&self) -> NodeId {
        self.owner.shared.me
    }

    fn local_addr(&self) -> String {
        self.owner.shared.local_addr.to_string()
    }

    fn set_peers(&self, peers: Vec<String>) {
        let shared = &self.owner.shared;
        debug!(
            node = shared.me,
            count = peers.len(),
            "fabric peer table set"
        );
        shared.lock().peers = peers;
    }

    fn send(&self, to: NodeId, payload: Bytes) -> Result<(), FabricError> {
        self.owner.shared.send(to, payload)
    }

    fn declare_lost(&self, peer: NodeId) {
        // Queues no event, so nothing to hand over (and no handler call from inside
        // the owner's own call).
        self.owner.shared.lock().declare_lost(peer);
    }

    fn expect_departures(&self) {
        self.owner.shared.lock().expect_departures();
    }

    fn close(&self) {
        self.owner.shared.close();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let shared = self.shared.clone();
        if !shared.lock().closing {
            debug!(
                node = shared.me,
                "fabric dropped without close; aborting connections"
            );
            shared.abort_all();
            return;
        }
        // Closing: give the goodbyes their grace period, then drop what is left.
        let runtime = shared.spawner.runtime.clone();
        runtime.spawn(async move {
            let _ = timeout(CLOSE_GRACE, shared.tasks_live.wait_idle()).await;
            shared.abort_all();
        });
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Links> {
        links::lock(&self.state)
    }

    /// Hands queued events to the handler, if the fabric has one (see [`links::flush`]).
    fn flush(&self) {
        self.flush_from(self.lock());
    }

    /// [`Shared::flush`] with the lock already taken.
    fn flush_from(&self, st: MutexGuard<'_, Links>) {
        if self.inline_events {
            links::flush(&self.state, st);
        }
    }

    fn send(self: &Arc<Self>, to: NodeId, payload: Bytes) -> Result<(), FabricError> {
        if payload.len() > self.decoder.max() {
            return Err(FabricError::FrameTooLarge {
                peer: to,
                len: payload.len(),
                max: self.decoder.max(),
            });
        }
        let mut st = self.lock();
        let Some((addr, item)) = st.route(self.me, to, payload)? else {
            if to == self.me && st.to_self_pending() {
                // Not from within `send`: its caller may hold what the handler needs.
                let shared = self.clone();
                self.spawner.spawn(async move { shared.flush() });
            }
            return Ok(());
        };
        let (queue, rx) = mpsc::unbounded_channel();
        let _ = queue.send(item);
        let unwritten = Arc::new(AtomicUsize::new(1));
        let task_shared = self.clone();
        let task_unwritten = unwritten.clone();
        let id = self.spawn_tracked(&mut st, move |id| {
            run_outbound(task_shared, to, addr, id, rx, task_unwritten)
        });
        st.add_outbound(to, id, queue, Some(unwritten));
        Ok(())
    }

    fn close(&self) {
        if !self.lock().close() {
            return;
        }
        self.closing.send_replace(true);
        debug!(node = self.me, "fabric closing; saying goodbye to peers");
    }

    /// Drops every connection at once (no goodbyes) and ends the event stream.
    fn abort_all(&self) {
        self.lock().abort();
        self.closing.send_replace(true);
    }

    /// Spawns a connection task with a fresh id, tracked for abort and for `shutdown`.
    fn spawn_tracked<F, Fut>(&self, st: &mut Links, make: F) -> ConnId
    where
        F: FnOnce(ConnId) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        st.spawn_tracked(&self.spawner, &self.tasks_live, make)
    }

    /// See [`Links::deliver`].
    fn deliver(&self, peer: NodeId, conn: ConnId, batch: &mut Vec<Bytes>) -> bool {
        let mut st = self.lock();
        let delivering = st.deliver(peer, conn, batch);
        self.flush_from(st);
        delivering
    }

    /// A connection we opened finished its handshake with `peer`'s `incarnation`;
    /// sends may write through to `wr`, its write half.
    fn established(&self, peer: NodeId, incarnation: u64, conn: ConnId, wr: &Arc<OwnedWriteHalf>) {
        let mut st = self.lock();
        if st.established(peer, incarnation, conn) {
            st.enable_write_through(peer, conn, wr.clone());
        }
        self.flush_from(st);
    }

    /// The reply to an accepted connection is written: sends may write through to it.
    fn reply_written(&self, peer: NodeId, conn: ConnId, wr: &Arc<OwnedWriteHalf>) {
        self.lock().enable_write_through(peer, conn, wr.clone());
    }

    /// A connection `peer` opened to us was accepted: it gets a queue, and becomes the
    /// way to `peer` unless we already have one (our own, possibly still connecting).
    fn accepted(
        &self,
        peer: NodeId,
        incarnation: u64,
        conn: ConnId,
        queue: UnboundedSender<Outgoing>,
        unwritten: Arc<AtomicUsize>,
    ) {
        let mut st = self.lock();
        if st.established(peer, incarnation, conn) {
            st.queues.insert(conn, queue.clone());
            // No write-through yet: the reply to the hello must be the first thing
            // written.
            st.outbound.entry(peer).or_insert(OutLink {
                id: conn,
                queue,
                unwritten: Some(unwritten),
                direct: None,
            });
        } // else condemned: a late connection of a peer already reported lost
        self.flush_from(st);
    }

    /// A connection task is ending (after registration).
    fn ended(&self, peer: NodeId, conn: ConnId, how: LinkEnd) {
        self.lock().ended(peer, conn, how);
        self.flush();
    }

    /// See [`Links::connect_failed`].
    fn connect_failed(
        &self,
        peer: NodeId,
        conn: ConnId,
        err: FabricError,
        dropped: usize,
        losses_at_start: u64,
    ) {
        self.lock()
            .connect_failed(self.me, peer, conn, err, dropped, losses_at_start);
        self.flush();
    }

    /// Why a hello is refused, if it is (see [`handshake::check_hello`]).
    fn check_hello(&self, hello: &Hello) -> Result<(), String> {
        let known = self.lock().peers.len();
        handshake::check_hello(&self.identity(), hello, known)
    }

    fn identity(&self) -> Identity<'_> {
        Identity {
            me: self.me,
            secret: &self.secret,
            incarnation: self.incarnation,
            wire_version: WIRE_VERSION,
            source_ip: self.source_ip,
            stall_timeout: self.stall_timeout,
            limit: self.connect_timeout,
        }
    }

    /// Connects to `peer` at `addr` and handshakes, all within the connect timeout.
    /// Returns the stream and the peer's incarnation.
    async fn connect(&self, peer: NodeId, addr: &str) -> Result<(TcpStream, u64), FabricError> {
        handshake::connect(&self.identity(), peer, addr, self.connect_timeout).await
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut closing_rx = shared.closing.subscribe();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = closing(&mut closing_rx) => return,
        };
        match accepted {
            Ok((stream, remote)) => {
                let mut st = shared.lock();
                if st.closing {
                    return;
                }
                let task_shared = shared.clone();
                shared.spawn_tracked(&mut st, move |id| {
                    run_inbound(task_shared, stream, remote, id)
                });
            }
            Err(e) => {
                warn!(node = shared.me, error = %e, "fabric accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// One connection a peer opened to us: handshake, then read frames until it ends.
async fn run_inbound(shared: Arc<Shared>, mut stream: TcpStream, remote: SocketAddr, id: ConnId) {
    let span = tracing::debug_span!("fabric_in", node = shared.me, %remote);
    async move {
        let _ = stream.set_nodelay(true);
        if let Err(e) = cohort_os::set_tcp_user_timeout(&stream, shared.stall_timeout) {
            warn!(error = %e, "cannot set TCP_USER_TIMEOUT on a fabric connection");
        }
        let Some(hello) = handshake::read_hello_within(&mut stream, &shared.identity()).await
        else {
            return;
        };
        let peer = hello.node;
        let verdict = match shared.check_hello(&hello) {
            Ok(()) => handshake::prove_within(&mut stream, &shared.identity(), &hello).await,
            refused => refused,
        };
        if let Err(reason) = verdict {
            return handshake::refuse(&mut stream, &shared.identity(), peer, reason).await;
        }
        if shared.lock().closing {
            return;
        }
        let (queue_tx, mut queue) = mpsc::unbounded_channel();
        let unwritten = Arc::new(AtomicUsize::new(0));
        shared.accepted(peer, hello.incarnation, id, queue_tx, unwritten.clone());
        let reply = Reply::Accept {
            node: shared.me,
            incarnation: shared.incarnation,
        };
        // The reply goes out before anything queued for the peer meanwhile.
        let end = match timeout(shared.connect_timeout, stream.write_all(&reply.encode())).await {
            Ok(Ok(())) => {
                debug!(peer, "fabric connection accepted");
                let (rd, wr) = stream.into_split();
                let wr = Arc::new(wr);
                shared.reply_written(peer, id, &wr);
                run_link(&shared, rd, wr, peer, id, &mut queue, &unwritten).await
            }
            Ok(Err(source)) => LinkEnd::Broken(FabricError::Io { peer, source }),
            Err(_) => LinkEnd::Broken(FabricError::Io {
                peer,
                source: io::ErrorKind::TimedOut.into(),
            }),
        };
        shared.ended(peer, id, end);
    }
    .instrument(span)
    .await
}

/// How the writing half of a connection stopped.
enum WriteEnd {
    /// Our goodbye is written and our side shut: the reader drains what remains.
    SaidGoodbye,
    /// The queue is gone (the fabric was dropped): end without a goodbye.
    QueueGone,
    Broken(FabricError),
}

/// An established connection: reads and delivers the peer's frames while writing ours,
/// until the peer says goodbye, the connection breaks, or we said goodbye (then the
/// peer's side is drained, bounded, so our goodbye is not lost to a reset).
async fn run_link(
    shared: &Shared,
    mut rd: OwnedReadHalf,
    wr: Arc<OwnedWriteHalf>,
    peer: NodeId,
    id: ConnId,
    queue: &mut UnboundedReceiver<Outgoing>,
    unwritten: &AtomicUsize,
) -> LinkEnd {
    let fd = rd.as_ref().as_raw_fd();
    let reading = read_frames(shared, &mut rd, peer, id, fd);
    let writing = write_frames(&wr, peer, queue, unwritten);
    tokio::pin!(reading, writing);
    tokio::select! {
        end = &mut reading => end,
        end = &mut writing => match end {
            WriteEnd::SaidGoodbye => {
                let _ = timeout(CLOSE_GRACE, &mut reading).await;
                LinkEnd::Local
            }
            WriteEnd::QueueGone => LinkEnd::Local,
            WriteEnd::Broken(e) => LinkEnd::Broken(e),
        },
    }
}

/// Reads frames and delivers them until the peer says goodbye, the connection breaks,
/// or the connection is condemned.
async fn read_frames<R: AsyncRead + Unpin>(
    shared: &Shared,
    stream: &mut R,
    peer: NodeId,
    id: ConnId,
    fd: RawFd,
) -> LinkEnd {
    let decoder = shared.decoder;
    let mut last_frame = Instant::now();
    let mut buf = BytesMut::new();
    let mut batch = Vec::new();
    let mut unyielded = 0;
    loop {
        let mut goodbye = false;
        let mut violation = None;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(Frame::Data(payload))) => batch.push(payload),
                Ok(Some(Frame::Goodbye)) => {
                    goodbye = true;
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    violation = Some(e);
                    break;
                }
            }
        }
        unyielded += batch.iter().map(Bytes::len).sum::<usize>();
        let delivered = !batch.is_empty();
        if delivered && !shared.deliver(peer, id, &mut batch) {
            return LinkEnd::Local;
        }
        if let Some(e) = violation {
            warn!(peer, error = %e, "closing fabric connection: protocol violation");
            return LinkEnd::Broken(FabricError::Protocol {
                peer,
                reason: e.to_string(),
            });
        }
        if goodbye {
            debug!(peer, "fabric peer said goodbye");
            return LinkEnd::Goodbye;
        }
        if unyielded >= YIELD_AFTER_BYTES {
            // Let the consumer take (and free) large payloads before reading more: on a
            // single-threaded runtime the reader would otherwise fill memory with a
            // whole burst first, and the allocator hands back fresh pages for each.
            unyielded = 0;
            tokio::task::yield_now().await;
        }
        buf.reserve(decoder.reserve_hint(&buf));
        if let Some(sp) = shared.spinner.as_deref().filter(|s| !s.budget().is_zero()) {
            if delivered {
                last_frame = Instant::now();
                if !shared.inline_events {
                    // The consumer first takes what was just delivered (and answers it).
                    tokio::task::yield_now().await;
                }
            }
            match read_while_hot(fd, &mut buf, sp.budget(), last_frame).await {
                Ok(Some(0)) => return LinkEnd::Broken(FabricError::PeerClosed { peer }),
                Ok(Some(_)) => continue,
                Ok(None) => {}
                Err(source) => return LinkEnd::Broken(FabricError::Io { peer, source }),
            }
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) => return LinkEnd::Broken(FabricError::PeerClosed { peer }),
            Ok(_) => {}
            Err(source) => return LinkEnd::Broken(FabricError::Io { peer, source }),
        }
    }
}

/// While a link is hot — it delivered a frame within the polling `budget` (see
/// [`crate::Spinner`]) — reads its socket directly, once per turn of the runtime,
/// instead of waiting for the runtime's next look at its I/O driver to report the
/// socket readable and wake this task. A frame of an exchange in flight is then read
/// on the turn it arrives, with one `recv` and no task wake-up in between. Returns
/// the bytes read (0: the peer closed), or `None` once the link went cold (the caller
/// then waits for readiness as usual).
///
/// Each turn yields to the runtime's other tasks and lets it poll its I/O driver, so
/// other sockets and cold links are served as before; only hot links are read
/// directly, so a server with many connections pays one `recv` per turn for the few
/// it is exchanging with.
async fn read_while_hot(
    fd: RawFd,
    buf: &mut BytesMut,
    budget: Duration,
    last_frame: Instant,
) -> io::Result<Option<usize>> {
    let mut clock = crate::spin::ClockTurns::default();
    loop {
        if clock.due() && last_frame.elapsed() >= budget {
            return Ok(None);
        }
        match recv_nonblocking(fd, buf) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tokio::task::yield_now().await,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One `recv(MSG_DONTWAIT)` into `buf`'s spare capacity. Bypasses Tokio's readiness
/// state, which at worst then reports the socket readable once more than needed (the
/// next read through Tokio finds nothing and waits again).
fn recv_nonblocking(fd: RawFd, buf: &mut BytesMut) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    // SAFETY: `recv` writes at most `spare.len()` bytes into `spare`, which is valid,
    // writable memory owned by `buf`.
    let n = unsafe {
        libc::recv(
            fd,
            spare.as_mut_ptr().cast(),
            spare.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `recv` initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n as usize) };
    Ok(n as usize)
}

/// Our connection to `peer`: connect, handshake, then frames both ways (see
/// [`run_link`]).
async fn run_outbound(
    shared: Arc<Shared>,
    peer: NodeId,
    addr: String,
    id: ConnId,
    mut queue: UnboundedReceiver<Outgoing>,
    unwritten: Arc<AtomicUsize>,
) {
    let span = tracing::debug_span!("fabric_out", node = shared.me, peer, %addr);
    async move {
        debug!("connecting");
        let losses_at_start = shared.lock().liveness.losses(peer);
        let (stream, incarnation) = match shared.connect(peer, &addr).await {
            Ok(connected) => connected,
            Err(err) => {
                queue.close();
                let mut dropped = 0;
                while let Ok(item) = queue.try_recv() {
                    dropped += matches!(item, Outgoing::Frame(_)) as usize;
                }
                shared.connect_failed(peer, id, err, dropped, losses_at_start);
                return;
            }
        };
        debug!(incarnation, "fabric connection established");
        let (rd, wr) = stream.into_split();
        let wr = Arc::new(wr);
        shared.established(peer, incarnation, id, &wr);
        let end = run_link(&shared, rd, wr, peer, id, &mut queue, &unwritten).await;
        shared.ended(peer, id, end);
    }
    .instrument(span)
    .await
}

/// One queued item of a batch: a whole frame, or the rest of one written in part.
enum Piece {
    Frame(Bytes),
    Rest(Bytes),
}

/// Adds `item` to `batch` (counting its `bytes`); `false` for a goodbye.
fn take(item: Outgoing, batch: &mut Vec<Piece>, bytes: &mut usize) -> bool {
    match item {
        Outgoing::Frame(payload) => {
            *bytes += payload.len();
            batch.push(Piece::Frame(payload));
            true
        }
        Outgoing::Rest(rest) => {
            *bytes += rest.len();
            batch.push(Piece::Rest(rest));
            true
        }
        Outgoing::Goodbye => false,
    }
}

/// Writes queued frames until the queue says goodbye (written after everything queued
/// before it, then our side is shut) or goes away, or the connection breaks. Each item
/// written is taken off `unwritten` (see `OutLink::unwritten`).
async fn write_frames(
    wr: &OwnedWriteHalf,
    peer: NodeId,
    queue: &mut UnboundedReceiver<Outgoing>,
    unwritten: &AtomicUsize,
) -> WriteEnd {
    let mut batch: Vec<Piece> = Vec::with_capacity(MAX_BATCH_FRAMES);
    loop {
        let mut goodbye;
        let mut bytes = 0;
        match queue.recv().await {
            None => return WriteEnd::QueueGone,
            Some(item) => {
                goodbye = !take(item, &mut batch, &mut bytes);
                while !goodbye && batch.len() < MAX_BATCH_FRAMES && bytes < MAX_BATCH_BYTES {
                    match queue.try_recv() {
                        Ok(item) => goodbye = !take(item, &mut batch, &mut bytes),
                        Err(_) => break,
                    }
                }
            }
        }
        if !batch.is_empty() {
            let written = write_batch(wr, &batch).await;
            if let Err(source) = written {
                return WriteEnd::Broken(FabricError::Io { peer, source });
            }
            unwritten.fetch_sub(batch.len(), Ordering::AcqRel);
            batch.clear();
        }
        if goodbye {
            let said = async {
                let word = GOODBYE.to_le_bytes();
                write_all_shared(wr, &mut [IoSlice::new(&word)]).await?;
                shutdown_write(wr)
            };
            return match timeout(CLOSE_GRACE, said).await {
                Ok(Ok(())) => WriteEnd::SaidGoodbye,
                Ok(Err(source)) => WriteEnd::Broken(FabricError::Io { peer, source }),
                Err(_) => WriteEnd::Broken(FabricError::Io {
                    peer,
                    source: io::ErrorKind::TimedOut.into(),
                }),
            };
        }
    }
}

/// Writes `pieces` (length word + payload for a frame, the bytes alone for the rest
/// of one) with as few vectored writes as the kernel allows, without copying payloads.
async fn write_batch(wr: &OwnedWriteHalf, pieces: &[Piece]) -> io::Result<()> {
    let headers: Vec<[u8; 4]> = pieces
        .iter()
        .map(|p| match p {
            Piece::Frame(f) => wire::data_header(f.len()),
            Piece::Rest(_) => [0; 4],
        })
        .collect();
    let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(pieces.len() * 2);
    for (header, piece) in headers.iter().zip(pieces) {
        let bytes = match piece {
            Piece::Frame(payload) => {
                slices.push(IoSlice::new(header));
                payload
            }
            Piece::Rest(rest) => rest,
        };
        if !bytes.is_empty() {
            slices.push(IoSlice::new(bytes));
        }
    }
    write_all_shared(wr, &mut slices).await
}

/// Writes all of `slices` on a write half that sends may also write through to (so it
/// is shared, and written with `&self` calls: wait until writable, try, repeat).
async fn write_all_shared(wr: &OwnedWriteHalf, slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    let mut remaining = slices;
    while !remaining.is_empty() {
        match wr.try_write_vectored(remaining) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut remaining, n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => wr.writable().await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Shuts our sending side (the peer reads end-of-stream after our goodbye) while the
/// write half may still be shared with the fabric's table.
fn shutdown_write(wr: &OwnedWriteHalf) -> io::Result<()> {
    let fd = wr.as_ref().as_raw_fd();
    // SAFETY: `fd` is the live socket of `wr`, borrowed for this call.
    if unsafe { libc::shutdown(fd, libc::SHUT_WR) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
