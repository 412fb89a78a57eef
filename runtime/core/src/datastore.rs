//! The job's data store for publish / lookup / unpublish (the PMIx "Publish/Lookup
//! Operations" chapter), sans-IO. The launcher holds it, the one process of a job that
//! lives exactly as long as the job (no node server's loss takes the data with it);
//! node servers forward their processes' calls there (`Action::Data`), so two
//! processes publishing the same key at once are ordered in one place and exactly one
//! gets `KeyPublished` (PMIX_ERR_DUPLICATE_KEY).
//!
//! The chapter's retrieval rules: a lookup finds a key only if it names the same kind
//! of range as the publisher did, the same processes for a custom range, and the
//! requester is in the publisher's range. So the store files every value under its
//! *range instance* ([`Scope`]): the publisher itself (proc-local), its node (local),
//! its namespace, the session, the global range, or the sorted custom list. A lookup
//! computes the scope its own range names from where the requester is, and the
//! requester is in the publisher's range exactly when the two scopes are equal (a
//! custom list must also name the requester). Duplicates are refused per scope: "
//! Publishing duplicate keys is permitted provided they are published to different
//! ranges."
//!
//! Persistence: first-read values go with the first lookup that returns them,
//! proc-persistent ones when their publisher terminates; the rest stay until
//! unpublished (a cohort job is its own application and session).

use std::collections::BTreeMap;

use cohort_proto::ids::{NodeId, ProcId};
use cohort_proto::msg::{Request, Response};
use cohort_proto::publish::{validate_key, DataRange, LookupOpts, Persistence, Published};
use cohort_proto::{CohortError, Info, Value};

use crate::engine::Time;

/// Values the store holds at most; a publish that would pass it is refused.
pub const MAX_ENTRIES: usize = 1 << 20;
/// Lookups waiting (PMIX_WAIT) at most; more are refused.
pub const MAX_WAITERS: usize = 1 << 16;

/// One range instance: where a value is filed and where a lookup searches.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Proc(ProcId),
    Node(NodeId),
    Namespace(String),
    Session,
    Global,
    /// Sorted, without duplicates.
    Custom(Vec<ProcId>),
}

impl Scope {
    /// The range instance `range` names for process `proc` on node `node`.
    pub fn of(range: &DataRange, proc: &ProcId, node: NodeId) -> Scope {
        match range {
            DataRange::ProcLocal => Scope::Proc(proc.clone()),
            DataRange::Local => Scope::Node(node),
            DataRange::Namespace => Scope::Namespace(proc.nspace.to_string()),
            DataRange::Session => Scope::Session,
            DataRange::Global => Scope::Global,
            DataRange::Custom(procs) => {
                let mut procs = procs.clone();
                procs.sort();
                procs.dedup();
                Scope::Custom(procs)
            }
        }
    }

    fn name(&self) -> String {
        match self {
            Scope::Proc(p) => format!("proc-local range of {p}"),
            Scope::Node(n) => format!("local range of node {n}"),
            Scope::Namespace(ns) => format!("namespace range of {ns}"),
            Scope::Session => "session range".into(),
            Scope::Global => "global range".into(),
            Scope::Custom(procs) => {
                format!("custom range {}", cohort_proto::ids::fmt_procs(procs))
            }
        }
    }
}

struct Entry {
    publisher: ProcId,
    value: Value,
    persistence: Persistence,
}

/// A lookup that waits (PMIX_WAIT) for keys not published yet.
struct Waiter {
    /// Where the answer goes: the requester's node server and its token there.
    home: NodeId,
    token: u64,
    requester: ProcId,
    scope: Scope,
    keys: Vec<String>,
    /// How many of `keys` must be found.
    need: usize,
    deadline: Option<Time>,
    timeout_ms: u64,
}

/// An answer for a request that waited: to node server `home`, for its `token`.
#[derive(Debug, PartialEq)]
pub struct Answer {
    pub home: NodeId,
    pub token: u64,
    pub result: Result<Response, CohortError>,
}

/// The published data of one job, and the lookups waiting for more.
#[derive(Default)]
pub struct DataStore {
    entries: BTreeMap<(Scope, String), Entry>,
    waiters: Vec<Waiter>,
}

impl DataStore {
    /// How many values are published.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many lookups wait.
    pub fn waiting(&self) -> usize {
        self.waiters.len()
    }

