//! The connection bookkeeping both backends share: the peer table, where events go
//! (the event channel or the owner's handler), each peer's outbound queue, every
//! connection task, and the [`Liveness`] verdicts carried out on them. A backend keeps
//! one [`Links`] behind its lock and adds only what moves bytes (TCP streams, verbs
//! queue pairs).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io::IoSlice;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::AbortHandle;
use tracing::debug;

use crate::handshake::TaskCount;
use crate::liveness::{ConnId, LinkEnd, Liveness, Verdict};
use crate::{FabricError, FabricEvent, NodeId, Spinner};

/// Where a fabric spawns its tasks (see [`crate::FabricConfig::local_tasks`]).
#[derive(Clone, Debug)]
pub(crate) struct Spawner {
    /// The runtime `bind` ran on; also where the closing task of a dropped fabric goes.
    pub runtime: tokio::runtime::Handle,
    /// Connection tasks go on the current `LocalSet` instead.
    local: bool,
}

impl Spawner {
    /// The current runtime (callers are inside one), with connection tasks on the
    /// current `LocalSet` when `local`.
    pub fn current(local: bool) -> Spawner {
        Spawner {
            runtime: tokio::runtime::Handle::current(),
            local,
        }
    }

    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.local {
            tokio::task::spawn_local(task)
        } else {
            self.runtime.spawn(task)
        }
    }
}

/// Takes a fabric's events, in order, instead of an event channel (see
/// [`crate::AnyFabric::bind_handler`]).
pub type EventHandler = Arc<dyn Fn(FabricEvent) + Send + Sync>;

/// Where a fabric's events go.
pub(crate) enum Sink {
    Channel(UnboundedSender<FabricEvent>),
    /// Events are queued under the lock ([`Links::pending`]) and handed over by
    /// [`flush`], with the lock released. Dropped when the fabric closes.
    Handler(EventHandler),
}

/// Locks a backend's [`Links`] (or other fabric state), ignoring poison. A panic while
/// holding the lock cannot leave it half-updated in a way that matters more than
/// losing the fabric, so keep going.
pub(crate) fn lock<T>(state: &Mutex<T>) -> MutexGuard<'_, T> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Hands the events queued for the handler to it, oldest first, one call at a time,
/// with the lock (`st`, a guard of `state`) released around each call, so the handler
/// may use the fabric (send, close). Returns at once while another call of `flush` is
/// handing events over (on this thread: the handler sent to its own node; on another
/// thread of a multi-thread runtime): that call also hands over what was queued
/// meanwhile. So events reach the handler in the order they were queued, never two at
/// once, and never from within the handler's own call. Backends call this after every
/// operation that may queue events, from their own tasks only (never inside `send`,
/// whose caller may hold state the handler needs: see [`Links::route`]).
pub(crate) fn flush<'a>(state: &'a Mutex<Links>, mut st: MutexGuard<'a, Links>) {
    if st.flushing || st.pending.is_empty() {
        return;
    }
    let Some(Sink::Handler(handler)) = &st.events else {
        st.pending.clear();
        return;
    };
    let handler = handler.clone();
    st.flushing = true;
    /// Clears `flushing` if the handler panics.
    struct Flushing<'a> {
        state: &'a Mutex<Links>,
        armed: bool,
    }
    impl Drop for Flushing<'_> {
        fn drop(&mut self) {
            if self.armed {
                lock(self.state).flushing = false;
            }
        }
    }
    let mut unwinding = Flushing { state, armed: true };
    loop {
        if st.events.is_none() {
            // Closed by the handler (or another thread): no more events.
            st.pending.clear();
        }
        let Some(event) = st.pending.pop_front() else {
            break;
        };
        drop(st);
        handler(event);
        st = lock(state);
    }
    st.flushing = false;
    unwinding.armed = false;
}

/// What a connection task is asked to send.
pub(crate) enum Outgoing {
    Frame(Bytes),
    /// TCP only: the unwritten end of a frame a write-through wrote in part (raw
    /// stream bytes, no header).
    Rest(Bytes),
    Goodbye,
}

