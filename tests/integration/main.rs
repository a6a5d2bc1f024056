//! The integration tests of the filter's API, the guards, the stores and sealed restarts: one
//! test binary, so that the library's generic code is compiled once for all of them rather than
//! once per file. Each module is one subject; run one with its path as the filter, for
//! example `cargo test --all-features --test integration reconnect::`.
//!
//! The stress, statistical, soak and fleet tests have binaries of their own (`tests/*.rs`).

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod claim_leak;
mod faults;
mod filter_api;
mod fleet_redis;
mod guard;
mod memo;
mod memo_review;
mod reads;
mod rebuild;
mod reconnect;
mod restart;
mod sampling;
mod seal_authenticity;
mod seal_files;
mod seal_names;
mod shadow;
mod snapshot;
mod store_postgres;
mod store_redis;
mod store_sqlite;
mod tower;
