//! cohort run: the job launcher