    /// Handles call `token` of `proc` (hosted by node server `node`, which waits for
    /// the answer): every answer it makes — its own, unless it is a lookup that waits,
    /// and those of the waiting lookups a publish completed.
    pub fn call(
        &mut self,
        proc: &ProcId,
        node: NodeId,
        token: u64,
        req: Request,
        now: Time,
    ) -> Vec<Answer> {
        let mut answers = Vec::new();
        let own = match req {
            Request::Publish {
                data,
                range,
                persistence,
            } => match self.publish(proc, node, data, &range, persistence) {
                Ok(served) => {
                    answers = served;
                    Some(Ok(Response::Done))
                }
                Err(e) => Some(Err(e)),
            },
            Request::Lookup { keys, opts } => self.lookup(proc, node, keys, &opts, token, now),
            Request::Unpublish { keys, range } => Some(
                self.unpublish(proc, node, keys.as_deref(), &range)
                    .map(|_| Response::Done),
            ),
            other => Some(Err(CohortError::BadRequest(format!(
                "{} is not a data store call",
                other.op_name()
            )))),
        };
        if let Some(result) = own {
            answers.insert(
                0,
                Answer {
                    home: node,
                    token,
                    result,
                },
            );
        }
        answers
    }

    /// Publishes `data` for `publisher` (on node `node`). All or nothing. Returns the
    /// answers of waiting lookups this publish satisfied.
    pub fn publish(
        &mut self,
        publisher: &ProcId,
        node: NodeId,
        data: Info,
        range: &DataRange,
        persistence: Persistence,
    ) -> Result<Vec<Answer>, CohortError> {
        if data.is_empty() {
            return Err(CohortError::BadRequest(format!(
                "publish by {publisher}: no data to publish"
            )));
        }
        let scope = Scope::of(range, publisher, node);
        for (i, (key, _)) in data.iter().enumerate() {
            validate_key(key)?;
            if let Some(e) = self.entries.get(&(scope.clone(), key.clone())) {
                return Err(CohortError::KeyPublished {
                    key: key.clone(),
                    range: scope.name(),
                    publisher: e.publisher.clone(),
                });
            }
            if data[..i].iter().any(|(k, _)| k == key) {
                return Err(CohortError::KeyPublished {
                    key: key.clone(),
                    range: scope.name(),
                    publisher: publisher.clone(),
                });
            }
        }
        if self.entries.len() + data.len() > MAX_ENTRIES {
            return Err(CohortError::BadRequest(format!(
                "publish by {publisher}: the job's data store holds {} values, and {} more \
                 would pass its limit of {MAX_ENTRIES}; unpublish some first",
                self.entries.len(),
                data.len()
            )));
        }
        let keys: Vec<String> = data.iter().map(|(k, _)| k.clone()).collect();
        for (key, value) in data {
            let entry = Entry {
                publisher: publisher.clone(),
                value,
                persistence,
            };
            self.entries.insert((scope.clone(), key), entry);
        }
        Ok(self.serve_waiters(&scope, &keys))
    }

    /// Looks `keys` up for `requester` (on node `node`, whose server waits for the
    /// answer to its call `token`). `Some` answer now, or `None`: the lookup waits and
    /// its answer comes from a later [`publish`](Self::publish) or
    /// [`expire`](Self::expire).
    pub fn lookup(
        &mut self,
        requester: &ProcId,
        node: NodeId,
        keys: Vec<String>,
        opts: &LookupOpts,
        token: u64,
        now: Time,
    ) -> Option<Result<Response, CohortError>> {
        if keys.is_empty() {
            return Some(Err(CohortError::BadRequest(format!(
                "lookup by {requester}: no keys to look up"
            ))));
        }
        if let Err(e) = keys.iter().try_for_each(|k| validate_key(k)) {
            return Some(Err(e));
        }
        let scope = Scope::of(&opts.range, requester, node);
        if let Scope::Custom(procs) = &scope {
            if procs.binary_search(requester).is_err() {
                return Some(Err(CohortError::BadRequest(format!(
                    "lookup by {requester} in a custom range that does not include it"
                ))));
            }
        }
        let need = match opts.wait {
            None => 0,
            Some(0) => keys.len(),
            Some(n) => (n as usize).min(keys.len()),
        };
        if let Some(found) = self.take(&scope, &keys, need) {
            return Some(Ok(Response::Published(found)));
        }
        if self.waiters.len() >= MAX_WAITERS {
            return Some(Err(CohortError::BadRequest(format!(
                "lookup by {requester}: {MAX_WAITERS} lookups already wait at the job's \
                 data store"
            ))));
        }
        let timeout_ms = opts.timeout_ms.unwrap_or(0);
        self.waiters.push(Waiter {
            home: node,
            token,
            requester: requester.clone(),
            scope,
            keys,
            need,
            deadline: opts
                .timeout_ms
                .map(|ms| now + std::time::Duration::from_millis(ms)),
            timeout_ms,
        });
        None
    }

