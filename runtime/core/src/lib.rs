//! Sans-IO core of the cohort node server: collective trackers (fence, group construct,
//! group destruct) over topology trees, the group table with context ids, the key-value
//! store with direct modex, and event routing. The node server and the simulator drive
//! it; it never touches a socket or a clock.

pub mod cluster;
pub mod engine;
pub mod kv;

pub use engine::{Action, ClientId, Engine, EngineConfig, Group, Time};
