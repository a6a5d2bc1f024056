//! The drill's report, as a table for people and as JSON for scripts.

use std::fmt::Write as _;

use serde_json::{json, Value};

/// How the drill was set up.
#[derive(Debug)]
pub(crate) struct Setup {
    pub(crate) db: String,
    pub(crate) kind: &'static str,
    pub(crate) table: String,
    pub(crate) rows: u64,
    /// The table already held the drill's rows.
    pub(crate) reused: bool,
    pub(crate) load_secs: f64,
    pub(crate) warm_secs: f64,
    pub(crate) threads: usize,
    pub(crate) phase_secs: f64,
    /// `--fpr`: the rate asked for (the filter picks the narrowest width that meets it).
    pub(crate) requested_fpr: f64,
    /// `--headroom`: filter capacity as a multiple of the rows.
    pub(crate) headroom: f64,
    pub(crate) attack_share: f64,
    pub(crate) zipf: f64,
    pub(crate) seed: u64,
}

/// The guard's filter after the drill.
#[derive(Debug)]
pub(crate) struct Filter {
    pub(crate) capacity: usize,
    pub(crate) fingerprint_bits: u32,
    pub(crate) len: usize,
    pub(crate) load_factor: f64,
    pub(crate) memory_bytes: usize,
    pub(crate) configured_fpr: f64,
    pub(crate) expected_fpr: f64,
}

