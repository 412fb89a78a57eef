//! OSU-style benchmarks for cohort
