//! Sans-IO core of the node server: collective trackers, group table, kv store, event routing, context ids