/// One phase of traffic.
#[derive(Debug)]
pub(crate) struct Phase {
    pub(crate) requests: u64,
    pub(crate) legit: u64,
    pub(crate) attack: u64,
    pub(crate) secs: f64,
    pub(crate) requests_per_sec: f64,
    /// Lookups that reached the database.
    pub(crate) db_queries: u64,
    /// Of those, lookups of attack keys.
    pub(crate) attack_queries: u64,
    /// Lookups the guard answered without the database.
    pub(crate) blocked: u64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

/// The check of the guard's "absent" answers against the database.
#[derive(Debug)]
pub(crate) struct Verification {
    /// Distinct legitimate keys the guard answered absent, each re-queried.
    pub(crate) legit_absent_checked: u64,
    /// "Absent" answers for legitimate keys beyond those kept for re-querying (each fails the
    /// drill: it was not checked).
    pub(crate) legit_absent_unchecked: u64,
    /// Keys `1..=N` whose presence in the filter was checked after the traffic (all rows).
    pub(crate) sweep_checked: u64,
    /// Of those, keys the filter reported absent: false negatives the traffic may not have
    /// asked for. Must be 0.
    pub(crate) sweep_false_negatives: u64,
    /// Attack keys the guard answered absent, re-queried (a sample).
    pub(crate) absent_sample_checked: u64,
    /// Keys the guard answered absent that the database has. Must be 0.
    pub(crate) false_negatives: u64,
    /// Legitimate keys the database itself no longer had.
    pub(crate) rows_missing: u64,
    /// Attack keys the database had (the drill's table was changed underneath it).
    pub(crate) attack_keys_present: u64,
    /// Store calls of the checks after the traffic (re-queries, deletes of created rows)
    /// that failed three times; each leaves something unchecked, so the drill fails.
    pub(crate) check_errors: u64,
    /// The first of them.
    pub(crate) first_check_error: Option<String>,
}

impl Verification {
    /// Counts a failed check, keeping the first message.
    pub(crate) fn check_error(&mut self, error: String) {
        self.check_errors += 1;
        self.first_check_error.get_or_insert(error);
    }
}

/// The rows the traffic created (`--write-share`), and how the filter kept up.
#[derive(Debug)]
pub(crate) struct Writes {
    pub(crate) share: f64,
    /// Rows created through the guard (both phases).
    pub(crate) creates: u64,
    /// Creates the guard refused (no room, or contention). Must be 0.
    pub(crate) refused: u64,
    /// Tables the filter added over the run.
    pub(crate) growth_steps: u64,
    pub(crate) rebuilds: u64,
    pub(crate) rebuilds_failed: u64,
    pub(crate) last_rebuild_secs: Option<f64>,
    pub(crate) last_rebuild_keys: Option<u64>,
    /// The filter's starting capacity in keys.
    pub(crate) initial_capacity: u64,
}

/// `--restart`: the guard's time to ready without a snapshot, from a sealed one, and after a
/// write cleared the seal.
#[derive(Debug)]
pub(crate) struct Restarts {
    /// The snapshot file.
    pub(crate) snapshot: String,
    /// The cold warm-up: time to ready without a snapshot.
    pub(crate) cold_secs: f64,
    pub(crate) snapshot_bytes: u64,
    /// Fingerprints in the snapshot.
    pub(crate) snapshot_keys: u64,
    /// Writing the snapshot and its seal.
    pub(crate) seal_secs: f64,
    /// Opening a new store and restoring the guard from the sealed snapshot.
    pub(crate) restore_secs: f64,
    /// Of that, opening the store.
    pub(crate) open_secs: f64,
    /// The restore trusted the snapshot. Must be true.
    pub(crate) trusted: bool,
    /// The restored guard was not warming. Must be true.
    pub(crate) ready_at_once: bool,
    /// How the restore started the guard.
    pub(crate) reason: String,
    /// After a write cleared the seal: building a filter, opening a store, restoring,
    /// warming up.
    pub(crate) cleared_secs: f64,
    /// Of those, opening the store and restoring.
    pub(crate) cleared_restore_secs: f64,
    /// That restore fell back because the store held no seal. Must be true.
    pub(crate) cleared_no_seal: bool,
    pub(crate) cleared_reason: String,
}

impl Restarts {
    /// The cold warm-up's time over the restore's.
    pub(crate) fn speedup(&self) -> Option<f64> {
        (self.restore_secs > 0.0).then(|| self.cold_secs / self.restore_secs)
    }
}

/// `--instances`: one instance of the fleet after the drill.
#[derive(Debug)]
pub(crate) struct Instance {
    /// Whether it answered "absent" at the end (else its lookups went to the store).
    pub(crate) serving: bool,
    /// Creates it made and announced.
    pub(crate) creates_announced: u64,
    /// Creates of the other instances it applied to its filter.
    pub(crate) creates_applied: u64,
    /// Log entries (creates and deletes) of the other instances it applied.
    pub(crate) entries_applied: u64,
    /// Lookups it passed to the store because it could not vouch for its filter.
    pub(crate) failing_open: u64,
    pub(crate) rejoins: u64,
    pub(crate) coordinator_errors: u64,
}

/// `--instances`: the fleet of guards, its creates and its cross-instance reads.
#[derive(Debug)]
pub(crate) struct FleetReport {
    /// The fleet's name (unique to the run).
    pub(crate) name: String,
    /// The coordinating Redis, without its password.
    pub(crate) redis: String,
    pub(crate) lease_secs: f64,
    /// Joining every instance (their warm-ups) and waiting until all serve.
    pub(crate) join_secs: f64,
    /// The fleet's first create, before the traffic: it waits out a new fleet's hold.
    pub(crate) hold_secs: f64,
    /// Rows created by the traffic (both phases), and their latency.
    pub(crate) creates: u64,
    pub(crate) create_p50_us: f64,
    pub(crate) create_p99_us: f64,
    pub(crate) create_mean_us: f64,
    /// Time the creates waited for the other instances' acknowledgements, in total.
    pub(crate) barrier_wait_micros: u64,
    /// Lookups on one instance of a key whose create on another had returned.
    pub(crate) cross_reads: u64,
    /// Of those, answered "absent". Must be 0.
    pub(crate) cross_false_negatives: u64,
    /// The first such key.
    pub(crate) first_cross_false_negative: Option<i64>,
    /// Coordinator calls of all instances during the phase with the guard, and the lookups
    /// of that phase.
    pub(crate) redis_calls: u64,
    pub(crate) lookups: u64,
    pub(crate) instances: Vec<Instance>,
}

impl FleetReport {
    /// The mean barrier wait per create, in microseconds.
    pub(crate) fn barrier_per_create_us(&self) -> Option<f64> {
        (self.creates > 0).then(|| self.barrier_wait_micros as f64 / self.creates as f64)
    }

    /// Coordinator calls per lookup during the phase with the guard (lookups make none; the
    /// calls are the renewals, the log reads and the creates' announcements).
    pub(crate) fn redis_calls_per_lookup(&self) -> Option<f64> {
        (self.lookups > 0).then(|| self.redis_calls as f64 / self.lookups as f64)
    }

    /// Lookups every instance passed to the store while it could not vouch for its filter.
    pub(crate) fn failing_open(&self) -> u64 {
        self.instances.iter().map(|i| i.failing_open).sum()
    }
}

/// Everything the drill measured.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) setup: Setup,
    pub(crate) filter: Filter,
    pub(crate) direct: Phase,
    pub(crate) guarded: Phase,
    pub(crate) verification: Verification,
    pub(crate) writes: Option<Writes>,
    pub(crate) restarts: Option<Restarts>,
    pub(crate) fleet: Option<FleetReport>,
}

