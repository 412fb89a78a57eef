//! The cohort client library: what an application rank links to put and get data,
//! fence, build and leave process groups, and send and receive events.
//!
//! A [`Client`] talks only to its node server (`cohortd`) over a Unix socket. Every
//! operation has a blocking form and an `*_async` form; the async forms start the
//! request immediately (like the PMIx `_nb` calls) and return a future that any
//! executor can drive.
//!
//! Threading: the calling thread encodes each request into one buffer and writes it
//! to the socket itself; one reader thread per client routes replies to waiters by
//! request id; one event thread runs event handlers, so a handler may call blocking
//! client APIs.
//!
//! ```no_run
//! use cohort::{Client, FenceOpts, Scope};
//!
//! let client = Client::init()?;
//! client.put(Scope::Global, "endpoint", format!("rank-{}", client.rank()))?;
//! client.fence(&[], FenceOpts { collect: true, ..Default::default() })?;
//! let peer = cohort::ProcId::new(client.nspace(), (client.rank() + 1) % client.size());
//! let ep = client.get(&peer, "endpoint", None)?;
//! println!("{peer} is at {ep:?}");
//! client.finalize()?;
//! # Ok::<(), cohort::CohortError>(())
//! ```

mod conn;
mod connect;
mod events;
mod group_event;
mod puts;

#[cfg(test)]
mod method_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cohort_proto::env;
use cohort_proto::frame::{self, MAX_CLIENT_FRAME};
use cohort_proto::msg::{ClientFrame, Request, Response, Welcome};
use cohort_proto::shm_fence::{FenceFailure, ShmFence};
use cohort_proto::{validate_group_id, NodeId};

pub use cohort_proto::event::{codes, keys};
pub use cohort_proto::msg::{
    ConstructDecision, ConstructOpts, ConstructStatus, FenceOpts, GroupResult, InviteOpts,
    LocalBinding,
};
pub use cohort_proto::publish::{validate_key, DataRange, LookupOpts, Persistence, Published};
pub use cohort_proto::spawn::{validate_spawn, SpawnApp, SpawnMapping, SpawnOpts};
pub use cohort_proto::value::{info_get, Bytes};
pub use cohort_proto::{
    CohortError, Event, EventCode, Info, JobMap, Nspace, ProcId, Pset, Range, RankSet, Scope,
    Value, RANK_WILDCARD,
};
pub use cohort_topology::{Binding, CpuSet};
pub use conn::LOST_REASON_KEY;
pub use connect::{ConnectOpts, Connection, DisconnectOpts};
pub use events::{ChainResume, EventFlow, HandlerId, EVENT_CACHE_CAPACITY};
pub use group_event::GroupEventInfo;

use conn::{lock, Conn, ReplyFuture, Waiter};
use events::{EventMsg, EventRegistry};
use puts::PutBuffer;

/// Result of every client operation.
pub type Result<T> = std::result::Result<T, CohortError>;

/// Extra time a blocking call with a timeout waits beyond it before giving up on its
/// own. The server enforces the timeout; this only guards against a wedged server.
#[cfg(not(test))]
pub const HARD_DEADLINE_GRACE: Duration = Duration::from_secs(10);
#[cfg(test)]
pub const HARD_DEADLINE_GRACE: Duration = Duration::from_millis(300);

/// A connection to the local node server. Cheap to clone; clones share the connection.
/// Dropping the last clone without [`Client::finalize`] just closes the socket.
///
/// Event handlers receive a `&Client`; use it rather than capturing a clone in the
/// handler, which would keep the connection open until the process exits.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    conn: Arc<Conn>,
    proc_id: ProcId,
    welcome: Welcome,
    puts: Mutex<PutBuffer>,
    /// The node-local fence segment (one-node jobs; see `cohort_proto::shm_fence`).
    fence_shm: Option<ShmFence>,
    /// This rank's next node-local fence number; held for the whole fence, so this
    /// rank's fences (from several threads) take their turns.
    shm_seq: Mutex<u32>,
    /// Every rank's commit count as published at the last node-local fence (a get of
    /// rank r's data waits at the node server for that many). Its own lock, so gets
    /// from other threads never wait for a fence.
    shm_floors: Mutex<Vec<u64>>,
    registry: Arc<EventRegistry>,
    events: crossbeam_channel::Sender<EventMsg>,
    /// The last failure view (local or global) this process got of each group: what
    /// a later view reports beyond it is new ([`FailedMembers::new`]).
    failure_views: Mutex<std::collections::HashMap<String, Vec<ProcId>>>,
    /// Connects completed and connections held (see `connect.rs`).
    connects: Mutex<connect::ConnectBook>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.conn
            .close_locally("the client was dropped (or finalized) by this process");
    }
}

impl Inner {
    /// Encodes `req` (behind a commit of pending puts when `auto_commit`) and sends it
    /// as one write. Holding the put lock across the write keeps commits in put order.
    fn submit(
        &self,
        req: Request,
        auto_commit: bool,
        waiter: Waiter,
    ) -> Result<conn::PendingGuard> {
        let id = self.conn.next_id();
        let frame = encode_checked(&ClientFrame { id, req })?;
        if !auto_commit {
            return self.conn.submit(id, &frame, waiter);
        }
        let mut puts = lock(&self.puts);
        if puts.is_empty() {
            drop(puts);
            return self.conn.submit(id, &frame, waiter);
        }
        let commit = ClientFrame {
            id: 0,
            req: puts.take_commit(),
        };
        let mut bytes = match encode_checked(&commit) {
            Ok(b) => b,
            Err(e) => {
                puts.restore(commit.req);
                return Err(e);
            }
        };
        bytes.extend_from_slice(&frame);
        self.conn.submit(id, &bytes, waiter)
    }
}

/// Encodes a client frame, refusing one the server would reject for its size.
fn encode_checked(f: &ClientFrame) -> Result<Vec<u8>> {
    let bytes = frame::encode(f);
    let body = bytes.len() - 4;
    if body > MAX_CLIENT_FRAME {
        return Err(CohortError::BadRequest(format!(
            "{} request is {body} bytes, over the {MAX_CLIENT_FRAME}-byte frame limit",
            f.req.op_name()
        )));
    }
    Ok(bytes)
}

fn duration_ms(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    // A sub-millisecond timeout must not turn into "no timeout" or an instant expiry.
    if ms == 0 && !d.is_zero() {
        1
    } else {
        ms
    }
}

fn unexpected(op: &str, r: &Response) -> CohortError {
    let kind = match r {
        Response::Done => "done",
        Response::Value(_) => "a value",
        Response::Group(_) => "a group result",
        Response::GroupNames(_) => "group names",
        Response::Procs(_) => "a process list",
        Response::Published(_) => "published data",
        Response::Spawned(_) => "a namespace",
        Response::Session { .. } => "session information",
    };
    CohortError::Protocol(format!("the node server answered {op} with {kind}"))
}

