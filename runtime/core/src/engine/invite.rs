//! The invite/join construction method (group-construction-methods §6.4.3.3): one
//! leader invites processes; each answers; the group completes when every invitee has
//! answered. The tracker lives at the inviting leader's node server, which keeps it
//! across a leader failure so a participant can claim leadership or abort.

use super::*;

/// An invitee's answer so far.
#[derive(Debug, Clone)]
pub(super) enum Answer {
    Pending,
    Accepted(Contribution),
    /// `settled`: the leader decided (or did not ask to decide) what to do about it.
    Declined {
        settled: bool,
    },
    Failed {
        settled: bool,
    },
}

/// State of one invite/join construct, at the node server of its first leader.
#[derive(Debug)]
pub(super) struct InviteTracker {
    /// The current leader (the inviter, or whoever claimed leadership after it failed).
    leader: ProcId,
    opts: InviteOpts,
    /// The inviting leader's data and group info.
    inviter: Contribution,
    invitees: BTreeMap<ProcId, Answer>,
    /// The current leader died; waiting for a claim or an abort.
    leader_failed: bool,
    /// When the invite's timeout ends it. The leader's own wait enforces it while the
    /// leader lives; after it failed, this does (else an invite whose leader died and
    /// that nobody claims or aborts would stay for ever).
    deadline: Option<Time>,
}

impl InviteTracker {
    /// Everyone the invite involves: the inviter, the current leader, the invitees.
    fn procs(&self) -> impl Iterator<Item = &ProcId> {
        std::iter::once(&self.inviter.proc)
            .chain(std::iter::once(&self.leader))
            .chain(self.invitees.keys())
    }

    /// The deadline that ends the invite while its leader has failed.
    fn orphan_deadline(&self) -> Option<Time> {
        self.deadline.filter(|_| self.leader_failed)
    }

    fn unsettled(&self) -> bool {
        self.invitees.values().any(|a| {
            matches!(
                a,
                Answer::Pending
                    | Answer::Declined { settled: false }
                    | Answer::Failed { settled: false }
            )
        })
    }

    fn settle_all(&mut self) {
        for a in self.invitees.values_mut() {
            match a {
                Answer::Declined { settled } | Answer::Failed { settled } => *settled = true,
                _ => {}
            }
        }
    }
}

pub(super) fn invite_key(id: &str) -> CollKey {
    super::group_key(CollKind::Invite, id)
}

impl Engine {
    /// Where the tracker of invite `id` lives, as this server knows it.
    pub(super) fn invite_home(&self, id: &str) -> Option<NodeId> {
        if self.invites.contains_key(id) {
            return Some(self.node);
        }
        self.invite_homes.get(id).copied()
    }