    /// Removes `publisher`'s values under `keys` (all of them with `None`) in the
    /// range instance `range` names for it. Keys it did not publish there are left
    /// alone: the call's promise, that the key may be published again, holds for the
    /// caller's own keys.
    pub fn unpublish(
        &mut self,
        publisher: &ProcId,
        node: NodeId,
        keys: Option<&[String]>,
        range: &DataRange,
    ) -> Result<usize, CohortError> {
        if let Some(keys) = keys {
            keys.iter().try_for_each(|k| validate_key(k))?;
        }
        let scope = Scope::of(range, publisher, node);
        let before = self.entries.len();
        self.entries.retain(|(s, k), e| {
            !(s == &scope
                && e.publisher == *publisher
                && keys.is_none_or(|keys| keys.iter().any(|x| x == k)))
        });
        Ok(before - self.entries.len())
    }

    /// `proc` terminated: its proc-persistent values go, and so do its waiting lookups
    /// (nobody is left to read their answers, and a first-read value must not be spent
    /// on them).
    pub fn proc_terminated(&mut self, proc: &ProcId) {
        self.entries
            .retain(|_, e| !(e.persistence == Persistence::Proc && e.publisher == *proc));
        self.waiters.retain(|w| w.requester != *proc);
    }

    /// Node server `node` is lost: the lookups waiting for answers there go.
    pub fn home_lost(&mut self, node: NodeId) {
        self.waiters.retain(|w| w.home != node);
    }

    /// The earliest deadline of a waiting lookup.
    pub fn next_deadline(&self) -> Option<Time> {
        self.waiters.iter().filter_map(|w| w.deadline).min()
    }

    /// Waiting lookups whose timeout passed fail with `Timeout`.
    pub fn expire(&mut self, now: Time) -> Vec<Answer> {
        let expired =
            crate::take_where(&mut self.waiters, |w| w.deadline.is_some_and(|d| d <= now));
        expired
            .into_iter()
            .map(|w| {
                let missing: Vec<&String> = w
                    .keys
                    .iter()
                    .filter(|k| !self.entries.contains_key(&(w.scope.clone(), (*k).clone())))
                    .collect();
                Answer {
                    home: w.home,
                    token: w.token,
                    result: Err(CohortError::Timeout {
                        op: format!(
                            "lookup by {} of {:?} in the {} (still unpublished: {:?})",
                            w.requester,
                            w.keys,
                            w.scope.name(),
                            missing
                        ),
                        timeout_ms: w.timeout_ms,
                        missing: vec![],
                    }),
                }
            })
            .collect()
    }

    /// What `keys` find in `scope`, if at least `need` of them are there; first-read
    /// values found are removed.
    fn take(&mut self, scope: &Scope, keys: &[String], need: usize) -> Option<Vec<Published>> {
        let present = keys
            .iter()
            .filter(|k| self.entries.contains_key(&(scope.clone(), (*k).clone())))
            .count();
        if present < need {
            return None;
        }
        let mut found = Vec::with_capacity(present);
        for key in keys {
            let at = (scope.clone(), key.clone());
            let Some(e) = self.entries.get(&at) else {
                continue;
            };
            found.push(Published {
                key: key.clone(),
                publisher: e.publisher.clone(),
                value: e.value.clone(),
            });
            if e.persistence == Persistence::FirstRead {
                self.entries.remove(&at);
            }
        }
        Some(found)
    }

