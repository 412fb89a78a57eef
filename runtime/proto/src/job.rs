//! Static job layout: which node server hosts which rank, which application context
//! (MPMD `:`-separated program) each rank runs, and the job's process sets.

use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::{NodeId, ProcId, Rank, MAX_GROUP_ID_LEN, RANK_WILDCARD};

/// Longest process-set name accepted, in bytes (as group ids: PMIX_MAX_NSLEN).
pub const MAX_PSET_NAME_LEN: usize = MAX_GROUP_ID_LEN;

/// The job's namespace, size and rank → node map (block mapping by default;
/// round-robin with `--map-by node`), its application contexts and process sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMap {
    pub nspace: crate::ids::Nspace,
    pub num_nodes: u32,
    /// `rank_node[r]` is the node server hosting rank `r`. On the wire as a few runs
    /// or a round-robin rule when it is one (see [`node_map`]).
    #[serde(with = "node_map")]
    pub rank_node: Vec<NodeId>,
    /// `node_names[n]` is the name of node `n`.
    pub node_names: Vec<String>,
    /// Number of ranks of each application context, in order (PMIX_APPNUM 0 first):
    /// app `a` holds the ranks after those of apps `0..a`. One entry per app, not per
    /// rank. Set with [`JobMap::set_apps`].
    pub app_sizes: Vec<u32>,
    /// The job's process sets, in the order they were defined (names unique). Defined
    /// at launch with [`JobMap::define_pset`]; immutable afterwards.
    pub psets: Vec<Pset>,
}

/// A process set (PMIx "pset"): a user-given label on some ranks of the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pset {
    pub name: String,
    pub members: RankSet,
}

/// A set of ranks, kept and sent as ascending, disjoint, non-adjacent runs of
/// consecutive ranks `(first, count)`: `0-3,8` is two runs whatever the job's size.
/// A decoded set is checked for that form (and never expanded), so a hostile frame
/// costs no more than its length.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RankSet {
    runs: Vec<(Rank, u32)>,
}

impl RankSet {
    /// The set of `ranks` (any order, duplicates allowed). The wildcard rank is not a
    /// rank and is left out.
    pub fn from_ranks(ranks: impl IntoIterator<Item = Rank>) -> RankSet {
        let mut sorted: Vec<Rank> = ranks.into_iter().filter(|&r| r != RANK_WILDCARD).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let mut runs: Vec<(Rank, u32)> = Vec::new();
        for r in sorted {
            match runs.last_mut() {
                Some((first, count)) if *first + *count == r => *count += 1,
                _ => runs.push((r, 1)),
            }
        }
        RankSet { runs }
    }

    /// Ranks `range.start .. range.end` (empty when the range is; the end is
    /// exclusive, so the wildcard rank is never in it).
    pub fn range(range: Range<Rank>) -> RankSet {
        let runs = if range.start < range.end {
            vec![(range.start, range.end - range.start)]
        } else {
            Vec::new()
        };
        RankSet { runs }
    }

    /// Parses a rank list: comma-separated ranks and inclusive ranges, as in
    /// `0,2,4` or `0-3,8`. Whitespace around items is ignored; the list must name at
    /// least one rank.
    pub fn parse(list: &str) -> Result<RankSet, String> {
        let mut ranks: Vec<(Rank, Rank)> = Vec::new();
        for item in list.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(format!("rank list {list:?} has an empty item"));
            }
            let rank = |s: &str| {
                s.trim()
                    .parse::<Rank>()
                    .ok()
                    .filter(|&r| r != RANK_WILDCARD)
                    .ok_or_else(|| format!("{:?} in rank list {list:?} is not a rank", s.trim()))
            };
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (rank(a)?, rank(b)?),
                None => (rank(item)?, rank(item)?),
            };
            if lo > hi {
                return Err(format!(
                    "range {item:?} in rank list {list:?} runs backwards"
                ));
            }
            ranks.push((lo, hi));
        }
        ranks.sort_unstable();
        let mut runs: Vec<(Rank, u32)> = Vec::new();
        for (lo, hi) in ranks {
            match runs.last_mut() {
                // Overlapping or adjacent: extend (end is exclusive, at most u32::MAX).
                Some((first, count)) if lo <= *first + *count => {
                    *count = (*count).max(hi + 1 - *first);
                }
                _ => runs.push((lo, hi + 1 - lo)),
            }
        }
        Ok(RankSet { runs })
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Number of ranks in the set.
    pub fn len(&self) -> u64 {
        self.runs.iter().map(|&(_, n)| u64::from(n)).sum()
    }

    /// Whether `rank` is in the set (a binary search over the runs).
    pub fn contains(&self, rank: Rank) -> bool {
        let i = self.runs.partition_point(|&(first, _)| first <= rank);
        i > 0 && {
            let (first, count) = self.runs[i - 1];
            rank - first < count
        }
    }

    /// The largest rank in the set.
    pub fn last(&self) -> Option<Rank> {
        self.runs.last().map(|&(first, count)| first + (count - 1))
    }

    /// The runs `(first, count)`, ascending.
    pub fn runs(&self) -> &[(Rank, u32)] {
        &self.runs
    }

    /// Every rank of the set, ascending.
    pub fn ranks(&self) -> impl Iterator<Item = Rank> + '_ {
        self.runs
            .iter()
            .flat_map(|&(first, count)| first..first + count)
    }

    /// Checks the canonical form (what [`RankSet::from_ranks`] builds).
    fn check(runs: &[(Rank, u32)]) -> Result<(), String> {
        let mut next_free: u64 = 0;
        for (i, &(first, count)) in runs.iter().enumerate() {
            let end = u64::from(first) + u64::from(count);
            if count == 0 {
                return Err("rank set: an empty run".into());
            }
            if end > u64::from(RANK_WILDCARD) {
                return Err("rank set: a run reaches the wildcard rank".into());
            }
            // Ascending, disjoint and not adjacent (adjacent runs would be one).
            if i > 0 && u64::from(first) <= next_free {
                return Err("rank set: runs out of order, overlapping or adjacent".into());
            }
            next_free = end;
        }
        Ok(())
    }
}