/// The queue of the connection a peer's payloads go out on; `id` is its task's id.
pub(crate) struct OutLink {
    pub id: ConnId,
    pub queue: UnboundedSender<Outgoing>,
    /// Frames queued to the connection task that it has not finished writing (TCP) or
    /// posting (verbs), counted from the link's creation on; the task decrements it
    /// once an item is in the kernel or wholly posted to the queue pair.
    pub unwritten: Option<Arc<AtomicUsize>>,
    /// Write-through, once the connection is established (TCP: its handshake written;
    /// verbs: its queue pair connected): while nothing queued is unwritten, `send`
    /// hands a frame straight to the connection, which it shares with the task
    /// (non-blocking; what the connection did not take is queued), instead of waking
    /// the task to do it.
    pub direct: Option<Arc<dyn WriteThrough>>,
}

/// A connection `send` may hand a frame to directly, without blocking (see
/// [`OutLink::direct`]).
pub(crate) trait WriteThrough: Send + Sync {
    /// Sends `payload` as one frame now. `Ok(None)`: all of it went; `Ok(Some(rest))`
    /// (TCP): a part went, `rest` must follow through the queue as
    /// [`Outgoing::Rest`]; `Err(())`: nothing went (full, busy, or broken: the
    /// connection's task finds out), the frame goes through the queue.
    fn write_through(&self, payload: &Bytes) -> Result<Option<Bytes>, ()>;
}

/// Largest payload a send writes through: the common small message. Larger ones go to
/// the connection's task, so no send holds the fabric's lock for a long copy.
pub(crate) const WRITE_THROUGH_MAX: usize = 64 << 10;

/// TCP: writes `payload` as one frame (header and payload) to the socket; the kernel
/// may take a part (the rest follows) or nothing (the socket is full, or broken).
impl WriteThrough for tokio::net::tcp::OwnedWriteHalf {
    fn write_through(&self, payload: &Bytes) -> Result<Option<Bytes>, ()> {
        let header = crate::wire::data_header(payload.len());
        let bufs = [IoSlice::new(&header), IoSlice::new(payload)];
        match self.try_write_vectored(&bufs) {
            Ok(n) if n == header.len() + payload.len() => Ok(None),
            Ok(0) | Err(_) => Err(()),
            Ok(n) if n < header.len() => {
                let mut rest = BytesMut::with_capacity(header.len() - n + payload.len());
                rest.put_slice(&header[n..]);
                rest.put_slice(payload);
                Ok(Some(rest.freeze()))
            }
            Ok(n) => Ok(Some(payload.slice(n - header.len()..))),
        }
    }
}

pub(crate) struct Links {
    pub peers: Vec<String>,
    /// `None` once closed: no more events.
    events: Option<Sink>,
    /// Handler mode: events not yet handed over by [`flush`].
    pending: VecDeque<FabricEvent>,
    /// A [`flush`] is handing events over.
    flushing: bool,
    pub closing: bool,
    /// Set by [`Links::abort`] (the fabric was dropped, or its goodbyes timed out):
    /// links end without a goodbye, so peers see them break.
    pub aborted: bool,
    /// Set by [`Links::expect_departures`]: peers are leaving with the job, so their
    /// losses are logged at debug level.
    departures_expected: bool,
    pub liveness: Liveness,
    /// The connection each peer's payloads go out on.
    pub outbound: HashMap<NodeId, OutLink>,
    /// Every connection's queue (the ones in `outbound` too), for the goodbyes.
    pub queues: HashMap<ConnId, UnboundedSender<Outgoing>>,
    pub tasks: HashMap<ConnId, AbortHandle>,
    next_id: ConnId,
    /// Told of every message in and out (see [`crate::Spinner`]).
    spinner: Option<Arc<Spinner>>,
}

