//! Bootstrap and invite/join construction, decisions, leader failure and construct
//! abort (group-construction-methods §6.4.3.2–3, rfc0033, pmix-standard groups
//! chapter), on in-memory clusters running the node servers' state machines.
//!
//! The suite (`suite/methods.rs`) runs here with the tree collective, and again in
//! `methods_dissemination.rs` with the dissemination allgather.

const ALLGATHER: Allgather = Allgather::Tree;
include!("suite/methods.rs");