    /// Everyone taking part in invite `id` that is still alive.
    fn invite_participants(&self, t: &InviteTracker) -> Vec<ProcId> {
        t.procs()
            .filter(|p| !self.terminated.contains(*p))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The other node servers of everyone invite `id` involves, alive or not: a server
    /// whose invitee answered and then terminated still holds the invite's home.
    fn invite_servers(&self, t: &InviteTracker) -> BTreeSet<NodeId> {
        t.procs()
            .filter_map(|p| self.jobs.node_of(p))
            .filter(|n| *n != self.node && !self.lost_nodes.contains(n))
            .collect()
    }

    fn invited_event(&self, id: &str, leader: &ProcId, invitees: &[ProcId]) -> Event {
        let mut ev = group_event(codes::GROUP_INVITED, leader.clone(), vec![], id);
        ev.info.push((
            keys::GROUP_LEADER.into(),
            Value::Procs(vec![leader.clone()]),
        ));
        ev.info.push((
            keys::GROUP_MEMBERSHIP.into(),
            Value::Procs(invitees.to_vec()),
        ));
        ev
    }

    /// The leader's `group_invite`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn invite(
        &mut self,
        client: ClientId,
        req: ReqId,
        leader: ProcId,
        id: String,
        procs: Vec<ProcId>,
        opts: InviteOpts,
        now: Time,
    ) {
        if let Err(e) = self.check_group_id(&id) {
            return self.reply(client, req, Err(e));
        }
        if let Some(g) = self.groups.get(&id) {
            let err = CohortError::GroupIdInUse {
                id,
                members: g.members.clone(),
            };
            return self.reply(client, req, Err(err));
        }
        if self.invites.contains_key(&id) || self.colls.contains_key(&invite_key(&id)) {
            let err = CohortError::BadRequest(format!(
                "an invite/join construct of group {id:?} is already in progress"
            ));
            return self.reply(client, req, Err(err));
        }
        let invitees: Vec<ProcId> = match self.expand(&procs) {
            Ok(all) => all.into_iter().filter(|p| *p != leader).collect(),
            Err(e) => return self.reply(client, req, Err(e)),
        };
        if procs.is_empty() || invitees.is_empty() {
            let err = CohortError::BadRequest(format!(
                "group {id:?}: invite at least one process other than the leader {leader}"
            ));
            return self.reply(client, req, Err(err));
        }
        let inviter = Contribution {
            proc: leader.clone(),
            data: self.kv.remote_view(&leader),
            group_info: opts.group_info.clone(),
            add_members: Vec::new(),
            flags: ContribFlags {
                assign_context_id: opts.assign_context_id,
                notify_termination: opts.notify_termination,
                leader: true,
                ..Default::default()
            },
        };
        let key = invite_key(&id);
        let w = waiter(client, req, leader.clone(), opts.timeout_ms, now);
        let attempt = self.attempt_of(&key);
        self.tracker(&key, attempt, now).waiters.push(w);
        let mut answers = BTreeMap::new();
        for p in &invitees {
            // An invitee that is already gone fails at once.
            let a = if self.terminated.contains(p) {
                Answer::Failed {
                    settled: !opts.decide_declines,
                }
            } else {
                Answer::Pending
            };
            answers.insert(p.clone(), a);
        }
        let deadline = opts
            .timeout_ms
            .map(|ms| now + std::time::Duration::from_millis(ms));
        let tracker = InviteTracker {
            leader: leader.clone(),
            opts,
            inviter,
            invitees: answers,
            leader_failed: false,
            deadline,
        };
        let event = self.invited_event(&id, &leader, &invitees);
        let live: Vec<ProcId> = invitees
            .into_iter()
            .filter(|p| !self.terminated.contains(p))
            .collect();
        self.invites.insert(id.clone(), tracker);
        self.route_event(live, event);
        self.check_invite(&id, now);
    }

