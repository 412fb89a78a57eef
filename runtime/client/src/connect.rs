//! `PMIx_Connect` / `PMIx_Disconnect` (../shared/spec/rfc0003-connect-disconnect.md),
//! built on the collective group construct and destruct.
//!
//! A connect is a collective construct of a group whose id is the connection's new
//! nspace. No participant talks to another before the call, so each derives that id
//! alone from what they all share: the canonical (sorted, deduplicated, wildcards
//! expanded) process list, the PMIX_CONNECT_ID if any, and how many connects over that
//! list and id this process completed before ([`connection_nspace`]). The group is
//! marked as a connection ([`ConnectMode`]): its node servers report a member's
//! termination with `codes::PROC_TERMINATED` (unless early termination is allowed,
//! when a disconnect no longer waits for the dead), and refuse `group_leave` on it
//! (members depart together). A disconnect is the collective destruct of that group.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use cohort_proto::event::{codes, keys};
use cohort_proto::msg::{ConnectMode, ConstructOpts, ConstructStatus, FenceOpts, Request};
use cohort_proto::{validate_group_id, CohortError, Info, ProcId, Range, Value};

use crate::conn::{lock, ReplyFuture};
use crate::{duration_ms, expect_done, expect_group, Client, GroupResult, Inner, Result};

/// Options of [`Client::connect_procs`]: the rfc0003 attributes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConnectOpts {
    /// PMIX_CONNECT_ID: tells apart connects of the same processes that run at the same
    /// time. Every participant must pass the same value (or none).
    pub connect_id: Option<String>,
    /// PMIX_TIMEOUT: fail with [`CohortError::Timeout`] (naming who never called) past it.
    pub timeout: Option<Duration>,
    /// PMIX_CONNECT_OPTIONAL: listed processes that terminate without connecting do not
    /// fail the connect; it completes among the others with
    /// [`ConstructStatus::PartialSuccess`] and the terminated ones in
    /// [`Connection::failed`].
    pub optional: bool,
    /// PMIX_CONNECT_EARLY_TERM_ALLOWED: a member may terminate without disconnecting;
    /// no termination event is raised, and the others' disconnect completes without it.
    /// Early termination is allowed only if every participant passed this.
    pub early_term_allowed: bool,
    /// PMIX_CONNECT_XCHG_ONLY: exchange the participants' posted data (a collective
    /// fence with data over them) but assign no nspace or rank; there is then nothing
    /// to disconnect from. Cannot be combined with `optional`.
    pub xchg_only: bool,
    /// PMIX_CONNECT_NOTIFY_EACH: tell the other listed processes, with a
    /// `codes::PROC_HAS_CONNECTED` event (source: this process, also under
    /// `keys::EVENT_AFFECTED_PROC`; the new nspace under `keys::NSPACE`, none with
    /// `xchg_only`), that this process called connect — sent as it calls, before the
    /// connect completes.
    pub notify_each: bool,
}

/// Options of [`Client::disconnect`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DisconnectOpts {
    /// PMIX_TIMEOUT: fail with [`CohortError::Timeout`] (naming who never called) past it.
    pub timeout: Option<Duration>,
    /// PMIX_CONNECT_NOTIFY_EACH: tell the other members, with a
    /// `codes::PROC_HAS_DISCONNECTED` event (as for connect: source and
    /// `keys::EVENT_AFFECTED_PROC` this process, `keys::NSPACE` the connection), that
    /// this process called disconnect.
    pub notify_each: bool,
}

