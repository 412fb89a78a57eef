//! Rank program for the MPMD / process-set tests: run under `cohort run`, each rank
//! prints one line with what it sees — the program it runs (the name it was started
//! by, so a test can start it under several names), its arguments, its application
//! context, the job's process sets and their members — after checking that every way
//! of asking agrees (the client's lookups, `get` at the node server, the environment).
//! A disagreement is printed on stderr and the rank exits 1. `tag=` shows
//! `$PSETS_TAG`, for checking per-app `-x`.
//!
//! ```text
//! cohort run -n 2 --pset ocean ./ocean a : -n 3 --pset ice ./ice b
//! RANK 0 node=0 prog=ocean args=a tag= app=0/2 apprank=0/2 mine=ocean next=ocean sets=ocean:0-1;ice:2-4
//! ```

use std::path::Path;
use std::time::Duration;

use cohort::{keys, Client, CohortError, ProcId, RankSet, Value};

fn main() {
    let client = match Client::init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("psets: cannot connect to the node server: {e}");
            std::process::exit(1);
        }
    };
    let line = describe(&client);
    let finalized = client.finalize();
    match (line, finalized) {
        (Ok(line), Ok(())) => println!("{line}"),
        (Err(e), _) => {
            eprintln!("psets: {e}");
            std::process::exit(1);
        }
        (_, Err(e)) => {
            eprintln!("psets: finalize: {e}");
            std::process::exit(1);
        }
    }
}

/// `RANK r node=… prog=… args=… tag=… app=A/N apprank=I/S mine=… next=… sets=name:ranks;…`
fn describe(client: &Client) -> Result<String, String> {
    let me = client.proc_id().clone();
    let timeout = Some(Duration::from_secs(30));
    let get = |proc: &ProcId, key: &str| {
        client
            .get(proc, key, timeout)
            .map_err(|e| format!("get({proc}, {key}): {e}"))
    };

    // Application context: the client's lookup, the node server's answer to a get,
    // and the environment the node server started this rank with.
    let app = client.appnum(&me).map_err(|e| format!("appnum: {e}"))?;
    let got = get(&me, keys::APPNUM)?;
    let env: Option<u32> = std::env::var("COHORT_APPNUM")
        .ok()
        .and_then(|v| v.parse().ok());
    if got != Value::U32(app) || env != Some(app) {
        return Err(format!(
            "app number: appnum() says {app}, get says {got:?}, COHORT_APPNUM says {env:?}"
        ));
    }
    let napps = client.num_apps();
    let wildcard = ProcId::wildcard(client.nspace());
    let got = get(&wildcard, keys::JOB_NUM_APPS)?;
    if got != Value::U32(napps) {
        return Err(format!("num_apps() says {napps}, get says {got:?}"));
    }
    let app_size = get(&me, keys::APP_SIZE)?;
    let app_rank = get(&me, keys::APP_RANK)?;
    let (Some(app_size), Some(app_rank)) = (app_size.as_u64(), app_rank.as_u64()) else {
        return Err(format!("app size {app_size:?}, app rank {app_rank:?}"));
    };

    // Process sets: names, count, each set's members, and each rank's sets, which must
    // be the sets listing it.
    let names = client
        .pset_names()
        .map_err(|e| format!("pset_names: {e}"))?;
    let count = client
        .pset_count()
        .map_err(|e| format!("pset_count: {e}"))?;
    if count != names.len() {
        return Err(format!("pset_count() {count}, but names {names:?}"));
    }
    let mut sets = Vec::new();
    let mut members_of = Vec::new();
    for name in &names {
        let members = client
            .pset_members(name)
            .map_err(|e| format!("pset_members({name}): {e}"))?;
        if members.iter().any(|p| p.nspace != me.nspace) {
            return Err(format!("set {name} has a member outside the job"));
        }
        let ranks = RankSet::from_ranks(members.iter().map(|p| p.rank));
        sets.push(format!("{name}:{ranks}"));
        members_of.push(ranks);
    }
    for rank in 0..client.size() {
        let proc = ProcId::new(me.nspace.clone(), rank);
        let of = client
            .psets_of(&proc)
            .map_err(|e| format!("psets_of({proc}): {e}"))?;
        let listed: Vec<String> = names
            .iter()
            .zip(&members_of)
            .filter(|(_, m)| m.contains(rank))
            .map(|(n, _)| n.clone())
            .collect();
        if of != listed {
            return Err(format!(
                "psets_of({proc}) is {of:?}, but the sets listing it are {listed:?}"
            ));
        }
    }
    let missing = "no-such-set";
    match client.pset_members(missing) {
        Err(CohortError::PsetNotFound { name }) if name == missing => {}
        other => return Err(format!("pset_members({missing}) gave {other:?}")),
    }

    // PMIX_PSET_NAMES through get, at the node server: this rank's and the next one's
    // (often on another node server).
    let mine = client.psets_of(&me).map_err(|e| e.to_string())?;
    let got = get(&me, keys::PSET_NAMES)?;
    if got != Value::Strs(mine.clone()) {
        return Err(format!("psets_of(me) is {mine:?}, get says {got:?}"));
    }
    let next = ProcId::new(me.nspace.clone(), (me.rank + 1) % client.size());
    let next_sets = match get(&next, keys::PSET_NAMES)? {
        Value::Strs(v) => v,
        other => return Err(format!("get({next}, PMIX_PSET_NAMES) gave {other:?}")),
    };

    let prog = std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tag = std::env::var("PSETS_TAG").unwrap_or_default();
    Ok(format!(
        "RANK {} node={} prog={prog} args={} tag={tag} app={app}/{napps} \
         apprank={app_rank}/{app_size} mine={} next={} sets={}",
        me.rank,
        client.node_id(),
        args.join(","),
        mine.join(","),
        next_sets.join(","),
        sets.join(";")
    ))
}
