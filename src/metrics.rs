//! A guard's stats through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`), so any exporter (Prometheus, StatsD, OpenTelemetry) can publish them.
//!
//! The guard counts in its own sharded counters, which cost nothing to keep; [`record`] copies
//! a [`GuardStats`] snapshot into the installed recorder as counters (absolute values) and
//! gauges, each labelled `guard` with the name given. Call it where the exporter reads: in a
//! scrape handler before rendering, or on a timer. [`describe`] registers units and help
//! text once.
//!
//! | metric | kind | from |
//! |---|---|---|
//! | `cuckoo_guard_lookups_total` | counter | [`GuardStats::lookups`] |
//! | `cuckoo_guard_blocked_total` | counter | [`GuardStats::blocked`] |
//! | `cuckoo_guard_passed_total` | counter | [`GuardStats::passed`] |
//! | `cuckoo_guard_passed_while_warming_total` | counter | [`GuardStats::passed_while_warming`] |
//! | `cuckoo_guard_passed_failing_open_total` | counter | [`GuardStats::passed_failing_open`]: a fleet member that could not vouch for its filter |
//! | `cuckoo_guard_passed_at_ceiling_total` | counter | [`GuardStats::passed_at_ceiling`]: a filter at its memory ceiling lacks created keys |
//! | `cuckoo_guard_creates_at_ceiling_total` | counter | [`GuardStats::creates_at_ceiling`] |
//! | `cuckoo_guard_fleet_creates_applied_total` | counter | [`GuardStats::fleet_creates_applied`] |
//! | `cuckoo_guard_fleet_deletes_applied_total` | counter | [`GuardStats::fleet_deletes_applied`] |
//! | `cuckoo_guard_store_hits_total` | counter | [`GuardStats::store_hits`] |
//! | `cuckoo_guard_false_positives_total` | counter | [`GuardStats::false_positives`] |
//! | `cuckoo_guard_memo_hits_total` | counter | [`GuardStats::memo_hits`] |
//! | `cuckoo_guard_coalesced_total` | counter | [`GuardStats::coalesced`] |
//! | `cuckoo_guard_shadow_would_block_total` | counter | [`GuardStats::shadow_would_block`]: shadow lookups the filter ruled out |
//! | `cuckoo_guard_shadow_false_negatives_total` | counter | [`GuardStats::shadow_false_negatives`]: of those, the ones the store found |
//! | `cuckoo_guard_store_errors_total` | counter | [`GuardStats::store_errors`] |
//! | `cuckoo_guard_writes_total{kind}` | counter | creates, updates, deletes |
//! | `cuckoo_guard_writes_refused_total{reason}` | counter | `full`, `contended` |
//! | `cuckoo_guard_growth_steps_total` | counter | [`GuardStats::growth_steps`] |
//! | `cuckoo_guard_rebuilds_total{outcome}` | counter | `swapped`, `failed` |
//! | `cuckoo_guard_rebuilds_skipped_total` | counter | [`GuardStats::rebuilds_skipped`]: automatic rebuilds with nowhere to run |
//! | `cuckoo_guard_observed_false_positive_rate` | gauge | [`GuardStats::observed_false_positive_rate`] |
//! | `cuckoo_guard_filter_load_factor` | gauge | [`GuardStats::filter_load_factor`] |
//! | `cuckoo_guard_filter_fingerprints` | gauge | [`GuardStats::filter_len`] |
//! | `cuckoo_guard_filter_capacity` | gauge | [`GuardStats::filter_capacity`] |
//! | `cuckoo_guard_filter_memory_bytes` | gauge | [`GuardStats::filter_memory_bytes`] |
//! | `cuckoo_guard_expected_false_positive_rate` | gauge | [`GuardStats::expected_false_positive_rate`] |
//! | `cuckoo_guard_stale_copies` | gauge | [`GuardStats::stale_copies`] |
//! | `cuckoo_guard_missing_copies_total` | counter | [`GuardStats::missing_copies`]: writes that bypassed the guard |
//! | `cuckoo_guard_orphaned_writes` | gauge | [`GuardStats::orphaned_writes`] |
//! | `cuckoo_guard_memo_entries` | gauge | [`GuardStats::memo_entries`] |
//! | `cuckoo_guard_memo_slots_disabled` | gauge | [`GuardStats::memo_slots_disabled`] |
//! | `cuckoo_guard_warming` | gauge | 1 while warming up, else 0 |
//! | `cuckoo_guard_at_ceiling` | gauge | 1 while the filter lacks keys created at its memory ceiling ([`GuardStats::at_ceiling`]), else 0 |
//! | `cuckoo_guard_rebuilding` | gauge | 1 while a rebuild runs, else 0 |
//! | `cuckoo_guard_last_rebuild_seconds` | gauge | the last rebuild's duration |
//! | `cuckoo_guard_last_rebuild_keys` | gauge | the keys its scan returned |
//!
//! A shadow-mode tower layer (features `tower` and `metrics`) counts on its own, from the
//! HTTP responses rather than the store; `record_shadow` writes its `ShadowStats`, labelled
//! `guard` likewise:
//!
//! | metric | kind | from |
//! |---|---|---|
//! | `cuckoo_guard_layer_shadow_checked_total` | counter | `ShadowStats::checked` |
//! | `cuckoo_guard_layer_shadow_would_block_total` | counter | `ShadowStats::would_block` |
//! | `cuckoo_guard_layer_shadow_false_negatives_total` | counter | `ShadowStats::would_be_false_negatives` |
//! | `cuckoo_guard_layer_throttled_requests_total` | counter | `ThrottleStats::throttled_requests` |
//! | `cuckoo_guard_layer_clients_throttled_total` | counter | `ThrottleStats::clients_throttled` |
//! | `cuckoo_guard_layer_held_requests_total` | counter | `ThrottleStats::held_requests` |
//!
//! A fleet member (features `fleet` and `metrics`) counts its coordination apart from its
//! guard; `record_fleet` writes its `FleetStats`, labelled `fleet` with the fleet's name:
//!
//! | metric | kind | from |
//! |---|---|---|
//! | `cuckoo_guard_fleet_serving` | gauge | `FleetStats::serving`: 1 while the member may answer "absent", else 0 |
//! | `cuckoo_guard_fleet_creates_announced_total` | counter | `FleetStats::creates_announced` |
//! | `cuckoo_guard_fleet_creates_refused_total` | counter | `FleetStats::creates_refused` |
//! | `cuckoo_guard_fleet_creates_unannounced_total` | counter | `FleetStats::creates_unannounced` |
//! | `cuckoo_guard_fleet_barrier_wait_microseconds_total` | counter | `FleetStats::barrier_wait_micros`: creates' total wait for acknowledgements |
//! | `cuckoo_guard_fleet_deletes_announced_total` | counter | `FleetStats::deletes_announced` |
//! | `cuckoo_guard_fleet_entries_applied_total` | counter | `FleetStats::entries_applied` |
//! | `cuckoo_guard_fleet_members_expelled_total` | counter | `FleetStats::members_expelled` |
//! | `cuckoo_guard_fleet_rejoins_total` | counter | `FleetStats::rejoins` |
//! | `cuckoo_guard_fleet_rebuilds_asked_total` | counter | `FleetStats::rebuilds_asked` |
//! | `cuckoo_guard_fleet_coordinator_calls_total` | counter | `FleetStats::coordinator_calls` |
//! | `cuckoo_guard_fleet_coordinator_errors_total` | counter | `FleetStats::coordinator_errors` |
//! | `cuckoo_guard_fleet_trimmed_total` | counter | `FleetStats::trimmed` |
//! | `cuckoo_guard_fleet_sentinel_samples_total` | counter | `FleetStats::sentinel_samples` |
//! | `cuckoo_guard_fleet_sentinel_misses_total` | counter | `FleetStats::sentinel_misses`: rows written around the fleet |
//! | `cuckoo_guard_fleet_undecodable_total` | counter | `FleetStats::undecodable` |
//!
//! # Examples
//!
//! ```
//! use cuckoo_guard::guard::{CacheGuard, MemoryStore};
//! use cuckoo_guard::CuckooFilter;
//!
//! let guard = CacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
//! guard.warm_up(10, |_| {})?;
//! guard.get(&1)?;
//!
//! cuckoo_guard::metrics::describe();
//! // With no recorder installed this does nothing; with one, the exporter sees
//! // cuckoo_guard_blocked_total{guard="users"} 1.
//! cuckoo_guard::metrics::record(&guard.stats(), "users");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