    /// An invitee's `group_join`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn join(
        &mut self,
        client: ClientId,
        req: ReqId,
        proc: ProcId,
        id: String,
        leader: ProcId,
        accept: bool,
        timeout_ms: Option<u64>,
        group_info: Info,
        now: Time,
    ) {
        if let Err(e) = validate_group_id(&id) {
            return self.reply(client, req, Err(e));
        }
        let Some(home) = self.jobs.node_of(&leader) else {
            let err = CohortError::UnknownProc {
                reason: format!("the leader of group {id:?} is not a rank of this job"),
                proc: leader,
            };
            return self.reply(client, req, Err(err));
        };
        if self.lost_nodes.contains(&home) {
            // Its loss was reported already: no answer will come, and no later report.
            // A decline has nothing to wait for.
            let result = if accept {
                Err(CohortError::PeerLost {
                    node: home,
                    reason: format!("it hosts the leader of group {id:?}"),
                })
            } else {
                Ok(Response::Done)
            };
            return self.reply(client, req, result);
        }
        let contrib = Contribution {
            proc: proc.clone(),
            data: self.kv.remote_view(&proc),
            group_info,
            add_members: Vec::new(),
            flags: ContribFlags::default(),
        };
        let mut token = 0;
        if accept {
            // Where its answer (the outcome, a refusal) comes from. A decline is
            // answered at once and waits for nothing: its server keeps nothing of the
            // invite (nobody would clear it if the invite does not exist).
            self.invite_homes.insert(id.clone(), home);
            token = self.track_ack(client, req, AckKind::Join(id.clone()), home);
            let w = waiter(client, req, proc, timeout_ms, now);
            let key = invite_key(&id);
            let attempt = self.attempt_of(&key);
            self.tracker(&key, attempt, now).waiters.push(w);
        } else {
            self.reply(client, req, Ok(Response::Done));
        }
        self.send_peer(
            home,
            PeerMsg::InviteReply {
                id,
                accept,
                contrib,
                token,
            },
        );
    }

    /// Tracker: an invitee answered.
    pub(super) fn on_invite_reply(
        &mut self,
        from: NodeId,
        id: String,
        accept: bool,
        contrib: Contribution,
        token: u64,
        now: Time,
    ) {
        let proc = contrib.proc.clone();
        let refuse = |reason: CohortError| PeerMsg::Ack {
            token,
            result: Err(reason),
        };
        let Some(t) = self.invites.get_mut(&id) else {
            let err = CohortError::BadRequest(format!(
                "no invitation to group {id:?} is pending at node server {}",
                self.node
            ));
            return self.send_peer(from, refuse(err));
        };
        match t.invitees.get(&proc) {
            Some(Answer::Pending) => {}
            Some(_) => {
                let err = CohortError::BadRequest(format!(
                    "{proc} already answered the invitation to group {id:?}"
                ));
                return self.send_peer(from, refuse(err));
            }
            None => {
                let err = CohortError::NotAMember {
                    id: id.clone(),
                    proc: proc.clone(),
                };
                return self.send_peer(from, refuse(err));
            }
        }
        let (answer, code) = if accept {
            (Answer::Accepted(contrib), codes::GROUP_INVITE_ACCEPTED)
        } else {
            let settled = !t.opts.decide_declines;
            (Answer::Declined { settled }, codes::GROUP_INVITE_DECLINED)
        };
        t.invitees.insert(proc.clone(), answer);
        let leader = (!t.leader_failed).then(|| t.leader.clone());
        if let Some(l) = leader {
            self.route_event(vec![l], group_event(code, proc.clone(), vec![proc], &id));
        }
        self.check_invite(&id, now);
    }

    /// Tracker: completes invite `id` when every invitee has answered (and every
    /// decline or failure is settled) and a leader is in charge.
    fn check_invite(&mut self, id: &str, now: Time) {
        let Some(t) = self.invites.get(id) else {
            return;
        };
        if t.leader_failed || t.unsettled() {
            return;
        }
        let t = self.invites.remove(id).expect("present");
        let mut contribs: Vec<&Contribution> = t
            .invitees
            .values()
            .filter_map(|a| match a {
                Answer::Accepted(c) => Some(c),
                _ => None,
            })
            .collect();
        if !self.terminated.contains(&t.inviter.proc) {
            contribs.push(&t.inviter);
        }
        contribs.sort_by(|a, b| a.proc.cmp(&b.proc));
        let members: Vec<ProcId> = contribs.iter().map(|c| c.proc.clone()).collect();
        let failed: Vec<ProcId> = t
            .invitees
            .iter()
            .filter(|(_, a)| matches!(a, Answer::Failed { .. }))
            .map(|(p, _)| p.clone())
            .collect();
        let context_id = t.opts.assign_context_id.then(|| self.allocate_context_id());
        let outcome = CollOutcome::Construct {
            status: if failed.is_empty() {
                ConstructStatus::Success
            } else {
                ConstructStatus::PartialSuccess
            },
            members: members.clone(),
            context_id,
            group_info: contribs
                .iter()
                .map(|c| (c.proc.clone(), c.group_info.clone()))
                .collect(),
            data: contribs
                .iter()
                .map(|c| (c.proc.clone(), c.data.clone()))
                .collect(),
            failed,
            notify_termination: t.opts.notify_termination,
            designated_leaders: vec![t.leader.clone()],
            connect: None,
        };
        let servers = self.invite_servers(&t);
        self.broadcast_invite_outcome(id, servers, outcome, now);
        let mut done = group_event(
            codes::GROUP_CONSTRUCT_COMPLETE,
            t.leader.clone(),
            vec![],
            id,
        );
        done.info
            .push((keys::GROUP_MEMBERSHIP.into(), Value::Procs(members.clone())));
        if let Some(c) = context_id {
            done.info
                .push((keys::GROUP_CONTEXT_ID.into(), Value::U64(c)));
        }
        let live: Vec<ProcId> = members
            .iter()
            .filter(|p| !self.terminated.contains(*p))
            .cloned()
            .collect();
        self.route_event(live, done);
        let root = self.rendezvous_node(id);
        self.send_peer(
            root,
            PeerMsg::GroupLive {
                id: id.to_string(),
                members,
            },
        );
    }

    /// Sends the outcome to the other servers of the invite (their waiters, group tables
    /// and invite homes), then applies it here.
    fn broadcast_invite_outcome(
        &mut self,
        id: &str,
        servers: BTreeSet<NodeId>,
        outcome: CollOutcome,
        now: Time,
    ) {
        let key = invite_key(id);
        for n in servers {
            self.send_peer(
                n,
                PeerMsg::CollDown {
                    key: key.clone(),
                    spec: None,
                    outcome: outcome.clone(),
                    late: Vec::new(),
                    attempt: self.stamp(&key),
                    lean: None,
                },
            );
        }
        self.on_down(key, None, outcome, Vec::new(), None, now);
    }

    /// Tracker: ends invite `id` with `error` for every participant.
    pub(super) fn fail_invite(&mut self, id: &str, error: CohortError, now: Time) {
        let Some(t) = self.invites.remove(id) else {
            return;
        };
        let servers = self.invite_servers(&t);
        self.broadcast_invite_outcome(id, servers, CollOutcome::Failed(error), now);
    }

    /// Tracker: a timeout at the leader or at a joiner ends the invite for everyone,
    /// naming the invitees that never answered.
    pub(super) fn invite_timed_out(&mut self, id: &str, timeout_ms: u64, now: Time) {
        let Some(t) = self.invites.get(id) else {
            return;
        };
        let missing = t
            .invitees
            .iter()
            .filter(|(_, a)| matches!(a, Answer::Pending))
            .map(|(p, _)| p.clone())
            .collect();
        let err = CohortError::Timeout {
            op: format!("group invite {id:?}"),
            timeout_ms,
            missing,
        };
        self.fail_invite(id, err, now);
    }

    /// Tracker: a decision about invite `id`.
    pub(super) fn invite_decision(
        &mut self,
        id: &str,
        proc: &ProcId,
        decision: ConstructDecision,
        now: Time,
    ) -> Result<(), CohortError> {
        let Some(t) = self.invites.get_mut(id) else {
            return Err(CohortError::BadRequest(format!(
                "no invite/join construct of group {id:?} is in progress"
            )));
        };
        let not_leader = |reason: String| CohortError::NotLeader {
            id: id.to_string(),
            proc: proc.clone(),
            reason,
        };
        let is_participant = *proc == t.inviter.proc || t.invitees.contains_key(proc);
        if !is_participant {
            return Err(CohortError::NotAMember {
                id: id.to_string(),
                proc: proc.clone(),
            });
        }
        match decision {
            ConstructDecision::ClaimLeadership => {
                if !t.leader_failed {
                    return Err(not_leader(format!("{} leads this construct", t.leader)));
                }
                if !matches!(t.invitees.get(proc), Some(Answer::Accepted(_))) {
                    return Err(not_leader(
                        "accept the invitation before claiming leadership".into(),
                    ));
                }
                t.leader = proc.clone();
                t.leader_failed = false;
                let participants = self.invite_participants(self.invites.get(id).expect("present"));
                let mut ev = group_event(codes::GROUP_LEADER_SELECTED, proc.clone(), vec![], id);
                ev.info
                    .push((keys::GROUP_LEADER.into(), Value::Procs(vec![proc.clone()])));
                self.route_event(participants, ev);
                self.check_invite(id, now);
                Ok(())
            }
            ConstructDecision::Abort => {
                if !t.leader_failed && t.leader != *proc {
                    return Err(not_leader(format!("{} leads this construct", t.leader)));
                }
                let participants = self.invite_participants(self.invites.get(id).expect("present"));
                let err = CohortError::ConstructAborted {
                    id: id.to_string(),
                    reason: format!("aborted by {proc}"),
                };
                self.fail_invite(id, err, now);
                let ev = group_event(codes::GROUP_CONSTRUCT_ABORT, proc.clone(), vec![], id);
                self.route_event(participants, ev);
                Ok(())
            }
            ConstructDecision::Continue | ConstructDecision::Invite(_) => {
                if t.leader_failed {
                    return Err(not_leader(
                        "the leader failed; claim leadership before deciding".into(),
                    ));
                }
                if t.leader != *proc {
                    return Err(not_leader(format!("{} leads this construct", t.leader)));
                }
                t.settle_all();
                if let ConstructDecision::Invite(more) = decision {
                    let more = self.expand(&more)?;
                    let t = self.invites.get_mut(id).expect("present");
                    let fresh: Vec<ProcId> = more
                        .into_iter()
                        .filter(|p| *p != t.inviter.proc && !t.invitees.contains_key(p))
                        .collect();
                    for p in &fresh {
                        t.invitees.insert(p.clone(), Answer::Pending);
                    }
                    let leader = t.leader.clone();
                    let all: Vec<ProcId> = t.invitees.keys().cloned().collect();
                    let ev = self.invited_event(id, &leader, &all);
                    self.route_event(fresh, ev);
                }
                self.check_invite(id, now);
                Ok(())
            }
        }
    }

    /// The earliest deadline of an invite whose leader failed.
    pub(super) fn invites_deadline(&self) -> Option<Time> {
        self.invites
            .values()
            .filter_map(InviteTracker::orphan_deadline)
            .min()
    }

    /// Ends the invites whose leader failed and whose timeout passed.
    pub(super) fn expire_invites(&mut self, now: Time) {
        let expired: Vec<(String, u64)> = self
            .invites
            .iter()
            .filter(|(_, t)| t.orphan_deadline().is_some_and(|d| d <= now))
            .map(|(id, t)| (id.clone(), t.opts.timeout_ms.unwrap_or(0)))
            .collect();
        for (id, timeout_ms) in expired {
            self.invite_timed_out(&id, timeout_ms, now);
        }
    }

    /// Tracker: a participant of some invite terminated.
    pub(super) fn invite_terminated(&mut self, proc: &ProcId, now: Time) {
        let ids: Vec<String> = self.invites.keys().cloned().collect();
        for id in ids {
            let t = self.invites.get_mut(&id).expect("present");
            if t.leader == *proc && !t.leader_failed {
                t.leader_failed = true;
                let participants =
                    self.invite_participants(self.invites.get(&id).expect("present"));
                let ev = group_event(
                    codes::GROUP_LEADER_FAILED,
                    proc.clone(),
                    vec![proc.clone()],
                    &id,
                );
                self.route_event(participants, ev);
                continue;
            }
            if let Some(Answer::Pending) = t.invitees.get(proc) {
                let settled = !t.opts.decide_declines;
                t.invitees.insert(proc.clone(), Answer::Failed { settled });
                if !t.leader_failed {
                    let leader = t.leader.clone();
                    let ev = group_event(
                        codes::GROUP_INVITE_FAILED,
                        proc.clone(),
                        vec![proc.clone()],
                        &id,
                    );
                    self.route_event(vec![leader], ev);
                }
                self.check_invite(&id, now);
            }
        }
    }
}
