//! The construction-methods suite (`suite/methods.rs`, see `methods.rs`) with fences and
//! collective-method constructs gathering by the dissemination allgather.

const ALLGATHER: Allgather = Allgather::Dissemination;
include!("suite/methods.rs");