impl Links {
    pub fn new(events: Sink, spinner: Option<Arc<Spinner>>) -> Links {
        Links {
            peers: Vec::new(),
            events: Some(events),
            pending: VecDeque::new(),
            flushing: false,
            closing: false,
            aborted: false,
            departures_expected: false,
            liveness: Liveness::default(),
            outbound: HashMap::new(),
            queues: HashMap::new(),
            tasks: HashMap::new(),
            next_id: 0,
            spinner,
        }
    }

    pub fn emit(&mut self, event: FabricEvent) {
        match &self.events {
            Some(Sink::Channel(events)) => {
                let _ = events.send(event);
            }
            Some(Sink::Handler(_)) => self.pending.push_back(event),
            None => {}
        }
    }

    /// Carries out a liveness verdict: reports the loss, tears down the condemned.
    pub fn apply(&mut self, verdict: Verdict) {
        if let Some((peer, err)) = verdict.lost {
            if !self.closing {
                if self.departures_expected {
                    debug!(peer, error = %err, "fabric peer left");
                } else {
                    // The node server says so (and the launcher tells the user once).
                    debug!(peer, error = %err, "fabric peer lost");
                }
                self.emit(FabricEvent::PeerLost {
                    peer,
                    reason: err.to_string(),
                    unreachable: err.is_unreachable(),
                });
            }
            self.retire(peer);
        }
        if verdict.condemned.is_empty() {
            return;
        }
        self.outbound
            .retain(|_, link| !verdict.condemned.contains(&link.id));
        for conn in &verdict.condemned {
            self.queues.remove(conn);
            if let Some(task) = self.tasks.remove(conn) {
                task.abort();
            }
        }
    }

    /// Retires the outbound link to `peer`, lost. A link still in place (an attempt to
    /// connect that began before the loss was noticed) holds only payloads sent before
    /// the loss, which may be lost. Retired, sends after the loss start a fresh
    /// connection: queued behind that attempt they would be dropped when it fails (a
    /// peer restarted on the same address was then never reached), and if it reached
    /// the restarted peer, older payloads could arrive after newer ones.
    fn retire(&mut self, peer: NodeId) {
        if let Some(link) = self.outbound.remove(&peer) {
            debug!(peer, conn = link.id, "retiring the link to a lost peer");
            self.queues.remove(&link.id);
            if let Some(task) = self.tasks.remove(&link.id) {
                task.abort();
            }
        }
    }

    /// The owner declared `peer` lost (see [`crate::Fabric::declare_lost`]): its
    /// connections are dropped (no goodbye: it may never read one) and its link
    /// retired, with no `PeerLost` event.
    pub fn declare_lost(&mut self, peer: NodeId) {
        let verdict = self.liveness.declared_lost(peer);
        debug!(
            peer,
            dropped = verdict.condemned.len(),
            "peer declared lost by the owner"
        );
        self.apply(verdict);
        self.retire(peer);
    }

