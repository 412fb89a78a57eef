//! Sans-IO core of the cohort node server: collective trackers (fence, group construct,
//! group destruct) over topology trees, the group table with context ids, the key-value
//! store with direct modex, and event routing. The node server and the simulator drive
//! it; it never touches a socket or a clock.

/// The engine's and the store's hash maps and sets: Fx hashing. Their keys are
/// collective keys, process ids and group ids; hashing them with SipHash took about 9%
/// of a node server's time per message (a profile of `cohort-sim cost`), and Fx
/// hashing cut the time per message by 7%. Every key comes from an authenticated local
/// client or node server of the same job, so the flooding that SipHash's keyed hashing
/// guards against is not a concern here.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;
pub(crate) type HashSet<T> = std::collections::HashSet<T, rustc_hash::FxBuildHasher>;

pub mod cluster;
pub mod datastore;
pub mod detector;
pub mod engine;
pub mod kv;

pub use detector::{Detection, Detector, DetectorConfig};

/// Removes from `items` those that `pick` selects and returns them, both in their
/// order (what `Vec::extract_if` does from Rust 1.87, above this workspace's
/// `rust-version`).
pub fn take_where<T>(items: &mut Vec<T>, pick: impl FnMut(&T) -> bool) -> Vec<T> {
    let (taken, kept) = std::mem::take(items).into_iter().partition(pick);
    *items = kept;
    taken
}
pub use engine::{Action, ClientId, Engine, EngineConfig, Group, Time};
