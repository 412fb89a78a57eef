//! Multi-node-server integration tests