/// The rank-list syntax [`RankSet::parse`] reads: `0-3,8`.
impl fmt::Display for RankSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(first, count)) in self.runs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match count {
                1 => write!(f, "{first}")?,
                _ => write!(f, "{first}-{}", first + (count - 1))?,
            }
        }
        Ok(())
    }
}

impl Serialize for RankSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.runs.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RankSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RankSet, D::Error> {
        let runs = Vec::<(Rank, u32)>::deserialize(d)?;
        RankSet::check(&runs).map_err(serde::de::Error::custom)?;
        Ok(RankSet { runs })
    }
}

/// Compact wire form of a rank → node list: block mappings are a run per node,
/// round-robin mappings one rule, so a welcome costs bytes per node, not per rank;
/// any other list goes as runs or as it is, whichever is smaller. Decoding is bounded
/// by [`crate::procset::MAX_PROCS`] ranks.
pub mod node_map {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::ids::NodeId;
    use crate::procset::MAX_PROCS;

    #[derive(Serialize, Deserialize)]
    enum Wire {
        /// One node id per rank.
        Each(Vec<NodeId>),
        /// `(node, count)`: the next `count` ranks are on `node`.
        Runs(Vec<(NodeId, u32)>),
        /// `n` ranks dealt over `m` nodes: rank `r` on node `r % m`.
        RoundRobin { n: u32, m: u32 },
    }

    pub fn serialize<S: Serializer>(list: &[NodeId], s: S) -> Result<S::Ok, S::Error> {
        let n = list.len() as u32;
        let m = list.iter().max().map_or(0, |&top| top.saturating_add(1));
        let dealt = n > m
            && m > 0
            && list
                .iter()
                .enumerate()
                .all(|(r, &node)| node == r as u32 % m);
        if dealt {
            return Wire::RoundRobin { n, m }.serialize(s);
        }
        let mut runs: Vec<(NodeId, u32)> = Vec::new();
        for &node in list {
            match runs.last_mut() {
                Some((last, count)) if *last == node => *count += 1,
                _ => runs.push((node, 1)),
            }
            if runs.len() * 2 > list.len() {
                return Wire::Each(list.to_vec()).serialize(s);
            }
        }
        Wire::Runs(runs).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<NodeId>, D::Error> {
        use serde::de::Error;
        let too_many = || D::Error::custom(format!("a job of more than {MAX_PROCS} ranks"));
        match Wire::deserialize(d)? {
            Wire::Each(list) => Ok(list),
            Wire::Runs(runs) => {
                let total: u64 = runs.iter().map(|&(_, c)| u64::from(c)).sum();
                if total > MAX_PROCS {
                    return Err(too_many());
                }
                let mut list = Vec::with_capacity(total as usize);
                for (node, count) in runs {
                    list.extend(std::iter::repeat_n(node, count as usize));
                }
                Ok(list)
            }
            Wire::RoundRobin { n, m } => {
                if u64::from(n) > MAX_PROCS {
                    return Err(too_many());
                }
                if m == 0 {
                    return Err(D::Error::custom("ranks dealt over no nodes"));
                }
                Ok((0..n).map(|r| r % m).collect())
            }
        }
    }
}

/// Checks a process-set name: 1 to [`MAX_PSET_NAME_LEN`] bytes, no NUL, and not the
/// job's namespace `nspace` (PMIx: set names must not conflict with namespaces).
pub fn validate_pset_name(name: &str, nspace: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a process set name is empty".into());
    }
    let shown = || {
        let mut s: String = name.chars().take(64).collect();
        if s.len() < name.len() {
            s.push('…');
        }
        s
    };
    if name.len() > MAX_PSET_NAME_LEN {
        return Err(format!(
            "process set name {:?} is {} bytes, longer than the {MAX_PSET_NAME_LEN}-byte limit",
            shown(),
            name.len()
        ));
    }
    if name.contains('\0') {
        return Err(format!(
            "process set name {:?} contains a NUL byte",
            shown()
        ));
    }
    if name == nspace {
        return Err(format!(
            "process set name {name:?} is the job's namespace; a set must not share its \
             name with a namespace"
        ));
    }
    Ok(())
}

impl JobMap {
    /// `n` ranks spread block-wise over `m` nodes: the first `n % m` nodes get one extra.
    pub fn block(nspace: impl Into<crate::ids::Nspace>, n: u32, m: u32) -> JobMap {
        assert!(m > 0, "a job needs at least one node");
        let base = n / m;
        let extra = n % m;
        let mut rank_node = Vec::with_capacity(n as usize);
        for node in 0..m {
            let count = base + u32::from(node < extra);
            rank_node.extend(std::iter::repeat_n(node, count as usize));
        }
        JobMap::with_layout(nspace.into(), m, rank_node)
    }

    /// `n` ranks dealt round-robin over `m` nodes: rank `r` on node `r % m`.
    pub fn round_robin(nspace: impl Into<crate::ids::Nspace>, n: u32, m: u32) -> JobMap {
        assert!(m > 0, "a job needs at least one node");
        JobMap::with_layout(nspace.into(), m, (0..n).map(|r| r % m).collect())
    }

    /// One application context of every rank, no process sets.
    fn with_layout(nspace: crate::ids::Nspace, m: u32, rank_node: Vec<NodeId>) -> JobMap {
        let n = rank_node.len() as u32;
        JobMap {
            nspace,
            num_nodes: m,
            rank_node,
            node_names: (0..m).map(|i| format!("node{i}")).collect(),
            app_sizes: if n > 0 { vec![n] } else { Vec::new() },
            psets: Vec::new(),
        }
    }