    /// The common part of `send` from `me` to `to`: a payload for `me` is delivered at
    /// once and one for a peer with a live link is queued on it (`Ok(None)`);
    /// otherwise the caller starts a link to the returned address with the returned
    /// first item and registers it with [`Links::add_outbound`]. With a handler, a
    /// payload for `me` is only queued: the caller (inside `send`) must have it handed
    /// over later, from a task of its own ([`Links::to_self_pending`]).
    pub fn route(
        &mut self,
        me: NodeId,
        to: NodeId,
        payload: Bytes,
    ) -> Result<Option<(String, Outgoing)>, FabricError> {
        if self.closing {
            return Err(FabricError::Closed);
        }
        if let Some(s) = &self.spinner {
            s.input();
        }
        if to == me {
            let message = FabricEvent::Message { from: me, payload };
            return match self.events.as_ref().ok_or(FabricError::Closed)? {
                Sink::Channel(events) => events
                    .send(message)
                    .map(|()| None)
                    .map_err(|_| FabricError::Closed),
                Sink::Handler(_) => {
                    self.pending.push_back(message);
                    Ok(None)
                }
            };
        }
        if to as usize >= self.peers.len() {
            return Err(FabricError::UnknownPeer {
                peer: to,
                known: self.peers.len(),
            });
        }
        if let Some(link) = self.outbound.get(&to) {
            let mut item = Outgoing::Frame(payload.clone());
            if let (Some(direct), Some(unwritten)) = (&link.direct, &link.unwritten) {
                // Nothing queued is unwritten (checked and written under the lock every
                // send takes; the task decrements only once an item is in the kernel,
                // or posted to the queue pair), so this frame cannot overtake one.
                if payload.len() <= WRITE_THROUGH_MAX && unwritten.load(Ordering::Acquire) == 0 {
                    match direct.write_through(&payload) {
                        Ok(None) => return Ok(None),
                        Ok(Some(rest)) => item = Outgoing::Rest(rest),
                        Err(()) => {}
                    }
                }
            }
            if let Some(unwritten) = &link.unwritten {
                unwritten.fetch_add(1, Ordering::AcqRel);
            }
            if link.queue.send(item).is_ok() {
                return Ok(None);
            }
            // The writer has ended (a part written through, if any, went to a dead
            // connection): the caller starts a new connection with the whole frame.
            if let Some(unwritten) = &link.unwritten {
                unwritten.fetch_sub(1, Ordering::AcqRel);
            }
        }
        Ok(Some((
            self.peers[to as usize].clone(),
            Outgoing::Frame(payload),
        )))
    }

    /// `queue` (connection `id`) is how payloads go to `to` from now on; `unwritten`
    /// (TCP) counts its items not yet written, the first one included.
    pub fn add_outbound(
        &mut self,
        to: NodeId,
        id: ConnId,
        queue: UnboundedSender<Outgoing>,
        unwritten: Option<Arc<AtomicUsize>>,
    ) {
        self.queues.insert(id, queue.clone());
        self.outbound.insert(
            to,
            OutLink {
                id,
                queue,
                unwritten,
                direct: None,
            },
        );
    }

    /// Connection `conn`, the way to `peer`, is ready for frames (TCP: established and
    /// its handshake written; verbs: its queue pair connected): sends may now write
    /// through to `direct`.
    pub fn enable_write_through(
        &mut self,
        peer: NodeId,
        conn: ConnId,
        direct: Arc<dyn WriteThrough>,
    ) {
        if let Some(link) = self.outbound.get_mut(&peer).filter(|l| l.id == conn) {
            link.direct = Some(direct);
        }
    }

    /// Whether events go to a handler, queued until [`flush`].
    pub fn has_handler(&self) -> bool {
        matches!(self.events, Some(Sink::Handler(_)))
    }

    /// Handler mode: whether events are queued that no [`flush`] is handing over now
    /// (after `send` to this node: the caller spawns a task that flushes).
    pub fn to_self_pending(&self) -> bool {
        self.has_handler() && !self.flushing && !self.pending.is_empty()
    }

    /// The owner expects its peers to leave (see [`crate::Fabric::expect_departures`]).
    pub fn expect_departures(&mut self) {
        self.departures_expected = true;
    }

    /// Starts closing: no more events, a goodbye on every connection. `false` when
    /// already closing.
    pub fn close(&mut self) -> bool {
        if self.closing {
            return false;
        }
        self.closing = true;
        self.events = None;
        self.pending.clear();
        for queue in self.queues.values() {
            let _ = queue.send(Outgoing::Goodbye);
        }
        true
    }

    /// Drops every connection at once (no goodbyes) and ends the event stream.
    pub fn abort(&mut self) {
        self.closing = true;
        self.aborted = true;
        self.events = None;
        self.pending.clear();
        self.outbound.clear();
        self.queues.clear();
        for (_, task) in self.tasks.drain() {
            task.abort();
        }
    }