/// What a connect returns to every participant.
#[derive(Clone, Debug, PartialEq)]
pub struct Connection {
    /// The new nspace of the connected processes, identical at every member and unique
    /// while they are connected: address them as `{nspace, *}` (fence, notify with
    /// `Range::Group(nspace)`) and `{nspace, rank}` (get). `None` with
    /// [`ConnectOpts::xchg_only`].
    pub nspace: Option<String>,
    /// This process's rank in `nspace`: its index in `members`. `None` with `xchg_only`.
    pub rank: Option<u32>,
    /// The connected processes, canonical order (sorted by nspace, then rank).
    pub members: Vec<ProcId>,
    /// `PartialSuccess` when optional participants terminated without connecting.
    pub status: ConstructStatus,
    /// Listed processes that terminated without connecting (`optional` only).
    pub failed: Vec<ProcId>,
}

/// Connects this process completed, per (process list, connect id) digest, and the
/// connections it holds: what `connect_procs` and `disconnect` keep per client.
#[derive(Default)]
pub(crate) struct ConnectBook {
    completed: HashMap<u64, u64>,
    live: HashMap<String, Vec<ProcId>>,
}

/// 64-bit FNV-1a. Written out rather than taken from `std::hash`: the connection id
/// must come out the same in every process of the job — separately compiled programs
/// included — and std documents no stable algorithm for its hashers.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The digest of a connect: the canonical list and the connect id, each field
/// delimited so that no two different inputs run together.
fn digest(members: &[ProcId], connect_id: Option<&str>) -> u64 {
    let mut bytes = Vec::new();
    for p in members {
        bytes.extend_from_slice(&(p.nspace.len() as u64).to_le_bytes());
        bytes.extend_from_slice(p.nspace.as_bytes());
        bytes.extend_from_slice(&p.rank.to_le_bytes());
    }
    match connect_id {
        Some(id) => {
            bytes.push(1);
            bytes.extend_from_slice(&(id.len() as u64).to_le_bytes());
            bytes.extend_from_slice(id.as_bytes());
        }
        None => bytes.push(0),
    }
    fnv1a(bytes)
}

/// The nspace of the `seq`-th connect (0-based) with digest `digest` over `members`:
/// `<job nspace>.connect-<digest>-<seq>`. The sequence number makes sequential
/// connects of the same processes distinct by construction; the digest separates
/// different lists and ids (a collision among live connections would need two 64-bit
/// digests to agree).
pub(crate) fn connection_nspace(members: &[ProcId], digest: u64, seq: u64) -> String {
    let tail = format!("connect-{digest:016x}-{seq}");
    let with_job = members
        .first()
        .map(|p| format!("{}.{tail}", p.nspace))
        .unwrap_or_default();
    if validate_group_id(&with_job).is_ok() {
        with_job
    } else {
        tail
    }
}

/// Puts `op` in the place of the group operation's name in errors that carry one.
fn relabel(e: CohortError, op: &str) -> CohortError {
    match e {
        CohortError::Timeout {
            timeout_ms,
            missing,
            ..
        } => CohortError::Timeout {
            op: op.into(),
            timeout_ms,
            missing,
        },
        CohortError::ProcTerminated { procs, .. } => CohortError::ProcTerminated {
            op: op.into(),
            procs,
        },
        other => other,
    }
}

/// A connect ready to send.
struct Plan {
    members: Vec<ProcId>,
    digest: u64,
    nspace: Option<String>,
    opts: ConnectOpts,
}

impl Plan {
    fn construct_opts(&self) -> ConstructOpts {
        ConstructOpts {
            timeout_ms: self.opts.timeout.map(duration_ms),
            optional: self.opts.optional,
            connect: Some(if self.opts.early_term_allowed {
                ConnectMode::EarlyTermAllowed
            } else {
                ConnectMode::Strict
            }),
            ..Default::default()
        }
    }

    fn op(&self) -> String {
        match &self.nspace {
            Some(ns) => format!("connect {ns}"),
            None => "connect (exchange only)".into(),
        }
    }

    /// The PROC_HAS_CONNECTED notification for the other participants, when wanted.
    fn notification(&self, me: &ProcId) -> Option<Request> {
        let others: Vec<ProcId> = self.members.iter().filter(|p| *p != me).cloned().collect();
        if !self.opts.notify_each || others.is_empty() {
            return None;
        }
        Some(Request::Notify {
            code: codes::PROC_HAS_CONNECTED,
            range: Range::Procs(others),
            info: event_info(me, self.nspace.as_deref()),
        })
    }