use crate::guard::GuardStats;

/// Registers the unit and help text of every metric [`record`] writes (and those of
/// `record_shadow` and `record_fleet`), with the installed recorder; call it once after
/// installing one.
///
/// # Examples
///
/// ```
/// cuckoo_guard::metrics::describe();
/// ```
pub fn describe() {
    describe_counter!(
        "cuckoo_guard_lookups_total",
        Unit::Count,
        "Lookups made through the guard."
    );
    describe_counter!(
        "cuckoo_guard_blocked_total",
        Unit::Count,
        "Lookups the filter answered absent without the store."
    );
    describe_counter!(
        "cuckoo_guard_passed_total",
        Unit::Count,
        "Lookups sent on to the store (filter said maybe, or warming up)."
    );
    describe_counter!(
        "cuckoo_guard_passed_while_warming_total",
        Unit::Count,
        "Lookups sent to the store because the warm-up had not finished."
    );
    describe_counter!(
        "cuckoo_guard_passed_failing_open_total",
        Unit::Count,
        "Lookups sent to the store because the guard's fleet membership could not vouch for its filter."
    );
    describe_counter!(
        "cuckoo_guard_passed_at_ceiling_total",
        Unit::Count,
        "Lookups the filter ruled out but sent to the store: at its memory ceiling it lacks created keys."
    );
    describe_counter!(
        "cuckoo_guard_creates_at_ceiling_total",
        Unit::Count,
        "Creates taken with no copy in a filter at its memory ceiling."
    );
    describe_counter!(
        "cuckoo_guard_fleet_creates_applied_total",
        Unit::Count,
        "Creates other fleet members announced, applied to this guard's filters."
    );
    describe_counter!(
        "cuckoo_guard_fleet_deletes_applied_total",
        Unit::Count,
        "Deletes other fleet members announced, applied to this guard's filters."
    );
    describe_counter!(
        "cuckoo_guard_store_hits_total",
        Unit::Count,
        "Lookups the store answered with a value."
    );
    describe_counter!(
        "cuckoo_guard_false_positives_total",
        Unit::Count,
        "Lookups the filter passed and the store found absent."
    );
    describe_counter!(
        "cuckoo_guard_memo_hits_total",
        Unit::Count,
        "Lookups the filter passed that the false-positive memo answered absent without the store."
    );
    describe_counter!(
        "cuckoo_guard_coalesced_total",
        Unit::Count,
        "Lookups the filter passed that took the answer of a concurrent store read of their key."
    );
    describe_counter!(
        "cuckoo_guard_shadow_would_block_total",
        Unit::Count,
        "Shadow lookups the filter ruled out; they went to the store."
    );
    describe_counter!(
        "cuckoo_guard_shadow_false_negatives_total",
        Unit::Count,
        "Shadow lookups the filter ruled out that the store found: would-be false negatives."
    );
    describe_counter!(
        "cuckoo_guard_layer_shadow_checked_total",
        Unit::Count,
        "Requests a shadow-mode layer asked the filter about."
    );
    describe_counter!(
        "cuckoo_guard_layer_shadow_would_block_total",
        Unit::Count,
        "Requests a shadow-mode layer would have blocked; the service answered them."
    );
    describe_counter!(
        "cuckoo_guard_layer_shadow_false_negatives_total",
        Unit::Count,
        "Requests a shadow-mode layer would have blocked that the service answered 2xx."
    );
    describe_counter!(
        "cuckoo_guard_layer_throttled_requests_total",
        Unit::Count,
        "Requests a layer's throttle answered 429 because their client was in its cool-down."
    );
    describe_counter!(
        "cuckoo_guard_layer_clients_throttled_total",
        Unit::Count,
        "Times a client's blocked share passed the throttle's threshold and began a cool-down."
    );
    describe_gauge!(
        "cuckoo_guard_fleet_serving",
        "1 while the fleet member may answer absent (in service, its deadline ahead), else 0."
    );
    describe_counter!(
        "cuckoo_guard_fleet_creates_announced_total",
        Unit::Count,
        "Creates this fleet member announced."
    );
    describe_counter!(
        "cuckoo_guard_fleet_creates_refused_total",
        Unit::Count,
        "Creates refused: the coordinator was down, or acknowledgements did not arrive in time."
    );
    describe_counter!(
        "cuckoo_guard_fleet_creates_unannounced_total",
        Unit::Count,
        "Creates written without an announcement (coordinator down, policy Proceed), announced later."
    );
    describe_counter!(
        "cuckoo_guard_fleet_barrier_wait_microseconds_total",
        Unit::Microseconds,
        "Total time creates waited for the other members' acknowledgements."
    );
    describe_counter!(
        "cuckoo_guard_fleet_deletes_announced_total",
        Unit::Count,
        "Deletes this fleet member announced."
    );
    describe_counter!(
        "cuckoo_guard_fleet_entries_applied_total",
        Unit::Count,
        "Log entries of other members applied to this member's filter."
    );
    describe_counter!(
        "cuckoo_guard_fleet_members_expelled_total",
        Unit::Count,
        "Members a create of this member stopped waiting for because they were gone."
    );
    describe_counter!(
        "cuckoo_guard_fleet_rejoins_total",
        Unit::Count,
        "Registrations of this member after its first."
    );
    describe_counter!(
        "cuckoo_guard_fleet_rebuilds_asked_total",
        Unit::Count,
        "Rebuilds this member asked for (a rejoin that could not catch up, a failed apply, a sentinel miss)."
    );
    describe_counter!(
        "cuckoo_guard_fleet_coordinator_calls_total",
        Unit::Count,
        "Coordinator calls this member made."
    );
    describe_counter!(
        "cuckoo_guard_fleet_coordinator_errors_total",
        Unit::Count,
        "Coordinator calls of this member that failed."
    );
    describe_counter!(
        "cuckoo_guard_fleet_trimmed_total",
        Unit::Count,
        "Log entries this member trimmed."
    );
    describe_counter!(
        "cuckoo_guard_fleet_sentinel_samples_total",
        Unit::Count,
        "Rows the drift sentinel read from the store and checked against the filter."
    );
    describe_counter!(
        "cuckoo_guard_fleet_sentinel_misses_total",
        Unit::Count,
        "Rows the store holds that the filter missed: written around the fleet."
    );
    describe_counter!(
        "cuckoo_guard_fleet_undecodable_total",
        Unit::Count,
        "Keys in the log or the in-flight set that did not decode as this guard's key type."
    );
    describe_gauge!(
        "cuckoo_guard_memo_entries",
        Unit::Count,
        "Slots of the false-positive memo."
    );
    describe_gauge!(
        "cuckoo_guard_memo_slots_disabled",
        Unit::Count,
        "Memo slots a write of unknown outcome disabled."
    );
    describe_counter!(
        "cuckoo_guard_store_errors_total",
        Unit::Count,
        "Store calls that failed."
    );
    describe_counter!(
        "cuckoo_guard_writes_total",
        Unit::Count,
        "Writes through the guard, by kind (create, update, delete)."
    );
    describe_counter!(
        "cuckoo_guard_writes_refused_total",
        Unit::Count,
        "Writes refused before the store, by reason (full, contended)."
    );
    describe_counter!(
        "cuckoo_guard_growth_steps_total",
        Unit::Count,
        "Tables the guard's filters added because a create found no room."
    );
    describe_counter!(
        "cuckoo_guard_rebuilds_total",
        Unit::Count,
        "Rebuilds of the filter from the store, by outcome (swapped, failed)."
    );
    describe_counter!(
        "cuckoo_guard_rebuilds_skipped_total",
        Unit::Count,
        "Automatic rebuilds the policy asked for that had nowhere to run (no driver, no runtime)."
    );
    describe_gauge!(
        "cuckoo_guard_observed_false_positive_rate",
        "False positives (store reads and memo hits) over those plus blocked lookups."
    );
    describe_gauge!(
        "cuckoo_guard_expected_false_positive_rate",
        "The false-positive rate the filter's width gives at its current load."
    );
    describe_counter!(
        "cuckoo_guard_missing_copies_total",
        Unit::Count,
        "Removals that found no copy: a sign of writes that bypassed the guard."
    );
    describe_gauge!(
        "cuckoo_guard_filter_load_factor",
        "Fingerprints over fingerprint slots."
    );
    describe_gauge!(
        "cuckoo_guard_filter_fingerprints",
        Unit::Count,
        "Fingerprints in the filter (keys plus stale copies)."
    );
    describe_gauge!(
        "cuckoo_guard_filter_capacity",
        Unit::Count,
        "Fingerprint slots in the filter."
    );
    describe_gauge!(
        "cuckoo_guard_filter_memory_bytes",
        Unit::Bytes,
        "Heap bytes of the filter."
    );
    describe_gauge!(
        "cuckoo_guard_stale_copies",
        Unit::Count,
        "Filter copies kept though their key may be gone (false positives, never negatives)."
    );
    describe_gauge!(
        "cuckoo_guard_orphaned_writes",
        Unit::Count,
        "Writes with unknown outcome, inserted into every rebuild."
    );
    describe_gauge!(
        "cuckoo_guard_warming",
        "1 while the guard warms up and passes every lookup to the store."
    );
    describe_gauge!(
        "cuckoo_guard_at_ceiling",
        "1 while the filter lacks keys created at its memory ceiling and passes what it misses to the store."
    );
    describe_gauge!("cuckoo_guard_rebuilding", "1 while a rebuild runs.");
    describe_gauge!(
        "cuckoo_guard_last_rebuild_seconds",
        Unit::Seconds,
        "Duration of the last finished rebuild."
    );
    describe_gauge!(
        "cuckoo_guard_last_rebuild_keys",
        Unit::Count,
        "Keys the last finished rebuild's scan returned."
    );
}

