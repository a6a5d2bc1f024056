//! Reads through a guard against the real stores: coalesced reads of one key
//! (`coalesced`), and batch lookups (`batch`). One test binary for both.

#[path = "../common/mod.rs"]
mod common;

mod batch;
mod coalesced;