    /// The connection a successful construct (or exchange) makes, recorded in `book`.
    fn finish(self, me: &ProcId, group: Option<GroupResult>, book: &mut ConnectBook) -> Connection {
        *book.completed.entry(self.digest).or_insert(0) += 1;
        let Some(g) = group else {
            return Connection {
                nspace: None,
                rank: None,
                members: self.members,
                status: ConstructStatus::Success,
                failed: Vec::new(),
            };
        };
        let rank = g.members.binary_search(me).ok().map(|i| i as u32);
        book.live.insert(g.id.clone(), g.members.clone());
        Connection {
            nspace: Some(g.id),
            rank,
            members: g.members,
            status: g.status,
            failed: g.failed,
        }
    }
}

/// The info of a PROC_HAS_(DIS)CONNECTED event about `me`.
fn event_info(me: &ProcId, nspace: Option<&str>) -> Info {
    let mut info = vec![(
        keys::EVENT_AFFECTED_PROC.to_string(),
        Value::Procs(vec![me.clone()]),
    )];
    if let Some(ns) = nspace {
        info.push((keys::NSPACE.to_string(), Value::Str(ns.to_string())));
    }
    info
}

/// The other nspaces (groups, connections) a connect list names.
fn foreign_nspaces(me: &ProcId, procs: &[ProcId]) -> BTreeSet<String> {
    procs
        .iter()
        .filter(|p| p.nspace != me.nspace)
        .map(|p| p.nspace.to_string())
        .collect()
}

/// The job-level key of a job's size.
const JOB_SIZE: &str = "pmix.job.size";

/// The ranks of job `ns` of the session from its size as the node server answered it
/// (`None`: `ns` is no job).
fn job_ranks(ns: &str, size: Result<Value>) -> Option<Vec<ProcId>> {
    match size {
        Ok(Value::U32(n)) => Some((0..n).map(|r| ProcId::new(ns, r)).collect()),
        _ => None,
    }
}

impl Client {
    /// The canonical list of a connect: sorted, without duplicates, `{nspace,*}`
    /// expanded — this job's from its size, a group's or connection's from its
    /// membership (`foreign`: its members, `None` when unknown here).
    fn connect_members(
        &self,
        procs: &[ProcId],
        foreign: &HashMap<String, Option<Vec<ProcId>>>,
    ) -> Result<Vec<ProcId>> {
        if procs.is_empty() {
            return Err(CohortError::BadRequest(
                "connect with an empty process list".into(),
            ));
        }
        let mut out = BTreeSet::new();
        for p in procs {
            if p.nspace == self.nspace() {
                if p.is_wildcard() {
                    out.extend((0..self.size()).map(|r| ProcId::new(self.nspace(), r)));
                } else if p.rank < self.size() {
                    out.insert(p.clone());
                } else {
                    return Err(CohortError::UnknownProc {
                        proc: p.clone(),
                        reason: format!("job {} has {} ranks", self.nspace(), self.size()),
                    });
                }
                continue;
            }
            let Some(Some(members)) = foreign.get(p.nspace.as_str()) else {
                return Err(CohortError::UnknownProc {
                    proc: p.clone(),
                    reason: "no such namespace, group or connection".into(),
                });
            };
            if p.is_wildcard() {
                out.extend(members.iter().cloned());
            } else {
                match members.get(p.rank as usize) {
                    Some(m) => {
                        out.insert(m.clone());
                    }
                    None => {
                        return Err(CohortError::UnknownProc {
                            proc: p.clone(),
                            reason: format!("{} has {} members", p.nspace, members.len()),
                        })
                    }
                }
            }
        }
        let members: Vec<ProcId> = out.into_iter().collect();
        if members.binary_search(self.proc_id()).is_err() {
            return Err(CohortError::BadRequest(format!(
                "connect caller {} is not among the processes to connect {}",
                self.proc_id(),
                cohort_proto::ids::fmt_procs(&members)
            )));
        }
        Ok(members)
    }