    pub fn size(&self) -> u32 {
        self.rank_node.len() as u32
    }

    /// Node hosting `proc`, if it belongs to this job.
    pub fn node_of(&self, proc: &ProcId) -> Option<NodeId> {
        if proc.nspace != self.nspace {
            return None;
        }
        self.rank_node.get(proc.rank as usize).copied()
    }

    pub fn contains(&self, proc: &ProcId) -> bool {
        self.node_of(proc).is_some()
    }

    /// Ranks hosted on `node`, ascending.
    pub fn ranks_on(&self, node: NodeId) -> Vec<Rank> {
        (0..self.size())
            .filter(|&r| self.rank_node[r as usize] == node)
            .collect()
    }

    /// How many ranks are placed on `node`.
    pub fn count_on(&self, node: NodeId) -> u32 {
        self.rank_node.iter().filter(|&&n| n == node).count() as u32
    }

    /// Local rank of `rank` on its node (its index among the node's ranks).
    pub fn local_rank(&self, rank: Rank) -> Option<u32> {
        let node = *self.rank_node.get(rank as usize)?;
        Some(
            self.rank_node[..rank as usize]
                .iter()
                .filter(|&&n| n == node)
                .count() as u32,
        )
    }

    pub fn all_procs(&self) -> Vec<ProcId> {
        (0..self.size())
            .map(|r| ProcId::new(self.nspace.clone(), r))
            .collect()
    }

    // ------------------------------------------------------------- applications

    /// Splits the job's ranks into application contexts of `sizes` ranks each, in
    /// order (MPMD: app 0 gets ranks `0..sizes[0]`, and so on). Every app needs a
    /// rank, and together they must hold exactly the job's ranks.
    pub fn set_apps(&mut self, sizes: Vec<u32>) -> Result<(), String> {
        Self::check_apps(&sizes, self.size())?;
        self.app_sizes = sizes;
        Ok(())
    }

    fn check_apps(sizes: &[u32], size: u32) -> Result<(), String> {
        if let Some(app) = sizes.iter().position(|&n| n == 0) {
            return Err(format!("application context {app} has no ranks"));
        }
        let total: u64 = sizes.iter().map(|&n| u64::from(n)).sum();
        if total != u64::from(size) {
            return Err(format!(
                "the application contexts hold {total} rank(s), the job has {size}"
            ));
        }
        Ok(())
    }

    /// Number of application contexts (PMIX_JOB_NUM_APPS).
    pub fn num_apps(&self) -> u32 {
        self.app_sizes.len() as u32
    }

    /// The application context `rank` runs (PMIX_APPNUM), if it is a rank of the job.
    pub fn app_of(&self, rank: Rank) -> Option<u32> {
        let mut end = 0u64;
        for (app, &n) in self.app_sizes.iter().enumerate() {
            end += u64::from(n);
            if u64::from(rank) < end {
                return Some(app as u32);
            }
        }
        None
    }

    /// The ranks of application context `app`.
    pub fn app_ranks(&self, app: u32) -> Option<Range<Rank>> {
        let sizes = self.app_sizes.get(..=app as usize)?;
        let end: u32 = sizes.iter().sum();
        Some(end - sizes[app as usize]..end)
    }

    // ------------------------------------------------------------- process sets

    /// Defines process set `name` over `members`, ranks of this job. Sets are defined
    /// as the job is made (at launch, or by a spawn) and never change: a name may be
    /// defined once, and must be valid (see
    /// [`validate_pset_name`]); the set needs a member, and only ranks of the job.
    pub fn define_pset(&mut self, name: &str, members: RankSet) -> Result<(), String> {
        validate_pset_name(name, &self.nspace)?;
        if self.pset(name).is_some() {
            return Err(format!("process set {name:?} is defined twice"));
        }
        Self::check_members(name, &members, self.size())?;
        self.psets.push(Pset {
            name: name.to_string(),
            members,
        });
        Ok(())
    }

    fn check_members(name: &str, members: &RankSet, size: u32) -> Result<(), String> {
        match members.last() {
            None => Err(format!("process set {name:?} has no members")),
            Some(last) if last >= size => Err(format!(
                "process set {name:?} names rank {last}, but the job's ranks are 0-{}",
                size.saturating_sub(1)
            )),
            Some(_) => Ok(()),
        }
    }

    /// Process set `name`, if the job has it.
    pub fn pset(&self, name: &str) -> Option<&Pset> {
        self.psets.iter().find(|p| p.name == name)
    }

    /// Names of the job's process sets, in the order they were defined
    /// (PMIX_QUERY_PSET_NAMES).
    pub fn pset_names(&self) -> Vec<String> {
        self.psets.iter().map(|p| p.name.clone()).collect()
    }

    /// Members of process set `name`, ascending (PMIX_QUERY_PSET_MEMBERSHIP).
    pub fn pset_members(&self, name: &str) -> Option<Vec<ProcId>> {
        let set = self.pset(name)?;
        Some(
            set.members
                .ranks()
                .map(|r| ProcId::new(self.nspace.clone(), r))
                .collect(),
        )
    }

    /// Names of the process sets `rank` belongs to, in definition order
    /// (PMIX_PSET_NAMES); `None` when it is not a rank of the job.
    pub fn psets_of(&self, rank: Rank) -> Option<Vec<String>> {
        (rank < self.size()).then(|| {
            self.psets
                .iter()
                .filter(|p| p.members.contains(rank))
                .map(|p| p.name.clone())
                .collect()
        })
    }