/// Writes `stats` into the installed recorder, labelled `guard = name`: see the
/// [module](self) for the metrics.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::{AsyncCacheGuard, MemoryStore};
/// use cuckoo_guard::CuckooFilter;
///
/// let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(100), MemoryStore::<u8, u8>::new());
/// cuckoo_guard::metrics::record(&guard.stats(), "sessions");
/// ```
pub fn record(stats: &GuardStats, name: &str) {
    let guard = name.to_owned();
    let counters = [
        ("cuckoo_guard_lookups_total", stats.lookups),
        ("cuckoo_guard_blocked_total", stats.blocked),
        ("cuckoo_guard_passed_total", stats.passed),
        (
            "cuckoo_guard_passed_while_warming_total",
            stats.passed_while_warming,
        ),
        (
            "cuckoo_guard_passed_failing_open_total",
            stats.passed_failing_open,
        ),
        (
            "cuckoo_guard_passed_at_ceiling_total",
            stats.passed_at_ceiling,
        ),
        (
            "cuckoo_guard_creates_at_ceiling_total",
            stats.creates_at_ceiling,
        ),
        (
            "cuckoo_guard_fleet_creates_applied_total",
            stats.fleet_creates_applied,
        ),
        (
            "cuckoo_guard_fleet_deletes_applied_total",
            stats.fleet_deletes_applied,
        ),
        ("cuckoo_guard_store_hits_total", stats.store_hits),
        ("cuckoo_guard_false_positives_total", stats.false_positives),
        ("cuckoo_guard_memo_hits_total", stats.memo_hits),
        ("cuckoo_guard_coalesced_total", stats.coalesced),
        (
            "cuckoo_guard_shadow_would_block_total",
            stats.shadow_would_block,
        ),
        (
            "cuckoo_guard_shadow_false_negatives_total",
            stats.shadow_false_negatives,
        ),
        ("cuckoo_guard_store_errors_total", stats.store_errors),
        ("cuckoo_guard_growth_steps_total", stats.growth_steps),
        ("cuckoo_guard_missing_copies_total", stats.missing_copies),
        (
            "cuckoo_guard_rebuilds_skipped_total",
            stats.rebuilds_skipped,
        ),
    ];
    for (metric, value) in counters {
        counter!(metric, "guard" => guard.clone()).absolute(value);
    }
    for (kind, value) in [
        ("create", stats.creates),
        ("update", stats.updates),
        ("delete", stats.deletes),
    ] {
        counter!("cuckoo_guard_writes_total", "guard" => guard.clone(), "kind" => kind)
            .absolute(value);
    }
    for (reason, value) in [
        ("full", stats.writes_refused),
        ("contended", stats.writes_contended),
    ] {
        counter!("cuckoo_guard_writes_refused_total", "guard" => guard.clone(), "reason" => reason)
            .absolute(value);
    }
    for (outcome, value) in [
        ("swapped", stats.rebuilds),
        ("failed", stats.rebuilds_failed),
    ] {
        counter!("cuckoo_guard_rebuilds_total", "guard" => guard.clone(), "outcome" => outcome)
            .absolute(value);
    }
    let (last_seconds, last_keys) = stats.last_rebuild.as_ref().map_or((0.0, 0.0), |report| {
        (report.duration.as_secs_f64(), report.keys_scanned as f64)
    });
    let gauges = [
        (
            "cuckoo_guard_observed_false_positive_rate",
            stats.observed_false_positive_rate,
        ),
        (
            "cuckoo_guard_expected_false_positive_rate",
            stats.expected_false_positive_rate,
        ),
        ("cuckoo_guard_filter_load_factor", stats.filter_load_factor),
        ("cuckoo_guard_filter_fingerprints", stats.filter_len as f64),
        ("cuckoo_guard_filter_capacity", stats.filter_capacity as f64),
        (
            "cuckoo_guard_filter_memory_bytes",
            stats.filter_memory_bytes as f64,
        ),
        ("cuckoo_guard_stale_copies", stats.stale_copies as f64),
        ("cuckoo_guard_orphaned_writes", stats.orphaned_writes as f64),
        ("cuckoo_guard_memo_entries", stats.memo_entries as f64),
        (
            "cuckoo_guard_memo_slots_disabled",
            stats.memo_slots_disabled as f64,
        ),
        ("cuckoo_guard_warming", f64::from(u8::from(stats.warming))),
        (
            "cuckoo_guard_at_ceiling",
            f64::from(u8::from(stats.at_ceiling)),
        ),
        (
            "cuckoo_guard_rebuilding",
            f64::from(u8::from(stats.rebuilding)),
        ),
        ("cuckoo_guard_last_rebuild_seconds", last_seconds),
        ("cuckoo_guard_last_rebuild_keys", last_keys),
    ];
    for (metric, value) in gauges {
        gauge!(metric, "guard" => guard.clone()).set(value);
    }
}