    /// Checks the options and derives the connection's nspace.
    fn connect_plan(
        &self,
        procs: &[ProcId],
        opts: ConnectOpts,
        foreign: &HashMap<String, Option<Vec<ProcId>>>,
    ) -> Result<Plan> {
        if opts.xchg_only && opts.optional {
            return Err(CohortError::NotSupported(
                "connect with both PMIX_CONNECT_XCHG_ONLY and PMIX_CONNECT_OPTIONAL".into(),
            ));
        }
        if let Some(id) = &opts.connect_id {
            if id.is_empty() || id.contains('\0') {
                return Err(CohortError::BadRequest(format!(
                    "connect id {id:?} is empty or contains a NUL byte"
                )));
            }
        }
        let members = self.connect_members(procs, foreign)?;
        let digest = digest(&members, opts.connect_id.as_deref());
        let nspace = (!opts.xchg_only).then(|| {
            let seq = lock(&self.inner.connects)
                .completed
                .get(&digest)
                .copied()
                .unwrap_or(0);
            connection_nspace(&members, digest, seq)
        });
        Ok(Plan {
            members,
            digest,
            nspace,
            opts,
        })
    }

    /// `PMIx_Connect` (rfc0003): connects this process with `procs` — which must
    /// include it; `{nspace,*}` names every process of a job, group or connection;
    /// order and duplicates do not matter. Collective: every listed process must call
    /// with the same list (as a set) and the same [`ConnectOpts::connect_id`], and the
    /// call returns once all did (or fails: a listed process terminated without
    /// connecting, unless `optional`; the timeout passed, naming who never called).
    ///
    /// The result's [`Connection::nspace`] is a new nspace, the same at every member,
    /// and [`Connection::rank`] this process's rank in it; address the members through
    /// it until [`disconnect`](Self::disconnect). Two connects of the same processes
    /// one after the other each get their own nspace; connects of the same processes
    /// in flight together need distinct connect ids. Pending puts are committed first
    /// and every member's posted data is readable by the others on return.
    ///
    /// While connected, a member that terminates without disconnecting raises
    /// `codes::PROC_TERMINATED` at the other members (source and affected: the dead
    /// process; `keys::NSPACE`: the connection), and the others' disconnect then fails
    /// with [`CohortError::ProcTerminated`] naming it — unless every participant passed
    /// [`ConnectOpts::early_term_allowed`].
    ///
    /// (Named `connect_procs`: [`Client::connect`] opens the connection to the node
    /// server.)
    pub fn connect_procs(&self, procs: &[ProcId], opts: ConnectOpts) -> Result<Connection> {
        let mut foreign = HashMap::new();
        for ns in foreign_nspaces(self.proc_id(), procs) {
            let members = match self.group_query(&ns) {
                Ok(g) => Some(g.members),
                Err(CohortError::GroupNotFound { .. } | CohortError::InvalidGroupId { .. }) => {
                    job_ranks(
                        &ns,
                        self.get(&ProcId::wildcard(ns.as_str()), JOB_SIZE, None),
                    )
                }
                Err(e) => return Err(e),
            };
            foreign.insert(ns, members);
        }
        let plan = self.connect_plan(procs, opts, &foreign)?;
        let op = plan.op();
        if let Some(req) = plan.notification(self.proc_id()) {
            expect_done("notify", self.call(req, false, None)?)?;
        }
        let timeout_ms = plan.opts.timeout.map(duration_ms);
        let group = match &plan.nspace {
            None => {
                let fence = FenceOpts {
                    collect: true,
                    timeout_ms,
                    ft_collective: false,
                };
                self.fence(&plan.members, fence)
                    .map_err(|e| relabel(e, &op))?;
                None
            }
            Some(ns) => {
                let req = Request::Construct {
                    id: ns.clone(),
                    procs: plan.members.as_slice().into(),
                    opts: plan.construct_opts(),
                };
                let r = self
                    .call(req, true, timeout_ms)
                    .and_then(|r| expect_group("connect", r))
                    .map_err(|e| relabel(e, &op))?;
                Some(r)
            }
        };
        Ok(plan.finish(self.proc_id(), group, &mut lock(&self.inner.connects)))
    }

