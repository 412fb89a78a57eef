//! cohort client library
