//! cohortd's library half: the node service (client socket, fabric, engine driver).
//! `main.rs` is the process shell around it: launcher control channel, rank processes,
//! stdio forwarding and signals.

mod inbox;
pub mod service;

pub use service::{NodeService, ServiceConfig};