fn expect_done(op: &str, r: Response) -> Result<()> {
    match r {
        Response::Done => Ok(()),
        other => Err(unexpected(op, &other)),
    }
}

fn expect_published(r: Response) -> Result<Vec<Published>> {
    match r {
        Response::Published(v) => Ok(v),
        other => Err(unexpected("lookup", &other)),
    }
}

fn expect_spawned(r: Response) -> Result<Nspace> {
    match r {
        Response::Spawned(ns) => Ok(ns),
        other => Err(unexpected("spawn", &other)),
    }
}

/// A spawn's request, checked here first. An application without a working directory
/// runs in this process's, and a relative one is taken from this process's (as
/// OpenPMIx's client does): the node servers' own directories mean nothing to the
/// caller, and a relative program (`./worker`) is then found where the caller sees it.
fn spawn_request(mut apps: Vec<SpawnApp>, opts: SpawnOpts) -> Result<Request> {
    validate_spawn(&apps).map_err(|e| CohortError::BadRequest(format!("spawn: {e}")))?;
    // A caller whose directory was removed keeps the node servers' (or its relative
    // path as given), as before.
    if let Ok(here) = std::env::current_dir() {
        for app in &mut apps {
            let dir = match app.cwd.as_deref() {
                None | Some("") => here.clone(),
                Some(d) => here.join(d),
            };
            app.cwd = Some(dir.to_string_lossy().into_owned());
        }
    }
    Ok(Request::Spawn { apps, opts })
}

/// A lookup's request, with its keys checked here first.
fn lookup_request(keys: &[&str], opts: LookupOpts) -> Result<Request> {
    if keys.is_empty() {
        return Err(CohortError::BadRequest("lookup: no keys to look up".into()));
    }
    keys.iter().try_for_each(|k| validate_key(k))?;
    Ok(Request::Lookup {
        keys: keys.iter().map(|k| k.to_string()).collect(),
        opts,
    })
}

fn unpublish_request(keys: Option<&[&str]>, range: DataRange) -> Request {
    Request::Unpublish {
        keys: keys.map(|ks| ks.iter().map(|k| k.to_string()).collect()),
        range,
    }
}

fn expect_value(r: Response) -> Result<Value> {
    match r {
        Response::Value(v) => Ok(v),
        other => Err(unexpected("get", &other)),
    }
}

fn expect_group(op: &str, r: Response) -> Result<GroupResult> {
    match r {
        Response::Group(g) => Ok(std::sync::Arc::unwrap_or_clone(g)),
        other => Err(unexpected(op, &other)),
    }
}

/// A join's reply: a group when it accepted, nothing when it declined.
fn expect_join(accept: bool, r: Response) -> Result<Option<GroupResult>> {
    match (accept, r) {
        (true, Response::Group(g)) => Ok(Some(std::sync::Arc::unwrap_or_clone(g))),
        (false, Response::Done) => Ok(None),
        (accept, other) => Err(unexpected(
            if accept {
                "an accepting group join"
            } else {
                "a declining group join"
            },
            &other,
        )),
    }
}

fn expect_names(r: Response) -> Result<Vec<String>> {
    match r {
        Response::GroupNames(n) => Ok(n),
        other => Err(unexpected("group names query", &other)),
    }
}

fn expect_procs(op: &str, r: Response) -> Result<Vec<ProcId>> {
    match r {
        Response::Procs(p) => Ok(p),
        other => Err(unexpected(op, &other)),
    }
}

/// A group's failed members as a failure view reports them (the "validate" calls of
/// the MPI fault-tolerance proposal, `spec/mpi3-ft-validate-local-global.txt`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailedMembers {
    /// Every failed member in this view, in canonical order (namespace, then rank).
    pub failed: Vec<ProcId>,
    /// Those of `failed` that were not in this process's previous view of the group,
    /// local or global (MPI_RANK_STATE_MOD_NEW); all of them the first time.
    pub new: Vec<ProcId>,
}

impl Inner {
    /// Records `failed` as the latest view of group `id` and says what is new in it.
    fn record_view(&self, id: &str, failed: Vec<ProcId>) -> FailedMembers {
        let mut views = lock(&self.failure_views);
        let before = views.get(id).map(Vec::as_slice).unwrap_or_default();
        let new = failed
            .iter()
            .filter(|p| before.binary_search(p).is_err())
            .cloned()
            .collect();
        views.insert(id.to_string(), failed.clone());
        FailedMembers { failed, new }
    }
}

fn check_range(range: &Range) -> Result<()> {
    match range {
        Range::Group(id) => validate_group_id(id),
        _ => Ok(()),
    }
}