    /// Answers the waiting lookups of `scope` that `published` keys satisfy, oldest
    /// first (a first-read value goes to the oldest).
    fn serve_waiters(&mut self, scope: &Scope, published: &[String]) -> Vec<Answer> {
        let mut answers = Vec::new();
        let mut i = 0;
        while i < self.waiters.len() {
            let w = &self.waiters[i];
            if w.scope != *scope || !w.keys.iter().any(|k| published.contains(k)) {
                i += 1;
                continue;
            }
            let (scope, keys, need) = (w.scope.clone(), w.keys.clone(), w.need);
            match self.take(&scope, &keys, need) {
                Some(found) => {
                    let w = self.waiters.remove(i);
                    answers.push(Answer {
                        home: w.home,
                        token: w.token,
                        result: Ok(Response::Published(found)),
                    });
                }
                None => i += 1,
            }
        }
        answers
    }
}

#[cfg(test)]
mod tests {
    //! The chapter's rules (`Chap_API_Publish`: "Retrieval rules for published data",
    //! PMIX_ERR_DUPLICATE_KEY, PMIX_WAIT, persistence), one by one.
    use super::*;
    use std::time::Duration;

    fn p(rank: u32) -> ProcId {
        ProcId::new("job", rank)
    }

    fn data(pairs: &[(&str, u32)]) -> Info {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Value::U32(*v)))
            .collect()
    }

    fn keys(ks: &[&str]) -> Vec<String> {
        ks.iter().map(|k| k.to_string()).collect()
    }

    fn found(r: Option<Result<Response, CohortError>>) -> Vec<(String, ProcId, Value)> {
        match r {
            Some(Ok(Response::Published(v))) => v
                .into_iter()
                .map(|f| (f.key, f.publisher, f.value))
                .collect(),
            other => panic!("expected an answer now, got {other:?}"),
        }
    }

    fn now_lookup(
        s: &mut DataStore,
        who: u32,
        node: NodeId,
        ks: &[&str],
        range: DataRange,
    ) -> Vec<(String, ProcId, Value)> {
        let opts = LookupOpts {
            range,
            ..LookupOpts::default()
        };
        found(s.lookup(&p(who), node, keys(ks), &opts, 1, Duration::ZERO))
    }

    #[test]
    fn a_lookup_finds_what_was_published_in_its_range_only() {
        let mut s = DataStore::default();
        s.publish(
            &p(0),
            0,
            data(&[("a", 1)]),
            &DataRange::Session,
            Persistence::App,
        )
        .unwrap();
        s.publish(
            &p(0),
            0,
            data(&[("b", 2)]),
            &DataRange::Namespace,
            Persistence::App,
        )
        .unwrap();
        assert_eq!(
            now_lookup(&mut s, 3, 1, &["a", "b"], DataRange::Session),
            vec![("a".into(), p(0), Value::U32(1))],
            "a session lookup finds session data only"
        );
        assert_eq!(
            now_lookup(&mut s, 3, 1, &["a", "b"], DataRange::Namespace),
            vec![("b".into(), p(0), Value::U32(2))]
        );
        assert!(now_lookup(&mut s, 3, 1, &["a", "b"], DataRange::Global).is_empty());
    }

    #[test]
    fn local_and_proc_local_data_reach_only_their_node_and_process() {
        let mut s = DataStore::default();
        s.publish(
            &p(0),
            0,
            data(&[("n", 1)]),
            &DataRange::Local,
            Persistence::App,
        )
        .unwrap();
        s.publish(
            &p(0),
            0,
            data(&[("me", 2)]),
            &DataRange::ProcLocal,
            Persistence::App,
        )
        .unwrap();
        assert_eq!(now_lookup(&mut s, 1, 0, &["n"], DataRange::Local).len(), 1);
        assert!(now_lookup(&mut s, 2, 1, &["n"], DataRange::Local).is_empty());
        assert_eq!(
            now_lookup(&mut s, 0, 0, &["me"], DataRange::ProcLocal).len(),
            1
        );
        assert!(now_lookup(&mut s, 1, 0, &["me"], DataRange::ProcLocal).is_empty());
        // Another node's process may publish the same key in its own local range.
        s.publish(
            &p(2),
            1,
            data(&[("n", 3)]),
            &DataRange::Local,
            Persistence::App,
        )
        .unwrap();
        assert_eq!(
            now_lookup(&mut s, 3, 1, &["n"], DataRange::Local),
            vec![("n".into(), p(2), Value::U32(3))]
        );
    }

    #[test]
    fn custom_ranges_match_by_members_and_need_the_requester_in_them() {
        let mut s = DataStore::default();
        // The publisher need not be a member.
        let range = DataRange::Custom(vec![p(2), p(1), p(2)]);
        s.publish(&p(0), 0, data(&[("c", 7)]), &range, Persistence::App)
            .unwrap();
        let same = DataRange::Custom(vec![p(1), p(2)]);
        assert_eq!(now_lookup(&mut s, 1, 0, &["c"], same.clone()).len(), 1);
        assert!(now_lookup(&mut s, 1, 0, &["c"], DataRange::Custom(vec![p(1)])).is_empty());
        let outsider = s.lookup(
            &p(3),
            1,
            keys(&["c"]),
            &LookupOpts {
                range: same,
                ..Default::default()
            },
            1,
            Duration::ZERO,
        );
        assert!(
            matches!(&outsider, Some(Err(CohortError::BadRequest(m))) if m.contains("job:3")),
            "{outsider:?}"
        );
    }

    #[test]
    fn duplicate_keys_in_one_range_are_refused_whole_and_name_the_holder() {
        let mut s = DataStore::default();
        s.publish(
            &p(0),
            0,
            data(&[("k", 1)]),
            &DataRange::Session,
            Persistence::App,
        )
        .unwrap();
        let err = s
            .publish(
                &p(1),
                0,
                data(&[("fresh", 2), ("k", 3)]),
                &DataRange::Session,
                Persistence::App,
            )
            .unwrap_err();
        assert_eq!(
            err,
            CohortError::KeyPublished {
                key: "k".into(),
                range: "session range".into(),
                publisher: p(0)
            }
        );
        assert_eq!(err.pmix_status(), "PMIX_ERR_DUPLICATE_KEY");
        assert!(
            now_lookup(&mut s, 1, 0, &["fresh"], DataRange::Session).is_empty(),
            "nothing of a refused publish is kept"
        );
        // The same key in another range is another datum.
        s.publish(
            &p(1),
            0,
            data(&[("k", 4)]),
            &DataRange::Global,
            Persistence::App,
        )
        .unwrap();
        // And within one call a key twice is a duplicate too.
        assert!(s
            .publish(
                &p(1),
                0,
                data(&[("x", 1), ("x", 2)]),
                &DataRange::Session,
                Persistence::App
            )
            .is_err());
    }

    #[test]
    fn waiting_lookups_are_answered_by_the_publish_that_completes_them() {
        let mut s = DataStore::default();
        let opts = LookupOpts {
            wait: Some(0),
            ..LookupOpts::default()
        };
        assert_eq!(
            s.lookup(&p(1), 1, keys(&["a", "b"]), &opts, 11, Duration::ZERO),
            None
        );
        let first = s
            .publish(
                &p(0),
                0,
                data(&[("a", 1)]),
                &DataRange::Session,
                Persistence::App,
            )
            .unwrap();
        assert!(first.is_empty(), "one of two keys is not enough: {first:?}");
        let answers = s
            .publish(
                &p(2),
                0,
                data(&[("b", 2)]),
                &DataRange::Session,
                Persistence::App,
            )
            .unwrap();
        assert_eq!(answers.len(), 1);
        assert_eq!((answers[0].home, answers[0].token), (1, 11));
        match &answers[0].result {
            Ok(Response::Published(v)) => assert_eq!(v.len(), 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.waiting(), 0);
        // wait = 1 of two keys: one is enough.
        let one = LookupOpts {
            wait: Some(1),
            ..LookupOpts::default()
        };
        assert_eq!(
            s.lookup(&p(1), 1, keys(&["c", "d"]), &one, 12, Duration::ZERO),
            None
        );
        let answers = s
            .publish(
                &p(0),
                0,
                data(&[("d", 4)]),
                &DataRange::Session,
                Persistence::App,
            )
            .unwrap();
        assert_eq!(answers.len(), 1);
    }

    #[test]
    fn a_waiting_lookup_times_out_naming_its_missing_keys() {
        let mut s = DataStore::default();
        let opts = LookupOpts {
            wait: Some(0),
            timeout_ms: Some(50),
            ..LookupOpts::default()
        };
        let t0 = Duration::from_secs(1);
        assert_eq!(s.lookup(&p(1), 1, keys(&["late"]), &opts, 5, t0), None);
        assert_eq!(s.next_deadline(), Some(t0 + Duration::from_millis(50)));
        assert!(s.expire(t0 + Duration::from_millis(49)).is_empty());
        let answers = s.expire(t0 + Duration::from_millis(50));
        assert_eq!(answers.len(), 1);
        let err = answers[0].result.as_ref().unwrap_err();
        assert_eq!(err.pmix_status(), "PMIX_ERR_TIMEOUT");
        assert!(err.to_string().contains("\"late\""), "{err}");
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn first_read_values_go_to_one_reader_only() {
        let mut s = DataStore::default();
        let opts = LookupOpts {
            wait: Some(0),
            ..LookupOpts::default()
        };
        assert_eq!(
            s.lookup(&p(1), 0, keys(&["once"]), &opts, 1, Duration::ZERO),
            None
        );
        assert_eq!(
            s.lookup(&p(2), 1, keys(&["once"]), &opts, 2, Duration::ZERO),
            None
        );
        let answers = s
            .publish(
                &p(0),
                0,
                data(&[("once", 9)]),
                &DataRange::Session,
                Persistence::FirstRead,
            )
            .unwrap();
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(answers[0].token, 1, "the oldest waiter reads it");
        assert_eq!(s.waiting(), 1);
        assert!(now_lookup(&mut s, 3, 1, &["once"], DataRange::Session).is_empty());
        // May be published again, now that it was read.
        s.publish(
            &p(0),
            0,
            data(&[("once", 10)]),
            &DataRange::Session,
            Persistence::FirstRead,
        )
        .unwrap();
    }

    #[test]
    fn termination_removes_proc_persistent_data_and_the_dead_processes_lookups() {
        let mut s = DataStore::default();
        s.publish(
            &p(0),
            0,
            data(&[("p", 1)]),
            &DataRange::Session,
            Persistence::Proc,
        )
        .unwrap();
        s.publish(
            &p(0),
            0,
            data(&[("a", 2)]),
            &DataRange::Session,
            Persistence::App,
        )
        .unwrap();
        let opts = LookupOpts {
            wait: Some(0),
            ..LookupOpts::default()
        };
        assert_eq!(
            s.lookup(&p(0), 0, keys(&["never"]), &opts, 1, Duration::ZERO),
            None
        );
        s.proc_terminated(&p(0));
        assert_eq!(s.waiting(), 0);
        assert_eq!(
            now_lookup(&mut s, 1, 0, &["p", "a"], DataRange::Session),
            vec![("a".into(), p(0), Value::U32(2))]
        );
    }

    #[test]
    fn unpublish_removes_only_the_callers_keys_in_the_range() {
        let mut s = DataStore::default();
        s.publish(
            &p(0),
            0,
            data(&[("a", 1), ("b", 2)]),
            &DataRange::Session,
            Persistence::App,
        )
        .unwrap();
        s.publish(
            &p(0),
            0,
            data(&[("a", 3)]),
            &DataRange::Global,
            Persistence::App,
        )
        .unwrap();
        s.publish(
            &p(1),
            0,
            data(&[("c", 4)]),
            &DataRange::Session,
            Persistence::App,
        )
        .unwrap();
        assert_eq!(
            s.unpublish(&p(1), 0, Some(&keys(&["a"])), &DataRange::Session),
            Ok(0)
        );
        assert_eq!(
            s.unpublish(&p(0), 0, Some(&keys(&["a"])), &DataRange::Session),
            Ok(1)
        );
        assert_eq!(now_lookup(&mut s, 2, 0, &["a"], DataRange::Global).len(), 1);
        assert_eq!(s.unpublish(&p(0), 0, None, &DataRange::Session), Ok(1));
        assert_eq!(s.len(), 2);
        s.publish(
            &p(1),
            0,
            data(&[("a", 5)]),
            &DataRange::Session,
            Persistence::App,
        )
        .unwrap();
    }

    #[test]
    fn bad_keys_and_empty_calls_are_refused_naming_the_caller() {
        let mut s = DataStore::default();
        let e = s
            .publish(&p(4), 0, vec![], &DataRange::Session, Persistence::App)
            .unwrap_err();
        assert!(e.to_string().contains("job:4"), "{e}");
        assert!(s
            .publish(
                &p(4),
                0,
                data(&[("", 1)]),
                &DataRange::Session,
                Persistence::App
            )
            .is_err());
        let r = s.lookup(&p(4), 0, vec![], &LookupOpts::default(), 1, Duration::ZERO);
        assert!(matches!(r, Some(Err(CohortError::BadRequest(_)))), "{r:?}");
    }
}