    /// Checks a map that came over the wire: apps cover the ranks, every node id and
    /// node name is there, process-set names are valid and unique, members are ranks of
    /// the job.
    pub fn validate(&self) -> Result<(), String> {
        if self.node_names.len() != self.num_nodes as usize {
            return Err(format!(
                "{} node name(s) for {} node(s)",
                self.node_names.len(),
                self.num_nodes
            ));
        }
        if let Some(r) = self.rank_node.iter().position(|&n| n >= self.num_nodes) {
            return Err(format!("rank {r} is on a node that does not exist"));
        }
        Self::check_apps(&self.app_sizes, self.size())?;
        for (i, p) in self.psets.iter().enumerate() {
            validate_pset_name(&p.name, &self.nspace)?;
            if self.psets[..i].iter().any(|q| q.name == p.name) {
                return Err(format!("process set {:?} is defined twice", p.name));
            }
            Self::check_members(&p.name, &p.members, self.size())?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ spawned jobs

impl JobMap {
    /// The rank of `rank` among every process on its node when the processes of the
    /// `earlier` jobs there come first, then this job's by rank (PMIX_NODE_RANK, see
    /// [`Session::node_rank`]). `None` for a rank outside the job.
    pub fn node_rank_after<'a>(
        &self,
        earlier: impl IntoIterator<Item = &'a JobMap>,
        rank: Rank,
    ) -> Option<u32> {
        let node = *self.rank_node.get(rank as usize)?;
        let before: u32 = earlier.into_iter().map(|j| j.count_on(node)).sum();
        Some(before + self.local_rank(rank)?)
    }

    /// A digest of where the job's ranks run (namespace, node count, each rank's node
    /// server, app sizes, process sets; not the node names, which each node server
    /// learns for itself): the launcher and every node server build the map from the
    /// same arguments, and compare digests at start so a disagreement is a clear
    /// error, not a job whose ranks wait for peers nobody starts. FNV-1a, stable
    /// across hosts and builds.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        };
        eat(self.nspace.as_str().as_bytes());
        eat(&[0xff]);
        eat(&self.num_nodes.to_le_bytes());
        eat(&(self.rank_node.len() as u64).to_le_bytes());
        for n in &self.rank_node {
            eat(&n.to_le_bytes());
        }
        eat(&(self.app_sizes.len() as u64).to_le_bytes());
        for a in &self.app_sizes {
            eat(&a.to_le_bytes());
        }
        for p in &self.psets {
            eat(p.name.as_bytes());
            eat(&[0xfe]);
            eat(p.members.to_string().as_bytes());
            eat(&[0xfd]);
        }
        h
    }

    /// The map of a job spawned in the session of `primary`: `app_sizes[a]` processes
    /// for each application, block-wise, round-robin or K per node server in turn over
    /// `nodes` (node servers of `primary`'s session, at least one), with `primary`'s
    /// node names.
    pub fn spawned(
        nspace: crate::ids::Nspace,
        primary: &JobMap,
        app_sizes: Vec<u32>,
        nodes: &[NodeId],
        mapping: crate::spawn::SpawnMapping,
    ) -> Result<JobMap, String> {
        use crate::spawn::SpawnMapping;
        if nodes.is_empty() {
            return Err("no node server to place the processes on".into());
        }
        if let Some(n) = nodes.iter().find(|&&n| n >= primary.num_nodes) {
            return Err(format!("node server {n} is not in the session"));
        }
        let n: u32 = app_sizes.iter().sum();
        let m = nodes.len() as u32;
        let slots = match mapping {
            SpawnMapping::RoundRobin => JobMap::round_robin(nspace.clone(), n, m).rank_node,
            SpawnMapping::Block => JobMap::block(nspace.clone(), n, m).rank_node,
            SpawnMapping::PerNode(k) => {
                if k == 0 || u64::from(n) > u64::from(k) * u64::from(m) {
                    return Err(format!(
                        "{n} process(es) do not fit {k} per node server (ppr:{k}:node) on \
                         {m} node server(s)"
                    ));
                }
                (0..n).map(|r| r / k).collect()
            }
        };
        let mut job = JobMap {
            nspace,
            num_nodes: primary.num_nodes,
            rank_node: slots.iter().map(|&i| nodes[i as usize]).collect(),
            node_names: primary.node_names.clone(),
            app_sizes: Vec::new(),
            psets: Vec::new(),
        };
        job.set_apps(app_sizes)?;
        Ok(job)
    }
}

/// Every job of a session: the one `cohort run` launched (index 0) and those its
/// processes spawned (1, 2, …), each with the process that spawned it. Resolves any
/// process of the session to its node server.
#[derive(Clone, Debug)]
pub struct Session {
    jobs: Vec<JobMap>,
    parents: Vec<Option<ProcId>>,
    /// Where each job is in its life (index into `jobs`).
    states: Vec<JobState>,
    /// Spawned jobs by namespace (index into `jobs`).
    by_nspace: std::collections::HashMap<crate::ids::Nspace, u32>,
}

/// Where a job of a [`Session`] is in its life, as far as its process sets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Known (spawned, being placed and started); its sets are not defined yet.
    Added,
    /// Running: its process sets are defined in the session.
    Running,
    /// Every process ended, or its spawn was cancelled: its sets are deleted and its
    /// namespace is no longer active (its data stays readable).
    Ended,
}

impl Session {
    pub fn new(primary: JobMap) -> Session {
        Session {
            jobs: vec![primary],
            parents: vec![None],
            states: vec![JobState::Running],
            by_nspace: Default::default(),
        }
    }

    /// The launched job.
    pub fn primary(&self) -> &JobMap {
        &self.jobs[0]
    }