    /// Async form of [`connect_procs`](Self::connect_procs). The request goes out now,
    /// except when `procs` names a group or connection, whose membership is asked
    /// for first.
    pub fn connect_procs_async(
        &self,
        procs: &[ProcId],
        opts: ConnectOpts,
    ) -> impl Future<Output = Result<Connection>> + Send + 'static {
        let me = self.proc_id().clone();
        let foreign_ns = foreign_nspaces(&me, procs);
        let queries: Vec<_> = foreign_ns
            .iter()
            .map(|ns| (ns.clone(), self.group_query_async(ns)))
            .collect();
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        // Without foreign nspaces everything is sent before this returns.
        let started = queries
            .is_empty()
            .then(|| self.start_connect(procs, opts.clone(), &HashMap::new()));
        let procs = procs.to_vec();
        async move {
            let (plan, reply) = match started {
                Some(s) => s?,
                None => {
                    let mut foreign = HashMap::new();
                    for (ns, q) in queries {
                        let members = match q.await {
                            Ok(g) => Some(g.members),
                            Err(
                                CohortError::GroupNotFound { .. }
                                | CohortError::InvalidGroupId { .. },
                            ) => {
                                let inner = weak.upgrade().ok_or_else(|| {
                                    CohortError::ServerLost("the client was dropped".into())
                                })?;
                                let size = (Client { inner }).get_async(
                                    &ProcId::wildcard(ns.as_str()),
                                    JOB_SIZE,
                                    None,
                                );
                                job_ranks(&ns, size.await)
                            }
                            Err(e) => return Err(e),
                        };
                        foreign.insert(ns, members);
                    }
                    let inner = weak
                        .upgrade()
                        .ok_or_else(|| CohortError::ServerLost("the client was dropped".into()))?;
                    (Client { inner }).start_connect(&procs, opts, &foreign)?
                }
            };
            let op = plan.op();
            let group = match reply {
                ConnectReply::Fence(f) => {
                    f.await.map_err(|e| relabel(e, &op))?;
                    None
                }
                ConnectReply::Construct(r) => Some(
                    r.await
                        .and_then(|r| expect_group("connect", r))
                        .map_err(|e| relabel(e, &op))?,
                ),
            };
            let inner = weak
                .upgrade()
                .ok_or_else(|| CohortError::ServerLost("the client was dropped".into()))?;
            let mut book = lock(&inner.connects);
            Ok(plan.finish(&me, group, &mut book))
        }
    }

    /// Sends a connect's requests (notification, then construct or exchange).
    fn start_connect(
        &self,
        procs: &[ProcId],
        opts: ConnectOpts,
        foreign: &HashMap<String, Option<Vec<ProcId>>>,
    ) -> Result<(Plan, ConnectReply)> {
        let plan = self.connect_plan(procs, opts, foreign)?;
        if let Some(req) = plan.notification(self.proc_id()) {
            // Same connection, sent first: the server raises it before the construct.
            drop(self.call_async(req, false));
        }
        let reply = match &plan.nspace {
            None => {
                let fence = FenceOpts {
                    collect: true,
                    timeout_ms: plan.opts.timeout.map(duration_ms),
                    ft_collective: false,
                };
                ConnectReply::Fence(Box::pin(self.fence_async(&plan.members, fence)))
            }
            Some(ns) => ConnectReply::Construct(self.call_async(
                Request::Construct {
                    id: ns.clone(),
                    procs: plan.members.as_slice().into(),
                    opts: plan.construct_opts(),
                },
                true,
            )),
        };
        Ok((plan, reply))
    }

    /// The members of connection `nspace` if this process holds it.
    fn held_connection(&self, nspace: &str) -> Result<Vec<ProcId>> {
        lock(&self.inner.connects)
            .live
            .get(nspace)
            .cloned()
            .ok_or_else(|| CohortError::GroupNotFound { id: nspace.into() })
    }

    /// `PMIx_Disconnect` (rfc0003): leaves connection `nspace` together with its other
    /// members. Collective: returns once every member called (members "remain a part of
    /// the assemblage until all members have called" — sets-and-groups §Destruct
    /// procedure); afterwards `nspace` no longer addresses anything. Fails with
    /// [`CohortError::GroupNotFound`] naming `nspace` when this process holds no such
    /// connection, and with [`CohortError::ProcTerminated`] naming the members that
    /// terminated without disconnecting (unless early termination was allowed, when
    /// it completes without them).
    pub fn disconnect(&self, nspace: &str, opts: DisconnectOpts) -> Result<()> {
        let members = self.held_connection(nspace)?;
        if let Some(req) = disconnect_notification(self.proc_id(), nspace, &members, &opts) {
            expect_done("notify", self.call(req, false, None)?)?;
        }
        let timeout_ms = opts.timeout.map(duration_ms);
        let req = Request::Destruct {
            id: nspace.into(),
            timeout_ms,
            ft_collective: false,
        };
        self.call(req, false, timeout_ms)
            .and_then(|r| expect_done("disconnect", r))
            .map_err(|e| relabel(e, &format!("disconnect {nspace}")))?;
        lock(&self.inner.connects).live.remove(nspace);
        Ok(())
    }

    /// Async form of [`disconnect`](Self::disconnect).
    pub fn disconnect_async(
        &self,
        nspace: &str,
        opts: DisconnectOpts,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let nspace = nspace.to_string();
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let reply = match self.held_connection(&nspace) {
            Ok(members) => {
                if let Some(req) = disconnect_notification(self.proc_id(), &nspace, &members, &opts)
                {
                    drop(self.call_async(req, false));
                }
                let timeout_ms = opts.timeout.map(duration_ms);
                self.call_async(
                    Request::Destruct {
                        id: nspace.clone(),
                        timeout_ms,
                        ft_collective: false,
                    },
                    false,
                )
            }
            Err(e) => ReplyFuture::failed(e),
        };
        async move {
            reply
                .await
                .and_then(|r| expect_done("disconnect", r))
                .map_err(|e| relabel(e, &format!("disconnect {nspace}")))?;
            if let Some(inner) = weak.upgrade() {
                lock(&inner.connects).live.remove(&nspace);
            }
            Ok(())
        }
    }

    /// The nspaces of the connections this process holds (connected, not yet
    /// disconnected), sorted.
    pub fn connections(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.inner.connects).live.keys().cloned().collect();
        v.sort();
        v
    }
}

