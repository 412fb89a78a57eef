//! cohortd, the per-node server
