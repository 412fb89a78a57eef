//! The demo job `make demo` runs: every rank of the job constructs one group with the
//! collective method (all ranks are leaders), asks for a context id, contributes group
//! info, and prints the membership, the context id and the group info of one other
//! member — read right after construct, without a fence.
//!
//! Run it with `cohort run --nodes 3 -n 6 --tag-output target/release/examples/demo`.

use cohort::{Client, ConstructOpts, ProcId, Scope, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::init()?;
    let me = client.proc_id().clone();
    let n = client.size();
    // Endpoint data other members will read without a fence.
    client.put(
        Scope::Remote,
        "demo.endpoint",
        format!("tcp://{}:{}", client.node_name(), 5000 + me.rank),
    )?;
    let all: Vec<ProcId> = (0..n)
        .rev()
        .map(|r| ProcId::new(client.nspace(), r))
        .collect();
    let opts = ConstructOpts {
        assign_context_id: true,
        timeout_ms: Some(30_000),
        group_info: vec![(
            "demo.role".into(),
            Value::Str(format!("rank {} on {}", me.rank, client.node_name())),
        )],
        ..Default::default()
    };
    let group = client.group_construct("demo-group", &all, opts)?;
    let members: Vec<String> = group.members.iter().map(|p| p.rank.to_string()).collect();
    let next = &group.members[(me.rank as usize + 1) % group.members.len()];
    let info = &group
        .group_info
        .iter()
        .find(|(p, _)| p == next)
        .map(|(_, i)| i.clone())
        .unwrap_or_default();
    let endpoint = client.get(next, "demo.endpoint", None)?;
    let binding = client
        .binding()
        .map(|b| b.to_string())
        .unwrap_or_else(|| "?".into());
    println!(
        "rank {} on {} (cpus {binding}): group {:?} members [{}] context id {} | member {} group info {:?} endpoint {:?}",
        me.rank,
        client.node_name(),
        group.id,
        members.join(","),
        group.context_id.map(|c| c.to_string()).unwrap_or_default(),
        next.rank,
        info.iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("?")))
            .collect::<Vec<_>>(),
        endpoint.as_str().unwrap_or("?"),
    );
    client.group_destruct("demo-group", None)?;
    client.finalize()?;
    Ok(())
}
