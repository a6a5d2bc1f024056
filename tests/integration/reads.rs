//! Reads through a guard against the real stores: coalesced reads of one key
//! (`coalesced`), and batch lookups (`batch`).

mod batch;
mod coalesced;