impl Report {
    /// Share of the attack's database queries the guard removed.
    pub(crate) fn attack_queries_cut(&self) -> Option<f64> {
        cut(
            self.direct.attack_queries,
            self.direct.attack,
            self.guarded.attack_queries,
            self.guarded.attack,
        )
    }

    /// Share of all database queries per request the guard removed.
    pub(crate) fn db_queries_cut(&self) -> Option<f64> {
        cut(
            self.direct.db_queries,
            self.direct.requests,
            self.guarded.db_queries,
            self.guarded.requests,
        )
    }

    /// `false_positives / attack keys looked up`: every attack key is absent.
    pub(crate) fn observed_fpr(&self) -> Option<f64> {
        (self.guarded.attack > 0)
            .then(|| self.guarded.attack_queries as f64 / self.guarded.attack as f64)
    }

    /// Why the drill failed, if it did: false negatives, rows gone, store errors.
    pub(crate) fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        let v = &self.verification;
        if v.false_negatives > 0 {
            failures.push(format!(
                "{} false negatives: the guard answered \"absent\" for keys the database has",
                v.false_negatives
            ));
        }
        if v.sweep_false_negatives > 0 {
            failures.push(format!(
                "{} false negatives in the sweep: rows of the table the filter reports absent",
                v.sweep_false_negatives
            ));
        }
        if v.legit_absent_unchecked > 0 {
            failures.push(format!(
                "{} \"absent\" answers for existing keys were too many to re-check",
                v.legit_absent_unchecked
            ));
        }
        if v.rows_missing > 0 || v.attack_keys_present > 0 {
            failures.push(format!(
                "the drill's table changed underneath it ({} rows missing, {} attack keys present)",
                v.rows_missing, v.attack_keys_present
            ));
        }
        if let Some(w) = &self.writes {
            if w.refused > 0 {
                failures.push(format!("{} creates refused by the guard", w.refused));
            }
        }
        if let Some(r) = &self.restarts {
            if !r.trusted {
                failures.push(format!(
                    "the restart did not trust the sealed snapshot: {}",
                    r.reason
                ));
            } else if !r.ready_at_once {
                failures.push("the guard restored from the sealed snapshot was warming".into());
            }
            if !r.cleared_no_seal {
                failures.push(format!(
                    "after a write cleared the seal, the restart must warm up for want of a seal, but: {}",
                    r.cleared_reason
                ));
            }
        }
        if let Some(f) = &self.fleet {
            if f.cross_false_negatives > 0 {
                failures.push(format!(
                    "{} false negatives across instances: a key created on one instance was \
                     answered \"absent\" on another (the first: {})",
                    f.cross_false_negatives,
                    f.first_cross_false_negative.unwrap_or_default()
                ));
            }
        }
        if v.check_errors > 0 {
            failures.push(format!(
                "{} store errors while checking; the first: {}",
                v.check_errors,
                v.first_check_error.as_deref().unwrap_or("?")
            ));
        }
        for (name, phase) in [
            ("without guard", &self.direct),
            ("with guard", &self.guarded),
        ] {
            if phase.errors > 0 {
                failures.push(format!(
                    "{} store errors {name}; the first: {}",
                    phase.errors,
                    phase.first_error.as_deref().unwrap_or("?")
                ));
            }
        }
        failures
    }
}