    /// Adds job `index` (the next one), spawned by `parent`.
    pub fn add(&mut self, index: u32, job: JobMap, parent: ProcId) -> Result<(), String> {
        if index as usize != self.jobs.len() {
            return Err(format!(
                "job {} arrived as spawn {index}; {} expected",
                job.nspace,
                self.jobs.len()
            ));
        }
        if self.index_of(&job.nspace).is_some() {
            return Err(format!("namespace {} exists already", job.nspace));
        }
        if job.num_nodes != self.primary().num_nodes {
            return Err(format!(
                "job {} spans {} node servers, the session {}",
                job.nspace,
                job.num_nodes,
                self.primary().num_nodes
            ));
        }
        job.validate()?;
        self.by_nspace.insert(job.nspace.clone(), index);
        self.jobs.push(job);
        self.parents.push(Some(parent));
        self.states.push(JobState::Added);
        Ok(())
    }

    /// Where job `index` is in its life.
    pub fn state(&self, index: u32) -> Option<JobState> {
        self.states.get(index as usize).copied()
    }

    /// Spawned job `index` runs: its process sets are defined from now on. Whether
    /// it was only added until now (not when it ended already).
    pub fn set_running(&mut self, index: u32) -> bool {
        match self.states.get_mut(index as usize) {
            Some(state) if *state == JobState::Added => {
                *state = JobState::Running;
                true
            }
            _ => false,
        }
    }

    /// Spawned job `index` ended (or was cancelled): its process sets are deleted.
    /// Whether it was running until now (its sets were defined). The launched job
    /// (index 0) ends only with the session.
    pub fn set_ended(&mut self, index: u32) -> bool {
        match self.states.get_mut(index as usize) {
            Some(state) if index > 0 => {
                std::mem::replace(state, JobState::Ended) == JobState::Running
            }
            _ => false,
        }
    }

    /// The namespaces of the jobs running (PMIX_QUERY_NAMESPACES), the launched one
    /// first.
    pub fn active_nspaces(&self) -> Vec<crate::ids::Nspace> {
        self.jobs
            .iter()
            .zip(&self.states)
            .filter(|(_, s)| **s == JobState::Running)
            .map(|(j, _)| j.nspace.clone())
            .collect()
    }

    /// The process sets defined in the session (those of the running jobs), by job
    /// then in definition order, with their job.
    pub fn psets(&self) -> impl Iterator<Item = (&JobMap, &Pset)> {
        self.jobs
            .iter()
            .zip(&self.states)
            .filter(|(_, s)| **s == JobState::Running)
            .flat_map(|(j, _)| j.psets.iter().map(move |p| (j, p)))
    }

    /// The members of process set `name`, if it is defined in the session
    /// (PMIX_QUERY_PSET_MEMBERSHIP).
    pub fn pset_members(&self, name: &str) -> Option<Vec<ProcId>> {
        self.psets()
            .find(|(_, p)| p.name == name)
            .and_then(|(j, _)| j.pset_members(name))
    }

    /// Why a new job may not define process set `name`: a job not ended has one of
    /// that name, or the name is (or has the form of) a namespace of the session.
    pub fn pset_clash(&self, name: &str) -> Option<String> {
        let taken = self
            .jobs
            .iter()
            .zip(&self.states)
            .find(|(j, s)| **s != JobState::Ended && j.pset(name).is_some());
        if let Some((j, _)) = taken {
            return Some(format!(
                "process set {name:?} is defined already (by job {})",
                j.nspace
            ));
        }
        self.namespace_clash(name)
            .map(|why| format!("process set name {name:?}: {why}"))
    }

    pub fn jobs(&self) -> &[JobMap] {
        &self.jobs
    }

    /// Job `index` (0: the launched one).
    pub fn get(&self, index: u32) -> Option<&JobMap> {
        self.jobs.get(index as usize)
    }

    /// The index of the job of namespace `nspace`.
    pub fn index_of(&self, nspace: &str) -> Option<u32> {
        if self.jobs[0].nspace.as_str() == nspace {
            return Some(0);
        }
        self.by_nspace.get(nspace).copied()
    }