/// The reply a connect waits for.
enum ConnectReply {
    Fence(std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>),
    Construct(ReplyFuture),
}

fn disconnect_notification(
    me: &ProcId,
    nspace: &str,
    members: &[ProcId],
    opts: &DisconnectOpts,
) -> Option<Request> {
    (opts.notify_each && members.iter().any(|p| p != me)).then(|| Request::Notify {
        code: codes::PROC_HAS_DISCONNECTED,
        range: Range::Group(nspace.to_string()),
        info: event_info(me, Some(nspace)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{block_on, client_with, TEST_DEADLINE};
    use cohort_proto::msg::{ClientFrame, Response};

    fn procs(ranks: &[u32]) -> Vec<ProcId> {
        ranks.iter().map(|&r| ProcId::new("job", r)).collect()
    }

    /// The reference FNV-1a 64 test vectors (empty input, "a", "foobar").
    #[test]
    fn fnv1a_matches_the_reference_values() {
        assert_eq!(fnv1a(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(*b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_nspace_depends_on_list_id_and_sequence_only() {
        let a = procs(&[0, 1, 2]);
        let d = digest(&a, None);
        assert_eq!(d, digest(&procs(&[0, 1, 2]), None));
        let names: BTreeSet<String> = [
            connection_nspace(&a, d, 0),
            connection_nspace(&a, d, 1),
            connection_nspace(&a, digest(&a, Some("x")), 0),
            connection_nspace(&a, digest(&a, Some("y")), 0),
            connection_nspace(&procs(&[0, 1]), digest(&procs(&[0, 1]), None), 0),
            // Fields are delimited: ("job", 1) + id "" differs from a longer name.
            connection_nspace(&a, digest(&procs(&[0, 1, 3]), None), 0),
        ]
        .into_iter()
        .collect();
        assert_eq!(names.len(), 6, "{names:?}");
        assert!(connection_nspace(&a, d, 0).starts_with("job.connect-"));
        let long = vec![ProcId::new("n".repeat(250), 0)];
        let ns = connection_nspace(&long, digest(&long, None), 0);
        assert!(validate_group_id(&ns).is_ok(), "{ns}");
    }

    fn group(id: &str, members: Vec<ProcId>) -> GroupResult {
        GroupResult {
            id: id.into(),
            status: ConstructStatus::Success,
            members,
            context_id: None,
            group_info: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// What the client sends for connects and disconnects (client is rank 1 of a
    /// 4-rank job "job"): the derived nspace advances only on success, the connect id
    /// and list select it, wildcards and explicit lists agree, notify-each and
    /// exchange-only send their requests, and a disconnect of an nspace this process
    /// does not hold is refused without a request.
    #[test]
    fn connect_requests_derive_the_nspace_and_advance_only_on_success() {
        let (frames_tx, frames) = crossbeam_channel::unbounded();
        let (client, server) = client_with(move |s| {
            let mut constructs = 0;
            while let Some(f) = s.recv() {
                let reply = match &f.req {
                    Request::Construct { id, procs, .. } => {
                        constructs += 1;
                        if constructs == 2 {
                            Err(CohortError::Timeout {
                                op: format!("group construct {id:?}"),
                                timeout_ms: 5,
                                missing: vec![ProcId::new("job", 3)],
                            })
                        } else {
                            Ok(Response::Group(group(id, procs.to_vec()).into()))
                        }
                    }
                    Request::Notify { .. } | Request::Destruct { .. } | Request::Fence { .. } => {
                        Ok(Response::Done)
                    }
                    Request::Commit { .. } => {
                        let _ = frames_tx.send(f);
                        continue;
                    }
                    other => panic!("unexpected {other:?}"),
                };
                s.reply(f.id, reply);
                let _ = frames_tx.send(f);
            }
        });
        let p = |r: u32| ProcId::new("job", r);
        let all: Vec<ProcId> = (0..4).map(p).collect();
        let next = || frames.recv_timeout(TEST_DEADLINE).expect("a frame");
        let construct_of = |f: ClientFrame| match f.req {
            Request::Construct { id, procs, opts } => (id, procs.to_vec(), opts),
            other => panic!("expected a construct, got {other:?}"),
        };
        let d = digest(&all, None);

        // The whole job as a wildcard: seq 0 of the list's digest.
        let first = client
            .connect_procs(&[ProcId::wildcard("job")], ConnectOpts::default())
            .expect("first connect");
        let (id, procs, opts) = construct_of(next());
        assert_eq!(id, connection_nspace(&all, d, 0));
        assert_eq!(procs, all);
        assert_eq!(opts.connect, Some(ConnectMode::Strict));
        assert_eq!(first.nspace.as_deref(), Some(id.as_str()));
        assert_eq!(first.rank, Some(1));

        // The same procs listed out of order with a duplicate: seq 1, which fails
        // (relabelled as a connect) …
        let listed = [p(3), p(1), p(0), p(2), p(1)];
        let err = client
            .connect_procs(&listed, ConnectOpts::default())
            .unwrap_err();
        let (id1, _, _) = construct_of(next());
        assert_eq!(id1, connection_nspace(&all, d, 1));
        assert!(
            matches!(&err, CohortError::Timeout { op, .. } if *op == format!("connect {id1}")),
            "{err:?}"
        );
        // … so the retry uses seq 1 again, and early termination travels.
        let opts = ConnectOpts {
            early_term_allowed: true,
            ..Default::default()
        };
        let second = client.connect_procs(&listed, opts).expect("retry");
        let (id2, _, o) = construct_of(next());
        assert_eq!(id2, id1);
        assert_eq!(o.connect, Some(ConnectMode::EarlyTermAllowed));
        assert_eq!(second.nspace.as_deref(), Some(id1.as_str()));

        // A connect id selects another digest (its own sequence), async form.
        let with_id = ConnectOpts {
            connect_id: Some("x".into()),
            timeout: Some(Duration::from_millis(1500)),
            ..Default::default()
        };
        let third = block_on(client.connect_procs_async(&all, with_id)).expect("with id");
        let (id3, _, o) = construct_of(next());
        assert_eq!(id3, connection_nspace(&all, digest(&all, Some("x")), 0));
        assert_eq!(o.timeout_ms, Some(1500));
        assert_eq!(third.nspace.as_deref(), Some(id3.as_str()));

        // Notify-each: PROC_HAS_CONNECTED to the other listed processes first.
        let sub = [p(1), p(2)];
        let fourth = client
            .connect_procs(
                &sub,
                ConnectOpts {
                    notify_each: true,
                    ..Default::default()
                },
            )
            .expect("notify-each connect");
        let ns4 = fourth.nspace.clone().expect("nspace");
        match next().req {
            Request::Notify { code, range, info } => {
                assert_eq!(code, codes::PROC_HAS_CONNECTED);
                assert_eq!(range, Range::Procs(vec![p(2)]));
                assert_eq!(
                    cohort_proto::value::info_get(&info, keys::NSPACE),
                    Some(&Value::Str(ns4.clone()))
                );
            }
            other => panic!("expected the notification, got {other:?}"),
        }
        let (id4, _, _) = construct_of(next());
        assert_eq!(id4, ns4);
        assert_eq!(fourth.rank, Some(0));

        let mut held = vec![id.clone(), id1.clone(), id3.clone(), ns4.clone()];
        held.sort();
        assert_eq!(client.connections(), held);

        // Unknown nspace: refused here, nothing sent; then a real disconnect.
        assert_eq!(
            client.disconnect("nope", DisconnectOpts::default()),
            Err(CohortError::GroupNotFound { id: "nope".into() })
        );
        client
            .disconnect(&id, DisconnectOpts::default())
            .expect("disconnect");
        assert_eq!(
            next().req,
            Request::Destruct {
                id: id.clone(),
                timeout_ms: None,
                ft_collective: false,
            }
        );
        assert!(!client.connections().contains(&id));

        // Exchange only: a fence with data over the list, no nspace, nothing held.
        let before = client.connections();
        let x = client
            .connect_procs(
                &all,
                ConnectOpts {
                    xchg_only: true,
                    ..Default::default()
                },
            )
            .expect("exchange");
        assert_eq!((x.nspace, x.rank), (None, None));
        match next().req {
            Request::Fence { procs, opts } => {
                assert_eq!(procs, all);
                assert!(opts.collect);
            }
            other => panic!("expected a fence, got {other:?}"),
        }
        assert_eq!(client.connections(), before);
        drop(client);
        server.join().expect("server thread");
    }
}