/// Writes a shadow-mode layer's counters into the installed recorder, labelled
/// `guard = name` (features `tower` and `metrics`): see the [module](self) for the metrics.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use cuckoo_guard::tower::{key, GuardLayer};
/// use cuckoo_guard::CuckooFilter;
///
/// let shadow = GuardLayer::new(Arc::new(CuckooFilter::with_capacity(100)), key::path_segment::<u64>(1)).shadow();
/// // In the scrape handler, beside `record(&guard.stats(), "users")`:
/// cuckoo_guard::metrics::record_shadow(&shadow.stats(), "users");
/// ```
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub fn record_shadow(stats: &crate::tower::ShadowStats, name: &str) {
    for (metric, value) in [
        ("cuckoo_guard_layer_shadow_checked_total", stats.checked),
        (
            "cuckoo_guard_layer_shadow_would_block_total",
            stats.would_block,
        ),
        (
            "cuckoo_guard_layer_shadow_false_negatives_total",
            stats.would_be_false_negatives,
        ),
    ] {
        counter!(metric, "guard" => name.to_owned()).absolute(value);
    }
}

/// Writes a layer's throttle counters into the installed recorder, labelled `guard = name`
/// (features `tower` and `metrics`): see the [module](self) for the metrics.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::tower::{key, throttle::Throttle};
///
/// let throttle = Throttle::new(key::header::<String>("x-api-key"));
/// // In the scrape handler, beside `record(&guard.stats(), "users")`:
/// cuckoo_guard::metrics::record_throttle(&throttle.stats(), "users");
/// ```
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub fn record_throttle(stats: &crate::tower::throttle::ThrottleStats, name: &str) {
    for (metric, value) in [
        (
            "cuckoo_guard_layer_throttled_requests_total",
            stats.throttled_requests,
        ),
        (
            "cuckoo_guard_layer_clients_throttled_total",
            stats.clients_throttled,
        ),
        (
            "cuckoo_guard_layer_held_requests_total",
            stats.held_requests,
        ),
    ] {
        counter!(metric, "guard" => name.to_owned()).absolute(value);
    }
}

