//! Collective tree construction for node servers