/// Looks up a launcher-set variable, naming it when it is missing.
fn required_var(lookup: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<String> {
    lookup(name).ok_or_else(|| {
        CohortError::BadRequest(format!(
            "environment variable {name} is not set: this process was not started by \
             `cohort run` (singleton mode is not supported)"
        ))
    })
}

impl Client {
    /// Connects to the node server named by the environment `cohort run` sets
    /// (`COHORT_SERVER_URI`, `COHORT_NSPACE`, `COHORT_RANK`, `COHORT_TOKEN`).
    pub fn init() -> Result<Client> {
        Self::init_from(&|name| std::env::var(name).ok())
    }

    fn init_from(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Client> {
        let uri = required_var(lookup, env::SERVER_URI)?;
        let nspace = required_var(lookup, env::NSPACE)?;
        let rank_text = required_var(lookup, env::RANK)?;
        let rank = rank_text.trim().parse::<u32>().map_err(|_| {
            CohortError::BadRequest(format!("{}={rank_text:?} is not a rank", env::RANK))
        })?;
        let token =
            env::from_hex(required_var(lookup, env::CLIENT_TOKEN)?.trim()).ok_or_else(|| {
                CohortError::BadRequest(format!("{} is not valid hex", env::CLIENT_TOKEN))
            })?;
        Self::connect(uri, &nspace, rank, &token)
    }

    /// Connects to the node server at `path` as rank `rank` of `nspace`, proving the
    /// job's client `token`. Fails with the server's error if it refuses the hello.
    /// (`PMIx_Connect`, connecting processes with each other, is
    /// [`connect_procs`](Self::connect_procs).)
    pub fn connect(
        path: impl AsRef<Path>,
        nspace: &str,
        rank: u32,
        token: &[u8],
    ) -> Result<Client> {
        let (stream, welcome) = conn::handshake(path.as_ref(), nspace, rank, token)?;
        let proc_id = ProcId::new(nspace, rank);
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let conn = Conn::start(stream, proc_id.clone(), events_tx.clone())?;
        let registry = Arc::new(EventRegistry::default());
        let io_clock = conn.io_clock();
        // Every rank of the job must meet there, so a segment that cannot be mapped
        // is an error, not a reason to fence elsewhere.
        let fence_shm = match &welcome.fence_shm {
            Some(path) => Some(ShmFence::open(Path::new(path), welcome.job.size()).map_err(
                |e| {
                    CohortError::Io(format!(
                        "cannot map the node-local fence segment {path}: {e}"
                    ))
                },
            )?),
            None => None,
        };
        let inner = Arc::new(Inner {
            conn,
            proc_id,
            welcome,
            puts: Mutex::new(PutBuffer::default()),
            fence_shm,
            shm_seq: Mutex::new(0),
            shm_floors: Mutex::new(Vec::new()),
            registry: Arc::clone(&registry),
            events: events_tx,
            failure_views: Mutex::new(std::collections::HashMap::new()),
            connects: Mutex::new(connect::ConnectBook::default()),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("cohort-events".into())
            .spawn(move || events::run_event_thread(events_rx, registry, weak, io_clock))
            .map_err(|e| CohortError::Io(format!("cannot start the event thread: {e}")))?;
        tracing::debug!(proc = %inner.proc_id, node = inner.welcome.node, "connected to the node server");
        Ok(Client { inner })
    }

    /// This process's identifier.
    pub fn proc_id(&self) -> &ProcId {
        &self.inner.proc_id
    }

    /// This process's rank in its namespace.
    pub fn rank(&self) -> u32 {
        self.inner.proc_id.rank
    }

    /// Number of ranks in this process's job.
    pub fn size(&self) -> u32 {
        self.inner.welcome.job.size()
    }

    /// This process's namespace.
    pub fn nspace(&self) -> &str {
        &self.inner.proc_id.nspace
    }

    /// The job's map as the node server sent it: rank → node, the application contexts
    /// (MPMD) and the process sets.
    pub fn job(&self) -> &JobMap {
        &self.inner.welcome.job
    }

    /// The session's universe size (PMIX_UNIV_SIZE, MPI_UNIVERSE_SIZE): how many
    /// processes the session's hosts hold (their cores, each host once), at least the
    /// launched job's size. What a manager spawns workers up to.
    pub fn universe_size(&self) -> u32 {
        self.inner.welcome.universe
    }

    /// Where the bound processes of this job on this node sit (their CPUs and
    /// locality strings, PMIX_CPUSET and PMIX_LOCALITY_STRING), as the node server
    /// said at init; unbound ones are not listed.
    pub fn local_bindings(&self) -> &[LocalBinding] {
        &self.inner.welcome.local_bindings
    }

    /// Index of the node server this process talks to.
    pub fn node_id(&self) -> NodeId {
        self.inner.welcome.node
    }

    /// Name of the node this process runs on.
    pub fn node_name(&self) -> &str {
        &self.inner.welcome.node_name
    }

    /// Posts `key` for others to read once committed. Buffered here until
    /// [`commit`](Self::commit), a fence or a group construct sends it.
    pub fn put(&self, scope: Scope, key: &str, value: impl Into<Value>) -> Result<()> {
        if key.is_empty() {
            return Err(CohortError::BadRequest("put with an empty key".into()));
        }
        lock(&self.inner.puts).put(scope, key, value.into());
        Ok(())
    }

    /// Sends the data posted so far to the node server. Needs no reply: the server
    /// handles frames in order, so a later fence or get on this client sees it.
    pub fn commit(&self) -> Result<()> {
        let mut puts = lock(&self.inner.puts);
        let commit = ClientFrame {
            id: 0,
            req: puts.take_commit(),
        };
        let bytes = match encode_checked(&commit) {
            Ok(b) => b,
            Err(e) => {
                puts.restore(commit.req);
                return Err(e);
            }
        };
        self.inner.conn.send_oneway(&bytes)
    }

    /// Blocking request/reply. `timeout_ms` is the server-side timeout carried in the
    /// request; the client waits at most that plus [`HARD_DEADLINE_GRACE`].
    fn call(&self, req: Request, auto_commit: bool, timeout_ms: Option<u64>) -> Result<Response> {
        let op = req.op_name();
        let (tx, rx) = crossbeam_channel::bounded(1);
        let guard = self.inner.submit(req, auto_commit, Waiter::Blocking(tx))?;
        let deadline = timeout_ms.map(|ms| Duration::from_millis(ms) + HARD_DEADLINE_GRACE);
        conn::wait_blocking(&rx, guard, deadline, op, timeout_ms.unwrap_or(0))
    }

    /// Starts a request now and returns its reply future.
    fn call_async(&self, req: Request, auto_commit: bool) -> ReplyFuture {
        let (tx, rx) = tokio::sync::oneshot::channel();
        match self.inner.submit(req, auto_commit, Waiter::Async(tx)) {
            Ok(guard) => ReplyFuture::new(rx, guard),
            Err(e) => ReplyFuture::failed(e),
        }
    }

    fn get_request(&self, proc: &ProcId, key: &str, timeout: Option<Duration>) -> Request {
        // After a node-local fence, the owner's commits may still be on their way.
        let after_commits = if self.inner.fence_shm.is_some()
            && proc.nspace == *self.nspace()
            && !proc.is_wildcard()
        {
            lock(&self.inner.shm_floors)
                .get(proc.rank as usize)
                .copied()
                .unwrap_or(0)
        } else {
            0
        };
        Request::Get {
            proc: proc.clone(),
            key: key.to_string(),
            timeout_ms: timeout.map(duration_ms),
            after_commits,
        }
    }

    /// Reads `key` posted by `proc` (which may be `{group id, group rank}`), waiting
    /// up to `timeout` for it to appear (`None`: the server's default).
    pub fn get(&self, proc: &ProcId, key: &str, timeout: Option<Duration>) -> Result<Value> {
        let req = self.get_request(proc, key, timeout);
        expect_value(self.call(req, false, timeout.map(duration_ms))?)
    }

    /// Async form of [`get`](Self::get).
    pub fn get_async(
        &self,
        proc: &ProcId,
        key: &str,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Value>> + Send + 'static {
        let reply = self.call_async(self.get_request(proc, key, timeout), false);
        async move { expect_value(reply.await?) }
    }

    fn fence_request(&self, procs: &[ProcId], opts: FenceOpts) -> Request {
        let procs = if procs.is_empty() {
            vec![ProcId::wildcard(self.nspace())]
        } else {
            procs.to_vec()
        };
        Request::Fence { procs, opts }
    }

    /// Fence over `procs` (wildcards allowed: `{nspace,*}`, `{group,*}`); an empty
    /// slice means every rank of this job. Pending puts are committed first.
    pub fn fence(&self, procs: &[ProcId], opts: FenceOpts) -> Result<()> {
        let start = Instant::now();
        let timeout_ms = opts.timeout_ms;
        let result = match self.node_local_fence(procs) {
            Some(shm) => self.shm_fence(shm, &opts),
            None => self
                .call(self.fence_request(procs, opts), true, timeout_ms)
                .and_then(|r| expect_done("fence", r)),
        };
        tracing::debug!(
            op = "fence",
            participants = procs.len(),
            elapsed_us = start.elapsed().as_micros() as u64,
            ok = result.is_ok(),
        );
        result
    }

    /// Async form of [`fence`](Self::fence).
    pub fn fence_async(
        &self,
        procs: &[ProcId],
        opts: FenceOpts,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        type Fut = std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>;
        if self.node_local_fence(procs).is_some() {
            // Every rank must take the same path: the node-local fence, waited for on
            // a helper thread.
            let (tx, rx) = tokio::sync::oneshot::channel();
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("cohort-fence".into())
                .spawn(move || {
                    if let Some(shm) = me.node_local_fence(&[]) {
                        let _ = tx.send(me.shm_fence(shm, &opts));
                    }
                });
            let fut: Fut = match spawned {
                Ok(_) => Box::pin(async move {
                    rx.await.unwrap_or_else(|_| {
                        Err(CohortError::Io(
                            "the fence thread ended without a result".into(),
                        ))
                    })
                }),
                Err(e) => Box::pin(std::future::ready(Err(CohortError::Io(format!(
                    "cannot start the fence thread: {e}"
                ))))),
            };
            return fut;
        }
        let reply = self.call_async(self.fence_request(procs, opts), true);
        let fut: Fut = Box::pin(async move { expect_done("fence", reply.await?) });
        fut
    }

    /// Whether fences over the whole job meet in node-local shared memory (a one-node
    /// job whose node server offers it) rather than at the node server.
    pub fn fences_in_shared_memory(&self) -> bool {
        self.inner.fence_shm.is_some()
    }

    /// The node-local fence segment, when `procs` names every rank of this one-node
    /// job (empty, `{nspace,*}`, or all ranks listed): all ranks decide alike.
    fn node_local_fence(&self, procs: &[ProcId]) -> Option<&ShmFence> {
        let shm = self.inner.fence_shm.as_ref()?;
        let ns = self.nspace();
        if procs.is_empty() {
            return Some(shm);
        }
        if procs.iter().any(|p| p.nspace != *ns) {
            return None;
        }
        if procs.iter().any(ProcId::is_wildcard) {
            return Some(shm);
        }
        let ranks: std::collections::BTreeSet<u32> = procs.iter().map(|p| p.rank).collect();
        (ranks.len() == self.size() as usize && ranks.iter().all(|&r| r < self.size()))
            .then_some(shm)
    }

    /// A whole-job fence in the node-local segment: commits pending puts (they travel
    /// to the node server, ahead of any get after the fence), then meets the other
    /// ranks there.
    ///
    /// Once a rank terminated without arriving, the fence cannot complete in the
    /// segment; every live rank sees that (in the segment, at this fence and every
    /// later one) and takes the fence to the node server instead, which completes it
    /// among the others when every caller asked for PMIX_GROUP_FT_COLLECTIVE
    /// (`FenceOpts::ft_collective`) and otherwise fails it naming the terminated
    /// ranks, as for a fence of a job on several nodes. After a fence timed out, the
    /// later ones go there too (the segment says from which one). All live ranks
    /// decide alike, so they meet there.
    fn shm_fence(&self, shm: &ShmFence, opts: &FenceOpts) -> Result<()> {
        let timeout_ms = opts.timeout_ms;
        let start = Instant::now();
        let mut next = lock(&self.inner.shm_seq);
        if !lock(&self.inner.puts).is_empty() {
            self.commit()?;
        }
        let commits = lock(&self.inner.puts).commits();
        let deadline = timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
        let seq = *next;
        *next = seq.wrapping_add(1);
        let ns = self.nspace();
        let procs = |ranks: Vec<u32>| ranks.into_iter().map(|r| ProcId::new(ns, r)).collect();
        let server_gone = || self.inner.conn.check_alive().is_err();
        match shm.fence(
            self.rank(),
            seq,
            commits,
            conn::spin_budget(),
            deadline,
            &server_gone,
        ) {
            Ok(()) => {
                *lock(&self.inner.shm_floors) =
                    (0..shm.ranks()).map(|r| shm.commits_of(r)).collect();
                Ok(())
            }
            Err(why @ (FenceFailure::Terminated(_) | FenceFailure::Abandoned)) => {
                drop(next);
                tracing::debug!(?why, "node-local fence: the fence goes to the node server");
                let mut opts = opts.clone();
                opts.timeout_ms = timeout_ms.map(|ms| {
                    let spent = start.elapsed().as_millis().try_into().unwrap_or(u64::MAX);
                    ms.saturating_sub(spent).max(1)
                });
                let left = opts.timeout_ms;
                self.call(self.fence_request(&[], opts), true, left)
                    .and_then(|r| expect_done("fence", r))
            }
            Err(FenceFailure::TimedOut) => Err(CohortError::Timeout {
                op: "fence".into(),
                timeout_ms: timeout_ms.unwrap_or(0),
                missing: procs(shm.not_arrived(seq)),
            }),
            // Its node server is gone: nobody can mark deaths any more.
            Err(FenceFailure::GaveUp) => {
                Err(self.inner.conn.check_alive().err().unwrap_or_else(|| {
                    CohortError::ServerLost("gave up a node-local fence".into())
                }))
            }
        }
    }

    fn construct_request(id: &str, procs: &[ProcId], opts: ConstructOpts) -> Result<Request> {
        validate_group_id(id)?;
        Ok(Request::Construct {
            id: id.to_string(),
            procs: procs.into(),
            opts,
        })
    }

    /// Constructs group `id` with the collective or the bootstrap method (PMIx
    /// §6.4.3.1–2). Pending puts are committed first so they travel with the group.
    ///
    /// * Collective: every leader passes the full leader list in `procs` (any order).
    /// * Bootstrap: each leader passes exactly its own id in `procs` and sets
    ///   [`ConstructOpts::bootstrap`] to the number of leaders; nobody needs to know
    ///   the other leaders. Leaders that disagree on the count all fail with
    ///   [`CohortError::LeaderCountMismatch`]. A leader that never calls cannot be
    ///   named by anyone, so only the timeout catches it.
    /// * Either method: leaders may name add-members in
    ///   [`ConstructOpts::add_members`]; an add-member calls with an empty `procs`.
    ///   The construct completes once every leader and every named add-member called.
    ///
    /// The result is the canonical (sorted) membership, the context id when any caller
    /// asked for one, and every member's group info.
    pub fn group_construct(
        &self,
        id: &str,
        procs: &[ProcId],
        opts: ConstructOpts,
    ) -> Result<GroupResult> {
        let timeout_ms = opts.timeout_ms;
        let req = Self::construct_request(id, procs, opts)?;
        self.traced_group_call("group construct", id, procs.len(), req, timeout_ms)
    }

    /// A blocking call answered with a group, traced with its elapsed time.
    fn traced_group_call(
        &self,
        op: &'static str,
        id: &str,
        participants: usize,
        req: Request,
        timeout_ms: Option<u64>,
    ) -> Result<GroupResult> {
        let start = Instant::now();
        let result = self
            .call(req, true, timeout_ms)
            .and_then(|r| expect_group(op, r));
        tracing::debug!(
            op,
            group = id,
            participants,
            elapsed_us = start.elapsed().as_micros() as u64,
            ok = result.is_ok(),
        );
        result
    }

    /// Async form of [`group_construct`](Self::group_construct).
    pub fn group_construct_async(
        &self,
        id: &str,
        procs: &[ProcId],
        opts: ConstructOpts,
    ) -> impl Future<Output = Result<GroupResult>> + Send + 'static {
        let reply = match Self::construct_request(id, procs, opts) {
            Ok(req) => self.call_async(req, true),
            Err(e) => ReplyFuture::failed(e),
        };
        async move { expect_group("group construct", reply.await?) }
    }

    fn invite_request(id: &str, procs: &[ProcId], opts: InviteOpts) -> Result<Request> {
        validate_group_id(id)?;
        Ok(Request::Invite {
            id: id.to_string(),
            procs: procs.to_vec(),
            opts,
        })
    }

    /// Invite/join method (PMIx §6.4.3.3): this process leads the construct of group
    /// `id` and invites `procs`, each of which gets a `codes::GROUP_INVITED` event
    /// (see [`GroupEventInfo`]) and answers with [`group_join`](Self::group_join).
    ///
    /// Blocks until every invitee has answered (accepted, declined or terminated) and
    /// the group is complete; the result's membership is this process plus the
    /// invitees that accepted, in canonical order. Meanwhile this process gets
    /// `GROUP_INVITE_ACCEPTED`, `GROUP_INVITE_DECLINED` and `GROUP_INVITE_FAILED`
    /// events; with [`InviteOpts::decide_declines`] a decline or failure pauses the
    /// construct until [`group_construct_decide`](Self::group_construct_decide) says
    /// how to go on (typically from the handler of those events). Fails with
    /// [`CohortError::ConstructAborted`] when the construct is aborted and with
    /// [`CohortError::Timeout`] past [`InviteOpts::timeout_ms`]. Pending puts are
    /// committed first so they travel with the group.
    pub fn group_invite(
        &self,
        id: &str,
        procs: &[ProcId],
        opts: InviteOpts,
    ) -> Result<GroupResult> {
        let timeout_ms = opts.timeout_ms;
        let req = Self::invite_request(id, procs, opts)?;
        self.traced_group_call("group invite", id, procs.len(), req, timeout_ms)
    }

    /// Async form of [`group_invite`](Self::group_invite): the invitations go out now.
    pub fn group_invite_async(
        &self,
        id: &str,
        procs: &[ProcId],
        opts: InviteOpts,
    ) -> impl Future<Output = Result<GroupResult>> + Send + 'static {
        let reply = match Self::invite_request(id, procs, opts) {
            Ok(req) => self.call_async(req, true),
            Err(e) => ReplyFuture::failed(e),
        };
        async move { expect_group("group invite", reply.await?) }
    }

    fn join_request(
        id: &str,
        leader: &ProcId,
        accept: bool,
        timeout: Option<Duration>,
        group_info: Info,
    ) -> Result<Request> {
        validate_group_id(id)?;
        Ok(Request::Join {
            id: id.to_string(),
            leader: leader.clone(),
            accept,
            timeout_ms: timeout.map(duration_ms),
            group_info,
        })
    }

    /// Answers the invitation to group `id` from `leader` (both are in the
    /// `GROUP_INVITED` event; see [`GroupEventInfo`]).
    ///
    /// Accepting blocks until the group is complete and returns its result
    /// (`Some`); every member then also gets `codes::GROUP_CONSTRUCT_COMPLETE`.
    /// Declining returns `None` at once. `group_info` is this process's
    /// PMIX_GROUP_INFO contribution; pending puts are committed first so they travel
    /// with the group.
    ///
    /// From an event handler prefer [`group_join_async`](Self::group_join_async): a
    /// blocking join there holds the event thread, and so every later event of this
    /// process, until the group completes.
    pub fn group_join(
        &self,
        id: &str,
        leader: &ProcId,
        accept: bool,
        timeout: Option<Duration>,
        group_info: Info,
    ) -> Result<Option<GroupResult>> {
        let start = Instant::now();
        let timeout_ms = timeout.map(duration_ms);
        let req = Self::join_request(id, leader, accept, timeout, group_info)?;
        let result = self
            .call(req, true, timeout_ms)
            .and_then(|r| expect_join(accept, r));
        tracing::debug!(
            op = "group join",
            group = id,
            %leader,
            accept,
            elapsed_us = start.elapsed().as_micros() as u64,
            ok = result.is_ok(),
        );
        result
    }

    /// Async form of [`group_join`](Self::group_join), safe to call from an event
    /// handler: the answer is sent before this returns and the handler need not wait.
    /// Dropping the future only discards the reply; the join itself stands (the
    /// server is never told to cancel it).
    pub fn group_join_async(
        &self,
        id: &str,
        leader: &ProcId,
        accept: bool,
        timeout: Option<Duration>,
        group_info: Info,
    ) -> impl Future<Output = Result<Option<GroupResult>>> + Send + 'static {
        let reply = match Self::join_request(id, leader, accept, timeout, group_info) {
            Ok(req) => self.call_async(req, true),
            Err(e) => ReplyFuture::failed(e),
        };
        async move { expect_join(accept, reply.await?) }
    }

    /// Decides how construct `id`, in progress, goes on — the PMIx "results returned
    /// from the event handler" of `GROUP_MEMBER_FAILED`, `GROUP_INVITE_DECLINED`,
    /// `GROUP_INVITE_FAILED` and `GROUP_LEADER_FAILED`:
    ///
    /// * `Continue`: proceed without the processes that failed or declined so far;
    /// * `Abort`: end the construct; blocked callers get
    ///   [`CohortError::ConstructAborted`], participants `GROUP_CONSTRUCT_ABORT`;
    /// * `Invite(procs)`: invite method, invite replacements;
    /// * `ClaimLeadership`: after `GROUP_LEADER_FAILED`, become the leader. The first
    ///   claim wins and everyone gets `GROUP_LEADER_SELECTED`; later claims fail with
    ///   [`CohortError::NotLeader`].
    ///
    /// While a leader is alive only it may decide (others get `NotLeader`). Returns
    /// once the server has taken the decision, not when the construct completes.
    pub fn group_construct_decide(&self, id: &str, decision: ConstructDecision) -> Result<()> {
        validate_group_id(id)?;
        let req = Request::Decide {
            id: id.to_string(),
            decision,
        };
        expect_done("group construct decision", self.call(req, false, None)?)
    }

    /// Async form of [`group_construct_decide`](Self::group_construct_decide).
    pub fn group_construct_decide_async(
        &self,
        id: &str,
        decision: ConstructDecision,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let reply = self.group_call_async(id, |id| Request::Decide { id, decision });
        async move { expect_done("group construct decision", reply.await?) }
    }

    /// Sends a request about group `id` after validating the id.
    fn group_call_async(&self, id: &str, req: impl FnOnce(String) -> Request) -> ReplyFuture {
        match validate_group_id(id) {
            Ok(()) => self.call_async(req(id.to_string()), false),
            Err(e) => ReplyFuture::failed(e),
        }
    }

    /// Collective destruct of group `id`, waiting up to `timeout` for the members.
    pub fn group_destruct(&self, id: &str, timeout: Option<Duration>) -> Result<()> {
        self.destruct_call(id, timeout, false)
    }

    /// [`group_destruct`](Self::group_destruct) that does not wait for members that
    /// terminated (PMIX_GROUP_FT_COLLECTIVE), when every member calls it so.
    pub fn group_destruct_tolerant(&self, id: &str, timeout: Option<Duration>) -> Result<()> {
        self.destruct_call(id, timeout, true)
    }

    fn destruct_call(&self, id: &str, timeout: Option<Duration>, ft: bool) -> Result<()> {
        validate_group_id(id)?;
        let timeout_ms = timeout.map(duration_ms);
        let req = Request::Destruct {
            id: id.to_string(),
            timeout_ms,
            ft_collective: ft,
        };
        expect_done("group destruct", self.call(req, false, timeout_ms)?)
    }

    /// Async form of [`group_destruct`](Self::group_destruct).
    pub fn group_destruct_async(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.destruct_call_async(id, timeout, false)
    }

    /// Async form of [`group_destruct_tolerant`](Self::group_destruct_tolerant).
    pub fn group_destruct_tolerant_async(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        self.destruct_call_async(id, timeout, true)
    }

    fn destruct_call_async(
        &self,
        id: &str,
        timeout: Option<Duration>,
        ft: bool,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let timeout_ms = timeout.map(duration_ms);
        let reply = self.group_call_async(id, |id| Request::Destruct {
            id,
            timeout_ms,
            ft_collective: ft,
        });
        async move { expect_done("group destruct", reply.await?) }
    }

    /// Leaves group `id`; the remaining members get a `GROUP_LEFT` event.
    pub fn group_leave(&self, id: &str) -> Result<()> {
        validate_group_id(id)?;
        let req = Request::Leave { id: id.to_string() };
        expect_done("group leave", self.call(req, false, None)?)
    }

    /// Async form of [`group_leave`](Self::group_leave).
    pub fn group_leave_async(&self, id: &str) -> impl Future<Output = Result<()>> + Send + 'static {
        let reply = self.group_call_async(id, |id| Request::Leave { id });
        async move { expect_done("group leave", reply.await?) }
    }

    /// Membership and context id of group `id` (PMIX_QUERY_GROUP_MEMBERSHIP), as this
    /// process's node server knows it: any process may ask, but only groups with a
    /// member on the same node are known there (`GroupNotFound` otherwise).
    pub fn group_query(&self, id: &str) -> Result<GroupResult> {
        validate_group_id(id)?;
        let req = Request::QueryGroup { id: id.to_string() };
        expect_group("group query", self.call(req, false, None)?)
    }

    /// Async form of [`group_query`](Self::group_query).
    pub fn group_query_async(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<GroupResult>> + Send + 'static {
        let reply = self.group_call_async(id, |id| Request::QueryGroup { id });
        async move { expect_group("group query", reply.await?) }
    }

    /// The local failure view of group `id` ("L"; MPI_Comm_validate_local): the
    /// members this process's node server knows to have failed — terminated, or hosted
    /// by a node server that was lost. A local call: no other process takes part, and
    /// two members may see different sets at the same moment. Members that left the
    /// group are not members, failed or not. The caller must be a member.
    pub fn group_failed_local(&self, id: &str) -> Result<FailedMembers> {
        validate_group_id(id)?;
        let req = Request::FailedLocal { id: id.to_string() };
        let failed = expect_procs("local failure view", self.call(req, false, None)?)?;
        Ok(self.inner.record_view(id, failed))
    }

    /// The global failure view of group `id` ("G"; MPI_Comm_validate_global): a
    /// collective among the members still alive, which every one of them must call.
    /// Each gets the same set: the union of every caller's local view and of the
    /// members that terminated before calling (those that left are not waited for).
    /// This process's local view becomes that set. If the node server deciding it is
    /// lost before its answer got here, the view's other servers are asked whether
    /// they got it; it fails with `PeerLost` only if none did, for every member alike
    /// (call again: a call that a server known to be lost would decide is skipped).
    /// Fails with `Timeout` naming the members that did not call within `timeout`.
    pub fn group_failed_global(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<FailedMembers> {
        validate_group_id(id)?;
        let timeout_ms = timeout.map(duration_ms);
        let req = Request::FailedGlobal {
            id: id.to_string(),
            timeout_ms,
        };
        let failed = expect_procs("global failure view", self.call(req, false, timeout_ms)?)?;
        Ok(self.inner.record_view(id, failed))
    }

    /// Async form of [`group_failed_global`](Self::group_failed_global).
    pub fn group_failed_global_async(
        &self,
        id: &str,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<FailedMembers>> + Send + 'static {
        let timeout_ms = timeout.map(duration_ms);
        let reply = self.group_call_async(id, |id| Request::FailedGlobal { id, timeout_ms });
        let inner = Arc::clone(&self.inner);
        let id = id.to_string();
        async move {
            let failed = expect_procs("global failure view", reply.await?)?;
            Ok(inner.record_view(&id, failed))
        }
    }

    /// Names of the groups this process belongs to (PMIX_GROUP_NAMES).
    pub fn group_names(&self) -> Result<Vec<String>> {
        expect_names(self.call(Request::QueryGroupNames, false, None)?)
    }

    /// Async form of [`group_names`](Self::group_names).
    pub fn group_names_async(&self) -> impl Future<Output = Result<Vec<String>>> + Send + 'static {
        let reply = self.call_async(Request::QueryGroupNames, false);
        async move { expect_names(reply.await?) }
    }

    // ------------------------------------------------------------ process sets

    /// Names of the process sets defined in the session (PMIX_QUERY_PSET_NAMES): the
    /// launched job's (`cohort run --pset`), then those of the spawned jobs still
    /// running (`SpawnApp::pset`), each job's in the order they were defined. Asked of
    /// the node server, which learns a spawned job's sets as it starts the job's
    /// processes here and forgets them once every one of them ended (processes get
    /// `PROCESS_SET_DEFINE` / `PROCESS_SET_DELETE` events then).
    pub fn pset_names(&self) -> Result<Vec<String>> {
        Ok(self.session_info()?.1)
    }

    /// Number of process sets defined in the session (PMIX_QUERY_NUM_PSETS).
    pub fn pset_count(&self) -> Result<usize> {
        Ok(self.pset_names()?.len())
    }

    /// Members of process set `name`, ascending (PMIX_QUERY_PSET_MEMBERSHIP); fails with
    /// [`CohortError::PsetNotFound`] when no set of that name is defined in the session.
    pub fn pset_members(&self, name: &str) -> Result<Vec<ProcId>> {
        let req = Request::QueryPset {
            name: name.to_string(),
        };
        expect_procs("process set query", self.call(req, false, None)?)
    }

    /// The namespaces of the session's running jobs, the launched one first, then
    /// the spawned ones not yet ended (PMIX_QUERY_NAMESPACES).
    pub fn namespaces(&self) -> Result<Vec<Nspace>> {
        Ok(self.session_info()?.0)
    }

    fn session_info(&self) -> Result<(Vec<Nspace>, Vec<String>)> {
        match self.call(Request::QuerySession, false, None)? {
            Response::Session { nspaces, psets } => Ok((nspaces, psets)),
            other => Err(unexpected("session query", &other)),
        }
    }

    /// Names of the process sets `proc` belongs to, in definition order (PMIX_PSET_NAMES,
    /// as `PMIx_Get` returns it; also readable with [`get`](Self::get) under
    /// [`keys::PSET_NAMES`]). Empty when it belongs to none; `UnknownProc` when `proc`
    /// is not a rank of this job.
    pub fn psets_of(&self, proc: &ProcId) -> Result<Vec<String>> {
        let rank = self.job_rank(proc)?;
        Ok(self.job().psets_of(rank).unwrap_or_default())
    }

    /// The application context (MPMD program, counted from 0 in command-line order)
    /// `proc` runs (PMIX_APPNUM; also readable with [`get`](Self::get) under
    /// [`keys::APPNUM`]). `UnknownProc` when `proc` is not a rank of this job.
    pub fn appnum(&self, proc: &ProcId) -> Result<u32> {
        let rank = self.job_rank(proc)?;
        self.job()
            .app_of(rank)
            .ok_or_else(|| CohortError::UnknownProc {
                proc: proc.clone(),
                reason: "in no application context".into(),
            })
    }

    /// Number of application contexts of this job (PMIX_JOB_NUM_APPS).
    pub fn num_apps(&self) -> u32 {
        self.job().num_apps()
    }

    /// `proc`'s rank when it is a (non-wildcard) rank of this job.
    fn job_rank(&self, proc: &ProcId) -> Result<u32> {
        if !self.job().contains(proc) {
            let reason = if proc.nspace != *self.nspace() {
                format!("not a process of this job ({})", self.nspace())
            } else if proc.is_wildcard() {
                "a wildcard names no single process".to_string()
            } else {
                format!("job {} has {} ranks", self.nspace(), self.size())
            };
            return Err(CohortError::UnknownProc {
                proc: proc.clone(),
                reason,
            });
        }
        Ok(proc.rank)
    }

    // ------------------------------------------------------------ publish / lookup

    /// Publishes `data` (key → value) in the job's data store for [`lookup`] by
    /// processes in `range` (PMIx_Publish; PMIx's defaults are [`DataRange::Session`]
    /// and [`Persistence::App`]). All or nothing: a key already published in the same
    /// range fails the call with `KeyPublished` (PMIX_ERR_DUPLICATE_KEY), naming the
    /// key and its publisher. Returns once the store holds the data.
    ///
    /// [`lookup`]: Self::lookup
    pub fn publish(&self, data: Info, range: DataRange, persistence: Persistence) -> Result<()> {
        let req = Request::Publish {
            data,
            range,
            persistence,
        };
        expect_done("publish", self.call(req, false, None)?)
    }

    /// Async form of [`publish`](Self::publish).
    pub fn publish_async(
        &self,
        data: Info,
        range: DataRange,
        persistence: Persistence,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let reply = self.call_async(
            Request::Publish {
                data,
                range,
                persistence,
            },
            false,
        );
        async move { expect_done("publish", reply.await?) }
    }

    /// The values published under `keys` that this process may see in `opts.range`
    /// (PMIx_Lookup): only those found, each with its publisher; none found is an
    /// empty list. With `opts.wait` it answers only once that many of the keys (0: all)
    /// are published, or fails with `Timeout` after `opts.timeout_ms`; without a
    /// timeout it waits as long as the job runs (or until the store's node server is
    /// lost: `PeerLost`).
    pub fn lookup(&self, keys: &[&str], opts: LookupOpts) -> Result<Vec<Published>> {
        let timeout_ms = opts.timeout_ms.filter(|_| opts.wait.is_some());
        let req = lookup_request(keys, opts)?;
        expect_published(self.call(req, false, timeout_ms)?)
    }

    /// Async form of [`lookup`](Self::lookup).
    pub fn lookup_async(
        &self,
        keys: &[&str],
        opts: LookupOpts,
    ) -> impl Future<Output = Result<Vec<Published>>> + Send + 'static {
        let reply = match lookup_request(keys, opts) {
            Ok(req) => self.call_async(req, false),
            Err(e) => ReplyFuture::failed(e),
        };
        async move { expect_published(reply.await?) }
    }

    /// Removes this process's published values under `keys` (every one of them with
    /// `None`) in `range` (PMIx_Unpublish); the keys may then be published again.
    /// Keys this process did not publish there are left alone.
    pub fn unpublish(&self, keys: Option<&[&str]>, range: DataRange) -> Result<()> {
        let req = unpublish_request(keys, range);
        expect_done("unpublish", self.call(req, false, None)?)
    }

    /// Async form of [`unpublish`](Self::unpublish).
    pub fn unpublish_async(
        &self,
        keys: Option<&[&str]>,
        range: DataRange,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let reply = self.call_async(unpublish_request(keys, range), false);
        async move { expect_done("unpublish", reply.await?) }
    }

    /// Starts a new job of `apps` in this session, on its node servers
    /// (PMIx_Spawn): answers with the new job's namespace once every one of its
    /// processes was started. Its processes see this process as their parent
    /// ([`Client::parent`]), can exchange data with the session's other processes and
    /// form groups with them; `cohort run` ends once they all ended too.
    pub fn spawn(&self, apps: Vec<SpawnApp>, opts: SpawnOpts) -> Result<Nspace> {
        let req = spawn_request(apps, opts)?;
        expect_spawned(self.call(req, false, None)?)
    }

    /// Async form of [`spawn`](Self::spawn).
    pub fn spawn_async(
        &self,
        apps: Vec<SpawnApp>,
        opts: SpawnOpts,
    ) -> impl Future<Output = Result<Nspace>> + Send + 'static {
        let reply = match spawn_request(apps, opts) {
            Ok(req) => self.call_async(req, false),
            Err(e) => ReplyFuture::failed(e),
        };
        async move { expect_spawned(reply.await?) }
    }

    /// The process that spawned this process's job (PMIX_PARENT_ID), or `None` for a
    /// job `cohort run` launched.
    pub fn parent(&self) -> Result<Option<ProcId>> {
        match self.get(self.proc_id(), keys::PARENT_ID, None) {
            Ok(Value::Procs(p)) if p.len() == 1 => Ok(p.into_iter().next()),
            Ok(other) => Err(CohortError::BadRequest(format!(
                "{} is not one process: {other:?}",
                keys::PARENT_ID
            ))),
            Err(CohortError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Raises event `code` to `range` (never delivered back to this process).
    pub fn notify(&self, code: EventCode, range: Range, info: Info) -> Result<()> {
        check_range(&range)?;
        let req = Request::Notify { code, range, info };
        expect_done("notify", self.call(req, false, None)?)
    }

    /// Async form of [`notify`](Self::notify).
    pub fn notify_async(
        &self,
        code: EventCode,
        range: Range,
        info: Info,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let reply = match check_range(&range) {
            Ok(()) => self.call_async(Request::Notify { code, range, info }, false),
            Err(e) => ReplyFuture::failed(e),
        };
        async move { expect_done("notify", reply.await?) }
    }

    /// Registers `handler` for events whose code is in `codes` (`None` or an empty
    /// slice: every code). Handlers run on the client's event thread and may call any
    /// client API; an event goes to the handlers registered for its code alone first,
    /// then to those for several codes, then to those for every code, each group in
    /// registration order (PMIx's order). Events that arrived earlier and matched no
    /// handler are cached (the newest [`EVENT_CACHE_CAPACITY`]) and handed to this
    /// handler now, each to the first matching handler registered after it arrived.
    ///
    /// If the connection to the server is lost, a `codes::LOST_CONNECTION` event is
    /// raised locally with the reason under [`LOST_REASON_KEY`].
    pub fn register_event_handler(
        &self,
        codes: Option<&[EventCode]>,
        handler: impl Fn(&Client, &Event) + Send + Sync + 'static,
    ) -> HandlerId {
        self.register_event_chain(codes, move |c, e| {
            handler(c, e);
            EventFlow::Continue
        })
    }

    /// As [`register_event_handler`](Self::register_event_handler), for a handler that
    /// may end the event's chain: after [`EventFlow::Stop`] no later handler gets that
    /// event (PMIx's `PMIX_EVENT_ACTION_COMPLETE`).
    pub fn register_event_chain(
        &self,
        codes: Option<&[EventCode]>,
        handler: impl Fn(&Client, &Event) -> EventFlow + Send + Sync + 'static,
    ) -> HandlerId {
        self.register(codes, events::Handler::Now(Box::new(handler)))
    }

    /// As [`register_event_chain`](Self::register_event_chain), for a handler that
    /// answers through the [`ChainResume`] it is given, when it returns or later, from
    /// any thread (PMIx's handlers, which call their callback when they are done):
    /// the handlers after it get the event only once it answered
    /// [`EventFlow::Continue`]; other events go on meanwhile. A resume dropped without
    /// an answer ends the chain.
    pub fn register_event_chain_deferred(
        &self,
        codes: Option<&[EventCode]>,
        handler: impl Fn(&Client, &Event, ChainResume) + Send + Sync + 'static,
    ) -> HandlerId {
        self.register(codes, events::Handler::Deferred(Box::new(handler)))
    }

    fn register(&self, codes: Option<&[EventCode]>, handler: events::Handler) -> HandlerId {
        let id = self.inner.registry.add(codes, Arc::new(handler));
        self.inner.conn.want_events();
        // The event thread outlives every handle, so this send cannot fail while
        // `self` exists; if it somehow did, the handler would simply never run.
        let _ = self.inner.events.send(EventMsg::Activate(id));
        id
    }

    /// The CPUs this rank is bound to, as its node server set them before exec
    /// (`COHORT_BINDING`): `Binding::Unbound` when it chose not to bind (e.g.
    /// oversubscribed), `None` when not started by `cohortd`.
    pub fn binding(&self) -> Option<Binding> {
        cohort_topology::binding_from_env()
    }

    /// Removes a handler. A call already running completes; no new one starts.
    pub fn deregister_event_handler(&self, id: HandlerId) {
        self.inner.registry.remove(id);
    }

    /// Tells the node server this process is done, waits for its answer and closes the
    /// connection. Other clones of this client fail with `ServerLost` afterwards.
    pub fn finalize(self) -> Result<()> {
        let result = self
            .call(Request::Finalize, false, None)
            .and_then(|r| expect_done("finalize", r));
        self.inner.conn.close_locally("the client was finalized");
        result
    }

    /// Async form of [`finalize`](Self::finalize).
    pub fn finalize_async(self) -> impl Future<Output = Result<()>> + Send + 'static {
        let reply = self.call_async(Request::Finalize, false);
        async move {
            let result = reply.await.and_then(|r| expect_done("finalize", r));
            self.inner.conn.close_locally("the client was finalized");
            result
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("proc", &self.inner.proc_id)
            .field("node", &self.inner.welcome.node)
            .finish_non_exhaustive()
    }
}
