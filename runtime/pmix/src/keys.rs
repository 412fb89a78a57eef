//! Job-level keys: what `PMIx_Get` answers from the job map every rank got from its
//! node server at init, without a round trip, with the types `pmix_common.h` gives
//! them.

use cohort::{Client, ProcId};

use crate::types::*;
use crate::value::PVal;

/// The value of job-level `key` for `proc` (a rank of this job, or its wildcard, for
/// which node-level keys describe this process's node), or `None` when `key` is not
/// one of them or `proc` is not of this job.
pub fn job_value(c: &Client, proc: &ProcId, key: &str) -> Option<PVal> {
    let job = c.job();
    if proc.nspace != c.nspace() {
        return None;
    }
    let size = job.size();
    let job_wide = match key {
        PMIX_JOB_SIZE | PMIX_MAX_PROCS => Some(PVal::Uint32(size)),
        PMIX_UNIV_SIZE => Some(PVal::Uint32(c.universe_size())),
        PMIX_NUM_NODES => Some(PVal::Uint32(job.num_nodes)),
        PMIX_JOB_NUM_APPS => Some(PVal::Uint32(job.num_apps())),
        PMIX_NSPACE | PMIX_JOBID => Some(PVal::Str(c.nspace().to_string())),
        PMIX_NODE_LIST => Some(PVal::Str(job.node_names.join(","))),
        _ => None,
    };
    if job_wide.is_some() {
        return job_wide;
    }
    // Node-level keys: the node of `proc`, or this process's node for the wildcard.
    let me = proc.is_wildcard();
    let rank = if me { c.rank() } else { proc.rank };
    if rank >= size {
        return None;
    }
    let node = job.node_of(&ProcId::new(c.nspace(), rank))?;
    let on_node = job.ranks_on(node);
    let node_level = match key {
        PMIX_LOCAL_SIZE => Some(PVal::Uint32(on_node.len() as u32)),
        PMIX_LOCAL_PEERS => Some(PVal::Str(
            on_node
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )),
        PMIX_LOCALLDR => on_node.iter().min().map(|&r| PVal::Rank(r)),
        PMIX_HOSTNAME => job.node_names.get(node as usize).cloned().map(PVal::Str),
        PMIX_NODEID => Some(PVal::Uint32(node)),
        _ => None,
    };
    if node_level.is_some() || me {
        return node_level;
    }
    let app = job.app_of(rank);
    match key {
        PMIX_RANK | PMIX_GLOBAL_RANK => Some(PVal::Rank(rank)),
        PMIX_PROCID => Some(PVal::Proc(ProcId::new(c.nspace(), rank))),
        PMIX_LOCAL_RANK => job
            .local_rank(rank)
            .map(|l| PVal::Uint16(u16::try_from(l).unwrap_or(u16::MAX))),
        PMIX_APPNUM => app.map(PVal::Uint32),
        PMIX_APP_SIZE | PMIX_APP_RANK | PMIX_APPLDR => {
            let ranks = job.app_ranks(app?)?;
            Some(match key {
                PMIX_APP_SIZE => PVal::Uint32(ranks.end - ranks.start),
                PMIX_APP_RANK => PVal::Rank(rank - ranks.start),
                _ => PVal::Rank(ranks.start),
            })
        }
        // Where a bound local peer sits (the node server said at init); not found
        // for an unbound one or one on another node.
        PMIX_LOCALITY_STRING | PMIX_CPUSET => c
            .local_bindings()
            .iter()
            .find(|b| b.rank == rank)?
            .value_of(key)
            .map(PVal::Str),
        PMIX_PSET_NAMES => Some(PVal::Array(
            PMIX_STRING,
            job.psets_of(rank)
                .unwrap_or_default()
                .into_iter()
                .map(PVal::Str)
                .collect(),
        )),
        _ => None,
    }
}
