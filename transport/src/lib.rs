//! The fabric between node servers: one trait, a TCP backend