/// `1 - (guarded per request) / (direct per request)`, for queries of a kind.
fn cut(direct: u64, direct_requests: u64, guarded: u64, guarded_requests: u64) -> Option<f64> {
    if direct == 0 || direct_requests == 0 || guarded_requests == 0 {
        return None;
    }
    let before = direct as f64 / direct_requests as f64;
    let after = guarded as f64 / guarded_requests as f64;
    Some(1.0 - after / before)
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Seconds as `1.23 s`, or as `4.56 ms` below one.
fn duration(secs: f64) -> String {
    if secs >= 1.0 {
        format!("{secs:.2} s")
    } else {
        format!("{:.2} ms", secs * 1e3)
    }
}

fn percent(share: Option<f64>, decimals: usize) -> String {
    share.map_or_else(|| "-".into(), |s| format!("{:.*}%", decimals, s * 100.0))
}

/// The report as an aligned text table.
pub(crate) fn to_table(r: &Report) -> String {
    let s = &r.setup;
    let f = &r.filter;
    let v = &r.verification;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cuckoo-guard drill: {} rows in {}, table {:?}",
        thousands(s.rows),
        s.db,
        s.table
    );
    let _ = writeln!(
        out,
        "  {} threads, {} s per phase (without the guard first), {:.0}% attack (random keys above the largest row), legitimate keys Zipf({}), seed {}",
        s.threads,
        s.phase_secs,
        s.attack_share * 100.0,
        s.zipf,
        s.seed
    );
    let _ = writeln!(
        out,
        "  rows {}, warm-up {:.2} s",
        if s.reused {
            "reused".to_string()
        } else {
            format!("loaded in {:.2} s", s.load_secs)
        },
        s.warm_secs
    );
    let _ = writeln!(
        out,
        "  filter: {}-bit fingerprints, {} of {} slots ({:.1}% load, {:.2} slots per row), {:.1} MiB ({:.1} bits per row)",
        f.fingerprint_bits,
        thousands(f.len as u64),
        thousands(f.capacity as u64),
        f.load_factor * 100.0,
        f.capacity as f64 / s.rows as f64,
        f.memory_bytes as f64 / (1024.0 * 1024.0),
        f.memory_bytes as f64 * 8.0 / s.rows as f64
    );
    let _ = writeln!(out);
    let d = &r.direct;
    let g = &r.guarded;
    let rows: Vec<(&str, String, String)> = vec![
        ("requests", thousands(d.requests), thousands(g.requests)),
        (
            "requests per second",
            thousands(d.requests_per_sec as u64),
            thousands(g.requests_per_sec as u64),
        ),
        (
            "database queries",
            thousands(d.db_queries),
            thousands(g.db_queries),
        ),
        (
            "  for attack keys",
            thousands(d.attack_queries),
            thousands(g.attack_queries),
        ),
        (
            "queries blocked",
            thousands(d.blocked),
            thousands(g.blocked),
        ),
        (
            "latency p50",
            format!("{:.1} us", d.p50_us),
            format!("{:.1} us", g.p50_us),
        ),
        (
            "latency p99",
            format!("{:.1} us", d.p99_us),
            format!("{:.1} us", g.p99_us),
        ),
        ("store errors", thousands(d.errors), thousands(g.errors)),
    ];
    let _ = writeln!(
        out,
        "  {:<22} {:>16} {:>16}",
        "", "without guard", "with guard"
    );
    for (name, without, with) in rows {
        let _ = writeln!(out, "  {name:<22} {without:>16} {with:>16}");
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  attack queries cut     {} (target: at least 99%)",
        percent(r.attack_queries_cut(), 3)
    );
    let _ = writeln!(
        out,
        "  all queries cut        {} per request",
        percent(r.db_queries_cut(), 2)
    );
    let _ = writeln!(
        out,
        "  false-positive rate    {} observed, {} expected at this load, {} for the {}-bit width at 95% load (asked for at most {})",
        percent(r.observed_fpr(), 4),
        percent(Some(f.expected_fpr), 4),
        percent(Some(f.configured_fpr), 4),
        f.fingerprint_bits,
        percent(Some(s.requested_fpr), 4)
    );
    if let Some(w) = &r.writes {
        let _ = writeln!(
            out,
            "  writes                 {:.0}% of requests: {} rows created, {} refused; filter started at {} keys, \
             grew {} times, rebuilt {} times ({} failed){}",
            w.share * 100.0,
            thousands(w.creates),
            thousands(w.refused),
            thousands(w.initial_capacity),
            w.growth_steps,
            w.rebuilds,
            w.rebuilds_failed,
            match (w.last_rebuild_secs, w.last_rebuild_keys) {
                (Some(secs), Some(keys)) =>
                    format!("; the last scanned {} keys in {secs:.2} s", thousands(keys)),
                _ => String::new(),
            }
        );
    }
    if let Some(r) = &r.restarts {
        let _ = writeln!(
            out,
            "  restart                ready in {} from the sealed snapshot (a new store {}, then restore), {} the cold warm-up's {}: {}",
            duration(r.restore_secs),
            duration(r.open_secs),
            r.speedup()
                .map_or_else(|| "faster than".into(), |x| format!("{x:.0}x faster than")),
            duration(r.cold_secs),
            r.reason
        );
        let _ = writeln!(
            out,
            "                         snapshot {} bytes, {} keys, sealed in {}",
            thousands(r.snapshot_bytes),
            thousands(r.snapshot_keys),
            duration(r.seal_secs)
        );
        let _ = writeln!(
            out,
            "  restart, seal cleared  ready in {} (restore {}, then the warm-up): {}",
            duration(r.cleared_secs),
            duration(r.cleared_restore_secs),
            r.cleared_reason
        );
    }
    if let Some(fl) = &r.fleet {
        let _ = writeln!(
            out,
            "  instances              {} guards in fleet {:?} (Redis {}, lease {} s), joined and serving in {}, \
             the first create waited out the new fleet's hold in {}",
            fl.instances.len(),
            fl.name,
            fl.redis,
            fl.lease_secs,
            duration(fl.join_secs),
            duration(fl.hold_secs)
        );
        if fl.creates == 0 {
            let _ = writeln!(
                out,
                "  create latency         - (no creates: --write-share 0)"
            );
        } else {
            let _ = writeln!(
                out,
                "  create latency         p50 {:.1} us, p99 {:.1} us over {} creates; barrier wait {} per create ({} of the mean create)",
            fl.create_p50_us,
            fl.create_p99_us,
            thousands(fl.creates),
            fl.barrier_per_create_us()
                .map_or_else(|| "-".into(), |us| format!("{us:.1} us")),
            percent(
                fl.barrier_per_create_us()
                    .filter(|_| fl.create_mean_us > 0.0)
                    .map(|us| us / fl.create_mean_us),
                1
            )
        );
        }
        let _ = writeln!(
            out,
            "  cross-instance reads   {} keys read on another instance as soon as their create returned: {} answered absent",
            thousands(fl.cross_reads),
            thousands(fl.cross_false_negatives)
        );
        let _ = writeln!(
            out,
            "  fail-open lookups      {} (lookups an instance sent to the store while it could not vouch for its filter)",
            thousands(fl.failing_open())
        );
        let _ = writeln!(
            out,
            "  Redis calls per lookup {} ({} coordinator calls of all instances over {} lookups with the guard; lookups make none)",
            fl.redis_calls_per_lookup()
                .map_or_else(|| "-".into(), |x| format!("{x:.4}")),
            thousands(fl.redis_calls),
            thousands(fl.lookups)
        );
        for (i, m) in fl.instances.iter().enumerate() {
            let _ = writeln!(
                out,
                "    instance {i:<3}         {}, {} creates announced, {} creates of others applied ({} log entries), {} fail-open lookups, {} rejoins, {} coordinator errors",
                if m.serving { "serving" } else { "not serving" },
                thousands(m.creates_announced),
                thousands(m.creates_applied),
                thousands(m.entries_applied),
                thousands(m.failing_open),
                m.rejoins,
                m.coordinator_errors
            );
        }
    }
    let _ = writeln!(
        out,
        "  false negatives        {} (re-queried: {} legitimate keys answered absent, {} sampled blocked keys; \
         swept: {} of {} rows pass the filter)",
        v.false_negatives + v.sweep_false_negatives + v.legit_absent_unchecked,
        thousands(v.legit_absent_checked),
        thousands(v.absent_sample_checked),
        thousands(v.sweep_checked - v.sweep_false_negatives),
        thousands(v.sweep_checked)
    );
    if v.check_errors > 0 {
        let _ = writeln!(
            out,
            "  unchecked              {} store calls of the checks failed three times; the first: {}",
            thousands(v.check_errors),
            v.first_check_error.as_deref().unwrap_or("?")
        );
    }
    out
}