/// Writes a fleet member's counters into the installed recorder, labelled `fleet = name`
/// (features `fleet` and `metrics`): see the [module](self) for the metrics. Pass the
/// fleet's name, the one its [`FleetConfig`](crate::fleet::FleetConfig) was made with.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::fleet::FleetStats;
///
/// // In the scrape handler, beside `record(&guard.stats(), "users")`, with the member
/// // `Fleet::join` returned: `record_fleet(&fleet.stats(), "users")`.
/// let stats = FleetStats::default();
/// cuckoo_guard::metrics::record_fleet(&stats, "users");
/// ```
#[cfg(feature = "fleet")]
#[cfg_attr(docsrs, doc(cfg(feature = "fleet")))]
pub fn record_fleet(stats: &crate::fleet::FleetStats, name: &str) {
    let fleet = name.to_owned();
    gauge!("cuckoo_guard_fleet_serving", "fleet" => fleet.clone())
        .set(f64::from(u8::from(stats.serving)));
    let counters = [
        (
            "cuckoo_guard_fleet_creates_announced_total",
            stats.creates_announced,
        ),
        (
            "cuckoo_guard_fleet_creates_refused_total",
            stats.creates_refused,
        ),
        (
            "cuckoo_guard_fleet_creates_unannounced_total",
            stats.creates_unannounced,
        ),
        (
            "cuckoo_guard_fleet_barrier_wait_microseconds_total",
            stats.barrier_wait_micros,
        ),
        (
            "cuckoo_guard_fleet_deletes_announced_total",
            stats.deletes_announced,
        ),
        (
            "cuckoo_guard_fleet_entries_applied_total",
            stats.entries_applied,
        ),
        (
            "cuckoo_guard_fleet_members_expelled_total",
            stats.members_expelled,
        ),
        ("cuckoo_guard_fleet_rejoins_total", stats.rejoins),
        (
            "cuckoo_guard_fleet_rebuilds_asked_total",
            stats.rebuilds_asked,
        ),
        (
            "cuckoo_guard_fleet_coordinator_calls_total",
            stats.coordinator_calls,
        ),
        (
            "cuckoo_guard_fleet_coordinator_errors_total",
            stats.coordinator_errors,
        ),
        ("cuckoo_guard_fleet_trimmed_total", stats.trimmed),
        (
            "cuckoo_guard_fleet_sentinel_samples_total",
            stats.sentinel_samples,
        ),
        (
            "cuckoo_guard_fleet_sentinel_misses_total",
            stats.sentinel_misses,
        ),
        ("cuckoo_guard_fleet_undecodable_total", stats.undecodable),
    ];
    for (metric, value) in counters {
        counter!(metric, "fleet" => fleet.clone()).absolute(value);
    }
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::MetricKind;

    use super::*;
    use crate::guard::{CacheGuard, MemoryStore};
    use crate::CuckooFilter;

    #[test]
    fn record_writes_the_stats_labelled_with_the_guard() {
        let store = MemoryStore::from_rows((0..10u32).map(|k| (k, ())));
        let guard = CacheGuard::new(CuckooFilter::with_capacity(100), store);
        guard.warm_up(100, |_| {}).unwrap();
        for key in 0..20 {
            guard.get(&key).unwrap();
        }
        guard.put(&100, &()).unwrap();
        let stats = guard.stats();

        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || record(&stats, "users"));
        let values: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| (key, value))
            .collect();
        let find = |kind: MetricKind, name: &str, labels: &[(&str, &str)]| {
            let found: Vec<_> = values
                .iter()
                .filter(|(key, _)| {
                    key.kind() == kind
                        && key.key().name() == name
                        && key.key().labels().count() == labels.len() + 1
                        && key
                            .key()
                            .labels()
                            .any(|l| l.key() == "guard" && l.value() == "users")
                        && labels.iter().all(|(k, v)| {
                            key.key().labels().any(|l| l.key() == *k && l.value() == *v)
                        })
                })
                .collect();
            assert_eq!(found.len(), 1, "{name} {labels:?}");
            &found[0].1
        };
        assert_eq!(
            find(MetricKind::Counter, "cuckoo_guard_lookups_total", &[]),
            &DebugValue::Counter(20)
        );
        assert_eq!(
            find(MetricKind::Counter, "cuckoo_guard_blocked_total", &[]),
            &DebugValue::Counter(stats.blocked)
        );
        assert!(stats.blocked >= 9, "{stats:?}");
        assert_eq!(
            find(
                MetricKind::Counter,
                "cuckoo_guard_writes_total",
                &[("kind", "create")]
            ),
            &DebugValue::Counter(1)
        );
        assert_eq!(
            find(MetricKind::Gauge, "cuckoo_guard_filter_fingerprints", &[]),
            &DebugValue::Gauge(11.0.into())
        );
        assert_eq!(
            find(MetricKind::Gauge, "cuckoo_guard_warming", &[]),
            &DebugValue::Gauge(0.0.into())
        );
        assert_eq!(
            find(MetricKind::Counter, "cuckoo_guard_memo_hits_total", &[]),
            &DebugValue::Counter(stats.memo_hits)
        );
        assert_eq!(
            find(
                MetricKind::Counter,
                "cuckoo_guard_rebuilds_skipped_total",
                &[]
            ),
            &DebugValue::Counter(stats.rebuilds_skipped)
        );
        assert_eq!(
            find(
                MetricKind::Counter,
                "cuckoo_guard_passed_failing_open_total",
                &[]
            ),
            &DebugValue::Counter(stats.passed_failing_open)
        );
        assert_eq!(
            find(MetricKind::Gauge, "cuckoo_guard_memo_entries", &[]),
            &DebugValue::Gauge(1024.0.into())
        );
    }

    /// The counters `record` (and, with the layer, `record_shadow`) wrote, by name.
    fn counters(record: impl FnOnce()) -> Vec<(String, u64)> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, record);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, _, value)| match value {
                DebugValue::Counter(n) if key.kind() == MetricKind::Counter => {
                    assert!(key
                        .key()
                        .labels()
                        .any(|l| l.key() == "guard" && l.value() == "shadowed"));
                    Some((key.key().name().to_owned(), n))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn record_writes_the_shadow_counters() {
        use crate::guard::Store;

        let guard = CacheGuard::new(
            CuckooFilter::with_capacity(100),
            MemoryStore::<u32, ()>::new(),
        );
        guard.warm_up(100, |_| {}).unwrap();
        guard.store().put(&1, &()).unwrap();
        assert_eq!(guard.shadow_get(&1).unwrap(), Some(()));
        assert_eq!(guard.shadow_get(&2).unwrap(), None);
        let stats = guard.stats();
        let written = counters(|| record(&stats, "shadowed"));
        let value = |name: &str| {
            written
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("{name} not written"))
                .1
        };
        assert_eq!(value("cuckoo_guard_shadow_would_block_total"), 2);
        assert_eq!(value("cuckoo_guard_shadow_false_negatives_total"), 1);
        assert_eq!(value("cuckoo_guard_blocked_total"), 0);
        assert_eq!(value("cuckoo_guard_lookups_total"), 2);
    }

    #[cfg(feature = "tower")]
    #[test]
    fn record_shadow_writes_the_layer_counters() {
        use std::sync::Arc;

        use tower::{service_fn, Layer, ServiceExt};

        use crate::tower::{key, GuardLayer};

        let filter = Arc::new(CuckooFilter::with_capacity(100));
        filter.insert(&1u64).unwrap();
        // The filter's own false positives (a random hasher) pass: expect what it rules out.
        let ruled_out = |key: u64| u64::from(!filter.contains(&key));
        let (would_block, false_negatives) = (ruled_out(2) + ruled_out(3), ruled_out(2));
        let shadow = GuardLayer::new(Arc::clone(&filter), key::path_segment::<u64>(0)).shadow();
        let service = shadow.layer(service_fn(|request: http::Request<()>| async move {
            let mut response = http::Response::new(());
            if request.uri().path() == "/3" {
                *response.status_mut() = http::StatusCode::NOT_FOUND;
            }
            Ok::<_, std::convert::Infallible>(response)
        }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for path in ["/1", "/2", "/3", "/none"] {
            let request = http::Request::get(path).body(()).unwrap();
            runtime.block_on(service.clone().oneshot(request)).unwrap();
        }
        let written = counters(|| record_shadow(&shadow.stats(), "shadowed"));
        let mut written: Vec<_> = written.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        written.sort_unstable();
        assert_eq!(
            written,
            [
                ("cuckoo_guard_layer_shadow_checked_total", 3),
                (
                    "cuckoo_guard_layer_shadow_false_negatives_total",
                    false_negatives
                ),
                ("cuckoo_guard_layer_shadow_would_block_total", would_block),
            ]
        );
    }

    #[cfg(feature = "fleet")]
    #[test]
    fn record_fleet_writes_the_members_counters_labelled_with_the_fleet() {
        use crate::fleet::FleetStats;

        /// `expected` in the shape the snapshot's values are compared in.
        fn by_ref(
            expected: &[(MetricKind, String, DebugValue)],
        ) -> Vec<(MetricKind, String, &DebugValue)> {
            expected
                .iter()
                .map(|(k, n, v)| (*k, n.clone(), v))
                .collect()
        }

        // Each counter a distinct value, so a name paired with the wrong field shows.
        let stats = FleetStats {
            serving: true,
            creates_announced: 1,
            creates_refused: 2,
            creates_unannounced: 3,
            barrier_wait_micros: 4,
            deletes_announced: 5,
            entries_applied: 6,
            members_expelled: 7,
            rejoins: 8,
            rebuilds_asked: 9,
            coordinator_calls: 10,
            coordinator_errors: 11,
            trimmed: 12,
            sentinel_samples: 13,
            sentinel_misses: 14,
            undecodable: 15,
            ..FleetStats::default()
        };
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            record_fleet(&stats, "users");
            record_fleet(
                &FleetStats {
                    serving: false,
                    ..stats.clone()
                },
                "sessions",
            );
        });
        // One snapshot: taking one resets the debugging recorder's counters.
        let snapshot = snapshotter.snapshot().into_vec();
        let labelled = |fleet: &str| {
            let mut written: Vec<_> = snapshot
                .iter()
                .filter(|(key, _, _, _)| {
                    let labels: Vec<_> = key.key().labels().collect();
                    assert_eq!(labels.len(), 1, "{key:?}");
                    assert_eq!(labels[0].key(), "fleet");
                    labels[0].value() == fleet
                })
                .map(|(key, _, _, value)| (key.kind(), key.key().name().to_owned(), value))
                .collect();
            written.sort_unstable_by(|a, b| a.1.cmp(&b.1));
            written
        };
        let counter = |name: &str, n| {
            (
                MetricKind::Counter,
                format!("cuckoo_guard_fleet_{name}_total"),
                DebugValue::Counter(n),
            )
        };
        let mut expected = vec![
            counter("creates_announced", 1),
            counter("creates_refused", 2),
            counter("creates_unannounced", 3),
            counter("barrier_wait_microseconds", 4),
            counter("deletes_announced", 5),
            counter("entries_applied", 6),
            counter("members_expelled", 7),
            counter("rejoins", 8),
            counter("rebuilds_asked", 9),
            counter("coordinator_calls", 10),
            counter("coordinator_errors", 11),
            counter("trimmed", 12),
            counter("sentinel_samples", 13),
            counter("sentinel_misses", 14),
            counter("undecodable", 15),
            (
                MetricKind::Gauge,
                "cuckoo_guard_fleet_serving".to_owned(),
                DebugValue::Gauge(1.0.into()),
            ),
        ];
        expected.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(labelled("users"), by_ref(&expected));
        // The other fleet's series are its own: the same counters, not serving.
        for (kind, _, value) in &mut expected {
            if *kind == MetricKind::Gauge {
                *value = DebugValue::Gauge(0.0.into());
            }
        }
        assert_eq!(labelled("sessions"), by_ref(&expected));
    }
}