    /// Spawns a connection task with a fresh id with `spawner`, tracked for abort and
    /// for `shutdown` (`live`).
    pub fn spawn_tracked<F, Fut>(
        &mut self,
        spawner: &Spawner,
        live: &Arc<TaskCount>,
        make: F,
    ) -> ConnId
    where
        F: FnOnce(ConnId) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let id = self.next_id;
        self.next_id += 1;
        let guard = live.enter();
        let task = make(id);
        let handle = spawner.spawn(async move {
            let _guard = guard;
            task.await
        });
        if self.closing {
            // Closed or dropped meanwhile (e.g. a connection accepted as the fabric
            // was dropped): a task started now would keep a link alive after
            // `abort`, and its peer would never see the loss.
            handle.abort();
            return id;
        }
        self.tasks.retain(|_, t| !t.is_finished());
        self.tasks.insert(id, handle.abort_handle());
        id
    }

    /// Hands decoded payloads to the owner, unless the connection was condemned (its
    /// peer already reported lost) or the fabric is closing. `false` means stop reading.
    /// With a handler they are only queued: the caller [`flush`]es after unlocking.
    pub fn deliver(&mut self, peer: NodeId, conn: ConnId, batch: &mut Vec<Bytes>) -> bool {
        if !self.liveness.is_registered(conn) {
            return false;
        }
        match &self.events {
            Some(Sink::Channel(events)) => {
                if let Some(s) = &self.spinner {
                    s.handoff();
                }
                for payload in batch.drain(..) {
                    let _ = events.send(FabricEvent::Message {
                        from: peer,
                        payload,
                    });
                }
            }
            Some(Sink::Handler(_)) => {
                // The handler runs in the reading task itself: no consumer task to
                // hand the CPU to first.
                if let Some(s) = &self.spinner {
                    s.input();
                }
                self.pending
                    .extend(batch.drain(..).map(|payload| FabricEvent::Message {
                        from: peer,
                        payload,
                    }));
            }
            None => {}
        }
        batch.clear();
        true
    }

    /// A connection finished its handshake with `peer`'s `incarnation`; `false` when
    /// it was condemned (a late connection of a peer already reported lost).
    pub fn established(&mut self, peer: NodeId, incarnation: u64, conn: ConnId) -> bool {
        let verdict = self.liveness.established(peer, incarnation, conn);
        self.apply(verdict);
        self.liveness.is_registered(conn)
    }

    /// Forgets connection task `conn` (to or from `peer`).
    fn forget(&mut self, peer: NodeId, conn: ConnId) {
        self.tasks.remove(&conn);
        self.queues.remove(&conn);
        if self.outbound.get(&peer).is_some_and(|l| l.id == conn) {
            self.outbound.remove(&peer);
        }
    }

    /// A connection task is ending (after registration).
    pub fn ended(&mut self, peer: NodeId, conn: ConnId, how: LinkEnd) {
        self.forget(peer, conn);
        let verdict = self.liveness.ended(conn, how);
        self.apply(verdict);
    }

    /// An outbound attempt failed; its `dropped` queued payloads are lost.
    /// `losses_at_start` is the peer's loss count when the attempt began: if a loss was
    /// reported since (the crash that also broke this attempt), reporting again would
    /// make one crash two `PeerLost`s.
    pub fn connect_failed(
        &mut self,
        me: NodeId,
        peer: NodeId,
        conn: ConnId,
        err: FabricError,
        dropped: usize,
        losses_at_start: u64,
    ) {
        self.forget(peer, conn);
        if self.closing {
            return;
        }
        if self.liveness.losses(peer) != losses_at_start {
            debug!(node = me, peer, error = %err, "connect failed after the peer was reported lost");
            return;
        }
        if self.departures_expected {
            debug!(node = me, peer, dropped, error = %err, "fabric peer gone");
        } else {
            debug!(node = me, peer, dropped, error = %err, "fabric peer unreachable");
        }
        let verdict = self.liveness.unreachable(peer, err);
        self.apply(verdict);
    }
}