/// The report as JSON.
pub(crate) fn to_json(r: &Report) -> Value {
    let phase = |p: &Phase| {
        json!({
            "requests": p.requests,
            "legit_requests": p.legit,
            "attack_requests": p.attack,
            "seconds": p.secs,
            "requests_per_sec": p.requests_per_sec,
            "db_queries": p.db_queries,
            "attack_db_queries": p.attack_queries,
            "blocked": p.blocked,
            "latency_p50_us": p.p50_us,
            "latency_p99_us": p.p99_us,
            "store_errors": p.errors,
            "first_error": p.first_error,
        })
    };
    let s = &r.setup;
    let f = &r.filter;
    let v = &r.verification;
    json!({
        "setup": {
            "db": s.db,
            "kind": s.kind,
            "table": s.table,
            "rows": s.rows,
            "rows_reused": s.reused,
            "load_seconds": s.load_secs,
            "warm_up_seconds": s.warm_secs,
            "threads": s.threads,
            "phase_seconds": s.phase_secs,
            "requested_false_positive_rate": s.requested_fpr,
            "headroom": s.headroom,
            "attack_share": s.attack_share,
            "zipf": s.zipf,
            "seed": s.seed,
        },
        "filter": {
            "fingerprint_bits": f.fingerprint_bits,
            "len": f.len,
            "capacity": f.capacity,
            "load_factor": f.load_factor,
            "memory_bytes": f.memory_bytes,
            "bits_per_row": f.memory_bytes as f64 * 8.0 / s.rows as f64,
            "configured_false_positive_rate": f.configured_fpr,
            "expected_false_positive_rate": f.expected_fpr,
        },
        "without_guard": phase(&r.direct),
        "with_guard": phase(&r.guarded),
        "attack_queries_cut": r.attack_queries_cut(),
        "db_queries_cut": r.db_queries_cut(),
        "observed_false_positive_rate": r.observed_fpr(),
        "writes": r.writes.as_ref().map(|w| json!({
            "share": w.share,
            "creates": w.creates,
            "refused": w.refused,
            "initial_capacity": w.initial_capacity,
            "growth_steps": w.growth_steps,
            "rebuilds": w.rebuilds,
            "rebuilds_failed": w.rebuilds_failed,
            "last_rebuild_seconds": w.last_rebuild_secs,
            "last_rebuild_keys": w.last_rebuild_keys,
        })),
        "restart": r.restarts.as_ref().map(|r| json!({
            "snapshot_file": r.snapshot,
            "snapshot_bytes": r.snapshot_bytes,
            "snapshot_keys": r.snapshot_keys,
            "seal_seconds": r.seal_secs,
            "cold_warm_up_seconds": r.cold_secs,
            "restore_seconds": r.restore_secs,
            "open_store_seconds": r.open_secs,
            "speedup": r.speedup(),
            "trusted": r.trusted,
            "ready_at_once": r.ready_at_once,
            "reason": r.reason,
            "seal_cleared": {
                "seconds": r.cleared_secs,
                "restore_seconds": r.cleared_restore_secs,
                "no_seal": r.cleared_no_seal,
                "reason": r.cleared_reason,
            },
        })),
        "fleet": r.fleet.as_ref().map(|f| json!({
            "instances": f.instances.len(),
            "name": f.name,
            "redis": f.redis,
            "lease_seconds": f.lease_secs,
            "join_seconds": f.join_secs,
            "hold_seconds": f.hold_secs,
            "creates": f.creates,
            "create_latency_p50_us": f.create_p50_us,
            "create_latency_p99_us": f.create_p99_us,
            "create_latency_mean_us": f.create_mean_us,
            "barrier_wait_micros": f.barrier_wait_micros,
            "barrier_wait_per_create_us": f.barrier_per_create_us(),
            "cross_reads": f.cross_reads,
            "cross_false_negatives": f.cross_false_negatives,
            "fail_open_lookups": f.failing_open(),
            "redis_calls": f.redis_calls,
            "lookups": f.lookups,
            "redis_calls_per_lookup": f.redis_calls_per_lookup(),
            "members": f.instances.iter().map(|m| json!({
                "serving": m.serving,
                "creates_announced": m.creates_announced,
                "creates_applied": m.creates_applied,
                "entries_applied": m.entries_applied,
                "fail_open_lookups": m.failing_open,
                "rejoins": m.rejoins,
                "coordinator_errors": m.coordinator_errors,
            })).collect::<Vec<_>>(),
        })),
        "verification": {
            "legit_absent_checked": v.legit_absent_checked,
            "legit_absent_unchecked": v.legit_absent_unchecked,
            "sweep_checked": v.sweep_checked,
            "sweep_false_negatives": v.sweep_false_negatives,
            "absent_sample_checked": v.absent_sample_checked,
            "false_negatives": v.false_negatives + v.sweep_false_negatives + v.legit_absent_unchecked,
            "false_negatives_in_traffic": v.false_negatives,
            "rows_missing": v.rows_missing,
            "attack_keys_present": v.attack_keys_present,
            "check_errors": v.check_errors,
        },
        "passed": r.failures().is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn cuts_compare_rates_per_request() {
        assert_eq!(cut(500, 1_000, 1, 2_000), Some(1.0 - 0.0005 / 0.5));
        assert_eq!(cut(0, 1_000, 0, 1_000), None);
        assert_eq!(cut(10, 10, 10, 10), Some(0.0));
    }
}