    /// Why `id` cannot name a group of this session: it is the namespace of one of
    /// its jobs, or of the form the session gives the jobs it spawns
    /// (`<launched namespace>@K`), so that `{id, r}` would address a job's rank as
    /// well as a group member. `None` when it is free of jobs.
    pub fn namespace_clash(&self, id: &str) -> Option<String> {
        if self.index_of(id).is_some() {
            return Some("it is the namespace of a job of the session".into());
        }
        let spawned = id
            .strip_prefix(self.primary().nspace.as_str())
            .and_then(|rest| rest.strip_prefix('@'))
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()));
        spawned.then(|| {
            format!(
                "it has the form of the namespaces of spawned jobs ({}@K)",
                self.primary().nspace
            )
        })
    }

    /// The job of namespace `nspace`.
    pub fn job_of(&self, nspace: &str) -> Option<&JobMap> {
        self.get(self.index_of(nspace)?)
    }

    /// The process that spawned the job of `nspace` (none for the launched job).
    pub fn parent_of(&self, nspace: &str) -> Option<&ProcId> {
        self.parents[self.index_of(nspace)? as usize].as_ref()
    }

    /// Node server hosting `proc`, if it is a process of the session.
    pub fn node_of(&self, proc: &ProcId) -> Option<NodeId> {
        // The launched job's processes first, by `Nspace` (a shared name compares by
        // pointer): the common case on every collective's path.
        let primary = &self.jobs[0];
        let job = if proc.nspace == primary.nspace {
            primary
        } else {
            &self.jobs[*self.by_nspace.get(proc.nspace.as_str())? as usize]
        };
        job.rank_node.get(proc.rank as usize).copied()
    }

    pub fn contains(&self, proc: &ProcId) -> bool {
        self.node_of(proc).is_some()
    }

    /// Every process of every job hosted on `node`.
    pub fn procs_on(&self, node: NodeId) -> Vec<ProcId> {
        self.jobs
            .iter()
            .flat_map(|j| {
                j.ranks_on(node)
                    .into_iter()
                    .map(|r| ProcId::new(j.nspace.clone(), r))
            })
            .collect()
    }

    /// The rank of `proc` among every process of the session on its node
    /// (PMIX_NODE_RANK): the processes of earlier jobs there come first, then those of
    /// its own job by rank. So two jobs' processes sharing a node never share one.
    pub fn node_rank(&self, proc: &ProcId) -> Option<u32> {
        let index = self.index_of(proc.nspace.as_str())? as usize;
        self.jobs[index].node_rank_after(&self.jobs[..index], proc.rank)
    }

    /// How many processes of the session's jobs are placed on `node`
    /// (PMIX_NODE_SIZE), those that ended included.
    pub fn node_size(&self, node: NodeId) -> u32 {
        self.jobs.iter().map(|j| j.count_on(node)).sum()
    }

    /// Every process of the session, job by job.
    pub fn all_procs(&self) -> Vec<ProcId> {
        self.jobs.iter().flat_map(|j| j.all_procs()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::SpawnMapping;

    #[test]
    fn block_mapping_spreads_remainder_first() {
        let m = JobMap::block("j", 7, 3);
        assert_eq!(m.rank_node, vec![0, 0, 0, 1, 1, 2, 2]);
        assert_eq!(m.ranks_on(1), vec![3, 4]);
        assert_eq!(m.local_rank(4), Some(1));
        assert_eq!(m.node_of(&ProcId::new("j", 6)), Some(2));
        assert_eq!(m.node_of(&ProcId::new("j", 7)), None);
        assert_eq!(m.node_of(&ProcId::new("other", 0)), None);
    }

    #[test]
    fn round_robin_mapping_deals_ranks() {
        let m = JobMap::round_robin("j", 5, 2);
        assert_eq!(m.rank_node, vec![0, 1, 0, 1, 0]);
        assert_eq!(m.ranks_on(0), vec![0, 2, 4]);
        assert_eq!(m.local_rank(3), Some(1));
        assert_eq!(m.local_rank(4), Some(2));
        assert_eq!(m.node_names, ["node0", "node1"]);
    }

    /// PMIx "Process Sets": a spawned job's sets are defined while it runs, then
    /// deleted; their names are taken meanwhile, and free again after.
    #[test]
    fn a_spawned_jobs_process_sets_live_while_it_runs() {
        use crate::ids::Nspace;
        let mut primary = JobMap::block("j", 4, 2);
        primary.define_pset("io", RankSet::range(0..2)).unwrap();
        let mut s = Session::new(primary.clone());
        let mut child = JobMap::spawned(
            "j@1".into(),
            &primary,
            vec![2, 1],
            &[0, 1],
            SpawnMapping::Block,
        )
        .unwrap();
        child.define_pset("workers", RankSet::range(0..2)).unwrap();
        assert!(s.pset_clash("workers").is_none());
        s.add(1, child, ProcId::new("j", 0)).unwrap();
        // Added: its name is taken, but the set is not defined yet.
        assert_eq!(s.state(1), Some(JobState::Added));
        assert!(s.pset_clash("workers").unwrap().contains("j@1"));
        assert!(s.pset_clash("io").unwrap().contains("defined already"));
        assert!(s.pset_clash("j").unwrap().contains("namespace"));
        assert!(s
            .pset_clash("j@7")
            .unwrap()
            .contains("namespaces of spawned jobs"));
        let names = |s: &Session| s.psets().map(|(_, p)| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&s), ["io"]);
        assert_eq!(s.pset_members("workers"), None);
        assert_eq!(s.active_nspaces(), [Nspace::new("j")]);
        // Running: defined, once.
        assert!(s.set_running(1));
        assert!(!s.set_running(1));
        assert_eq!(names(&s), ["io", "workers"]);
        assert_eq!(
            s.pset_members("workers"),
            Some(vec![ProcId::new("j@1", 0), ProcId::new("j@1", 1)])
        );
        assert_eq!(s.active_nspaces(), [Nspace::new("j"), Nspace::new("j@1")]);
        // Ended: deleted, once; the name is free; the job's processes still resolve.
        assert!(s.set_ended(1));
        assert!(!s.set_ended(1));
        assert!(!s.set_running(1), "an ended job does not run again");
        assert_eq!(names(&s), ["io"]);
        assert!(s.pset_clash("workers").is_none());
        assert_eq!(s.active_nspaces(), [Nspace::new("j")]);
        assert_eq!(s.node_of(&ProcId::new("j@1", 2)), Some(1));
        // The launched job never ends; a job cancelled before it ran had no sets.
        assert!(!s.set_ended(0));
        assert_eq!(s.state(0), Some(JobState::Running));
        let late =
            JobMap::spawned("j@2".into(), &primary, vec![1], &[0], SpawnMapping::Block).unwrap();
        s.add(2, late, ProcId::new("j", 0)).unwrap();
        assert!(!s.set_ended(2));
        assert_eq!(s.state(2), Some(JobState::Ended));
    }

    #[test]
    fn a_session_resolves_the_processes_of_every_job() {
        let primary = JobMap::block("j", 4, 3);
        let mut s = Session::new(primary.clone());
        let child = JobMap::spawned(
            "j@1".into(),
            &primary,
            vec![2, 1],
            &[2, 0],
            SpawnMapping::Block,
        )
        .unwrap();
        assert_eq!(child.rank_node, vec![2, 2, 0]);
        assert_eq!(child.app_of(2), Some(1));
        let rr = JobMap::spawned(
            "x".into(),
            &primary,
            vec![3],
            &[1, 2],
            SpawnMapping::RoundRobin,
        )
        .unwrap();
        assert_eq!(rr.rank_node, vec![1, 2, 1]);
        // ppr:2:node over node servers 2, 0, 1: filled in that order
        let ppr = SpawnMapping::PerNode(2);
        let k = JobMap::spawned("x".into(), &primary, vec![4], &[2, 0, 1], ppr).unwrap();
        assert_eq!(k.rank_node, vec![2, 2, 0, 0]);
        let e = JobMap::spawned("x".into(), &primary, vec![5], &[0, 1], ppr).unwrap_err();
        // the digest sees where ranks run, not what a node server calls itself
        let mut renamed = k.clone();
        renamed.node_names[0] = "elsewhere".into();
        assert_eq!(renamed.digest(), k.digest());
        let mut moved = k.clone();
        moved.rank_node[3] = 1;
        assert_ne!(moved.digest(), k.digest());
        let rr = JobMap::spawned(
            "x".into(),
            &primary,
            vec![4],
            &[2, 0, 1],
            SpawnMapping::RoundRobin,
        );
        assert_ne!(rr.unwrap().digest(), k.digest());
        assert!(
            e.contains("5 process(es) do not fit 2 per node server"),
            "{e}"
        );
        let zero = SpawnMapping::PerNode(0);
        assert!(JobMap::spawned("x".into(), &primary, vec![1], &[0], zero).is_err());
        assert!(JobMap::spawned("x".into(), &primary, vec![1], &[3], SpawnMapping::Block).is_err());
        assert!(JobMap::spawned("x".into(), &primary, vec![1], &[], SpawnMapping::Block).is_err());
        assert!(s.add(2, child.clone(), ProcId::new("j", 1)).is_err());
        s.add(1, child.clone(), ProcId::new("j", 1)).unwrap();
        assert!(s
            .add(2, child, ProcId::new("j", 1))
            .unwrap_err()
            .contains("exists"));
        assert_eq!(s.node_of(&ProcId::new("j@1", 1)), Some(2));
        assert_eq!(s.node_of(&ProcId::new("j", 3)), Some(2));
        assert_eq!(s.node_of(&ProcId::new("j@1", 3)), None);
        assert_eq!(s.node_of(&ProcId::new("j@2", 0)), None);
        assert_eq!(s.parent_of("j@1"), Some(&ProcId::new("j", 1)));
        assert_eq!(s.parent_of("j"), None);
        assert_eq!(
            s.procs_on(0),
            vec![
                ProcId::new("j", 0),
                ProcId::new("j", 1),
                ProcId::new("j@1", 2)
            ]
        );
        assert_eq!(s.all_procs().len(), 7);
        // Node ranks span the jobs: node 2 hosts j:3, then j@1:0 and j@1:1.
        assert_eq!(s.node_rank(&ProcId::new("j", 3)), Some(0));
        assert_eq!(s.node_rank(&ProcId::new("j@1", 0)), Some(1));
        assert_eq!(s.node_rank(&ProcId::new("j@1", 1)), Some(2));
        assert_eq!(
            s.node_rank(&ProcId::new("j@1", 2)),
            Some(2),
            "after j:0, j:1"
        );
        assert_eq!(s.node_rank(&ProcId::new("j@1", 3)), None);
        assert_eq!(s.node_rank(&ProcId::new("k", 0)), None);
        assert_eq!((s.node_size(0), s.node_size(1), s.node_size(2)), (3, 1, 3));
    }
    #[test]
    fn rank_lists_parse_into_canonical_runs_and_print_back() {
        let s = RankSet::parse("0,2,4").unwrap();
        assert_eq!(s.runs(), [(0, 1), (2, 1), (4, 1)]);
        assert_eq!(s.to_string(), "0,2,4");
        let s = RankSet::parse(" 5-7, 0-3,4 ,9,8").unwrap();
        assert_eq!(s.runs(), [(0, 10)]);
        assert_eq!(s.to_string(), "0-9");
        assert_eq!(s.len(), 10);
        let s = RankSet::parse("3-3,10-12,11").unwrap();
        assert_eq!(s.to_string(), "3,10-12");
        assert_eq!(RankSet::parse(&s.to_string()).unwrap(), s);
        assert_eq!(s.ranks().collect::<Vec<_>>(), [3, 10, 11, 12]);
        assert!(s.contains(3) && s.contains(10) && s.contains(12));
        assert!(!s.contains(0) && !s.contains(4) && !s.contains(13));
        assert_eq!(s.last(), Some(12));
        for bad in ["", "1,", ",1", "a", "3-1", "-1", "1-", "4294967295", "1-x"] {
            assert!(RankSet::parse(bad).is_err(), "{bad:?} parsed");
        }
        let e = RankSet::parse("3-1").unwrap_err();
        assert!(e.contains("backwards"), "{e}");
        assert_eq!(
            RankSet::from_ranks([7, 1, 2, 2, 0, RANK_WILDCARD]).runs(),
            [(0, 3), (7, 1)]
        );
        assert_eq!(RankSet::range(4..6).runs(), [(4, 2)]);
        assert!(RankSet::range(4..4).is_empty());
    }

    #[test]
    fn apps_split_the_ranks_in_order() {
        let mut m = JobMap::block("j", 5, 2);
        assert_eq!((m.num_apps(), m.app_of(4), m.app_of(5)), (1, Some(0), None));
        m.set_apps(vec![2, 3]).unwrap();
        assert_eq!(m.num_apps(), 2);
        let apps: Vec<_> = (0..5).map(|r| m.app_of(r).unwrap()).collect();
        assert_eq!(apps, [0, 0, 1, 1, 1]);
        assert_eq!(m.app_ranks(0), Some(0..2));
        assert_eq!(m.app_ranks(1), Some(2..5));
        assert_eq!(m.app_ranks(2), None);
        assert!(m.set_apps(vec![2, 2]).unwrap_err().contains("4 rank(s)"));
        assert!(m.set_apps(vec![5, 0]).unwrap_err().contains("no ranks"));
        assert_eq!(m.app_sizes, [2, 3], "a refused split changes nothing");
    }

    #[test]
    fn psets_are_defined_once_over_ranks_of_the_job() {
        let mut m = JobMap::block("cohort.1.ab", 6, 3);
        m.define_pset("ocean", RankSet::range(0..2)).unwrap();
        m.define_pset("evens", RankSet::parse("0,2,4").unwrap())
            .unwrap();
        assert_eq!(m.pset_names(), ["ocean", "evens"]);
        assert_eq!(m.psets_of(0).unwrap(), ["ocean", "evens"]);
        assert_eq!(m.psets_of(1).unwrap(), ["ocean"]);
        assert!(m.psets_of(5).unwrap().is_empty());
        assert_eq!(m.psets_of(6), None);
        let members = m.pset_members("evens").unwrap();
        let ranks: Vec<Rank> = members.iter().map(|p| p.rank).collect();
        assert_eq!(ranks, [0, 2, 4]);
        assert!(members.iter().all(|p| p.nspace == "cohort.1.ab"));
        assert_eq!(m.pset_members("ice"), None);

        let e = m.define_pset("ocean", RankSet::range(2..3)).unwrap_err();
        assert!(e.contains("\"ocean\" is defined twice"), "{e}");
        let e = m.define_pset("", RankSet::range(2..3)).unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = m
            .define_pset(&"x".repeat(256), RankSet::range(2..3))
            .unwrap_err();
        assert!(e.contains("256 bytes"), "{e}");
        m.define_pset(&"y".repeat(255), RankSet::range(2..3))
            .unwrap();
        let e = m
            .define_pset("cohort.1.ab", RankSet::range(2..3))
            .unwrap_err();
        assert!(e.contains("namespace"), "{e}");
        let e = m.define_pset("far", RankSet::range(5..7)).unwrap_err();
        assert!(e.contains("rank 6") && e.contains("0-5"), "{e}");
        let e = m.define_pset("none", RankSet::default()).unwrap_err();
        assert!(e.contains("no members"), "{e}");
        assert_eq!(m.psets.len(), 3);
        assert_eq!(m.validate(), Ok(()));
    }

    #[test]
    fn the_map_stays_compact_on_the_wire_and_decodes_checked() {
        use crate::frame;
        let mut m = JobMap::block("j", 4096, 4);
        let plain = frame::encode_body(&m).len();
        m.set_apps(vec![1024, 3072]).unwrap();
        m.define_pset("ocean", RankSet::range(0..1024)).unwrap();
        m.define_pset("ice", RankSet::range(1024..4096)).unwrap();
        m.define_pset("io", RankSet::parse("0-15,2048-2063").unwrap())
            .unwrap();
        let bytes = frame::encode_body(&m);
        // A few dozen bytes per set and app, not some per member rank.
        assert!(
            bytes.len() - plain < 200,
            "{} more bytes",
            bytes.len() - plain
        );
        let back: JobMap = frame::decode_body(&bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.validate(), Ok(()));

        // A run set out of canonical form does not decode.
        #[derive(Serialize)]
        struct Raw(Vec<(Rank, u32)>);
        for runs in [
            vec![(4, 2), (0, 1)],
            vec![(0, 2), (2, 1)],
            vec![(0, 0)],
            vec![(u32::MAX - 1, 2)],
        ] {
            let b = frame::encode_body(&Raw(runs.clone()));
            assert!(frame::decode_body::<RankSet>(&b).is_err(), "{runs:?}");
        }
        // A map whose sets or apps do not fit the job is refused by `validate`.
        let mut bad = m.clone();
        bad.psets[0].members = RankSet::range(4000..4097);
        assert!(bad.validate().unwrap_err().contains("rank 4096"));
        let mut bad = m.clone();
        bad.psets[1].name = "ocean".into();
        assert!(bad.validate().unwrap_err().contains("twice"));
        let mut bad = m.clone();
        bad.app_sizes.push(1);
        assert!(bad.validate().is_err());
        let mut bad = m;
        bad.rank_node[7] = 4;
        assert!(bad.validate().is_err());
    }
    #[test]
    fn rank_to_node_lists_travel_as_runs_or_a_round_robin_rule() {
        use crate::frame;
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Holder(#[serde(with = "node_map")] Vec<NodeId>);
        let size = |v: Vec<NodeId>| {
            let bytes = frame::encode_body(&Holder(v.clone()));
            assert_eq!(frame::decode_body::<Holder>(&bytes).unwrap().0, v);
            bytes.len()
        };
        let big = 1 << 16;
        assert!(size(JobMap::block("j", big, 64).rank_node) < 64 * 8 + 32);
        assert!(size(JobMap::round_robin("j", big, 64).rank_node) < 32);
        // Anything else still comes back exactly, never much bigger than a list.
        let scattered: Vec<NodeId> = (0..1000u32).map(|r| (r * 7919) % 13).collect();
        assert!(size(scattered) <= 1000 * 4 + 32);
        for v in [
            vec![],
            vec![0],
            vec![2, 0],
            vec![0, 1],
            vec![0, 0, 1, 0],
            vec![1, 1, 1],
        ] {
            size(v);
        }
        // Hostile forms are refused, not expanded.
        #[derive(Serialize)]
        enum Wire {
            _Each(Vec<NodeId>),
            Runs(Vec<(NodeId, u32)>),
            RoundRobin { n: u32, m: u32 },
        }
        for w in [
            Wire::Runs(vec![(0, u32::MAX), (1, u32::MAX)]),
            Wire::RoundRobin { n: u32::MAX, m: 2 },
            Wire::RoundRobin { n: 4, m: 0 },
        ] {
            let bytes = frame::encode_body(&w);
            assert!(frame::decode_body::<Holder>(&bytes).is_err());
        }
    }
}
