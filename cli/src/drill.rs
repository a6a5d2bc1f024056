//! The penetration drill: load, warm up, two phases of traffic (straight to the database, then
//! through the guard), then check every "absent" answer the guard gave against the database.
//! With `--restart`, the guard is restarted from a sealed snapshot before the traffic.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use cuckoo_guard::fleet::FleetConfig;
use cuckoo_guard::guard::{GuardStats, Restart};
use cuckoo_guard::CuckooFilter;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

use crate::backend::{self, Backend, Guarded};
use crate::report::{
    Filter, FleetReport, Instance, Phase, Report, Restarts, Setup, Verification, Writes,
};
use crate::{CliError, Context, DrillArgs};

/// The most rows the drill loads (keys are `1..=N`, attack keys lie above `N`).
pub(crate) const MAX_ROWS: u64 = 1_000_000_000;
/// Attack keys are drawn from `N+1..=ATTACK_KEY_MAX`.
const ATTACK_KEY_MAX: i64 = 1 << 62;
/// Rows the traffic creates (`--write-share`) lie above the attack keys: thread `t` of phase
/// `p` creates `CREATED_BASE + ((p * MAX_THREADS + t) << 32) + i` for `i = 0, 1, ...`.
const CREATED_BASE: i64 = ATTACK_KEY_MAX + 1;
/// The row `--restart` creates and deletes to clear the seal: above the attack keys and the
/// rows the traffic creates.
const SEAL_PROBE_KEY: i64 = i64::MAX;
/// Rows inserted per transaction or pipeline while loading.
const LOAD_CHUNK: u64 = 50_000;
/// Keys the guard answered "absent" that each thread keeps for the check against the database.
const ABSENT_SAMPLE_PER_THREAD: usize = 5_000;
/// Distinct legitimate keys answered "absent" that each thread keeps to re-query; answers
/// beyond them are counted as unchecked (and fail the drill).
const MISSING_KEPT_PER_THREAD: usize = 10_000;
/// Latencies are recorded in nanoseconds up to a minute.
const LATENCY_MAX_NS: u64 = 60_000_000_000;
/// The row `--instances` creates and deletes before the traffic, to wait out a new fleet's
/// hold on creates.
const HOLD_PROBE_KEY: i64 = i64::MAX - 1;
/// How long the instances of `--instances` may take to serve after joining.
const SERVE_TIMEOUT: Duration = Duration::from_secs(30);

/// A latency in nanoseconds, for the histograms.
fn nanos(elapsed: Duration) -> u64 {
    elapsed.as_nanos().min(u128::from(u64::MAX)) as u64
}

fn bar(len: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{msg:<24} [{bar:32}] {pos}/{len} ({elapsed})")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

/// Runs the whole drill and returns its report.
pub(crate) fn run(args: &DrillArgs) -> Result<Report, CliError> {
    let threads = args.threads();
    let seed = args.seed.unwrap_or_else(rand::random);
    let capacity = args
        .capacity
        .unwrap_or_else(|| (args.rows as f64 * args.headroom).ceil() as u64);
    let capacity = usize::try_from(capacity).map_err(|_| CliError::new("--rows too large"))?;
    let mut backend = backend::open(args, new_filter(args, capacity)?)?;

    let setup = prepare(args, &*backend)?;
    // `--instances`: the guards beside the backend's own, all in one fleet.
    let mut others: Vec<Box<dyn Guarded>> = Vec::new();
    let mut joined = None;
    let mut restarts = None;
    let warm_secs = if args.instances > 1 {
        let fleet = join_fleet(args, &*backend, capacity, &mut others)?;
        let secs = fleet.join_secs;
        joined = Some(fleet);
        secs
    } else {
        let secs = warm_up(args, backend.guard(), "warming the guard")?;
        if args.restart {
            restarts = Some(restart(args, &mut *backend, capacity, secs)?);
        }
        secs
    };
    let backend = &*backend;
    let guards: Vec<&dyn Guarded> = std::iter::once(backend.guard())
        .chain(others.iter().map(|guard| &**guard))
        .collect();

    if let Some(keys) = args.sabotage_filter {
        // The hottest keys (traffic finds them) and the coldest (only the sweep does).
        let keys = keys.min(args.rows / 2) as i64;
        let n = args.rows as i64;
        for key in (1..=keys).chain(n - keys + 1..=n) {
            for guard in &guards {
                guard.filter().remove(&key);
            }
        }
    }

    let direct = run_phase(args, &guards, threads, seed, Mode::Direct)?;
    let before: Vec<GuardStats> = guards.iter().map(|g| g.stats()).collect();
    let calls_before = coordinator_calls(&guards);
    let guarded = run_phase(args, &guards, threads, seed, Mode::Guarded)?;
    let calls_after = coordinator_calls(&guards);
    let after: Vec<GuardStats> = guards.iter().map(|g| g.stats()).collect();
    let mut verification = verify(backend, &direct, &guarded);
    // The traffic only checks keys it happened to ask for; under Zipf many rows are never
    // asked for. The table holds exactly the keys 1..=N (checked before the warm-up), so
    // every one of them must pass the filter of every instance.
    verification.sweep_checked = args.rows * guards.len() as u64;
    verification.sweep_false_negatives = guards
        .iter()
        .map(|guard| {
            let filter = guard.filter();
            (1..=args.rows as i64)
                .filter(|key| !filter.contains(key))
                .count() as u64
        })
        .sum();

    // Every row the traffic created must pass the filter too; then they are deleted again
    // through the guard, so the table holds the drill's keys for the next run.
    let created: Vec<i64> = [&direct, &guarded]
        .iter()
        .flat_map(|phase| phase.tally.created.iter().copied())
        .collect();
    // A create returns once every instance applied it: each filter must have it.
    verification.sweep_checked += (created.len() * guards.len()) as u64;
    verification.sweep_false_negatives += guards
        .iter()
        .map(|guard| {
            let filter = guard.filter();
            created.iter().filter(|key| !filter.contains(key)).count() as u64
        })
        .sum::<u64>();
    let growth = backend.guard().stats();
    let refused = guards
        .iter()
        .map(|guard| {
            let stats = guard.stats();
            stats.writes_refused + stats.writes_contended
        })
        .sum();
    let writes = (args.write_share > 0.0).then(|| Writes {
        share: args.write_share,
        creates: direct.tally.creates + guarded.tally.creates,
        refused,
        growth_steps: growth.growth_steps,
        rebuilds: growth.rebuilds,
        rebuilds_failed: growth.rebuilds_failed,
        last_rebuild_secs: growth
            .last_rebuild
            .as_ref()
            .map(|r| r.duration.as_secs_f64()),
        last_rebuild_keys: growth.last_rebuild.as_ref().map(|r| r.keys_scanned),
        initial_capacity: capacity as u64,
    });
    remove_created(backend, &created, &mut verification);
    let fleet = joined.map(|joined| {
        let report = fleet_report(
            joined,
            &guards,
            [&direct, &guarded],
            calls_after - calls_before,
        );
        for guard in &guards {
            guard.leave_fleet();
        }
        if let Err(CliError(message)) =
            backend::remove_fleet_keys(&args.fleet_redis(), &report.name)
        {
            eprintln!("warning: {message}");
        }
        report
    });

    let filter = backend.guard().filter();
    let filter = Filter {
        capacity: filter.capacity(),
        fingerprint_bits: filter.fingerprint_bits(),
        len: filter.len(),
        load_factor: filter.load_factor(),
        memory_bytes: filter.memory_usage(),
        configured_fpr: after[0].configured_false_positive_rate,
        expected_fpr: after[0].expected_false_positive_rate,
    };
    Ok(Report {
        setup: Setup {
            db: backend.describe(),
            kind: backend.kind(),
            table: args.table.clone(),
            rows: args.rows,
            reused: setup.reused,
            load_secs: setup.load_secs,
            warm_secs,
            threads,
            phase_secs: args.duration,
            requested_fpr: args.fpr,
            headroom: args.headroom,
            attack_share: args.attack,
            zipf: args.zipf,
            seed,
        },
        filter,
        direct: direct.summary(None),
        guarded: guarded.summary(Some((&before, &after))),
        verification,
        writes,
        restarts,
        fleet,
    })
}

/// The fleet of `--instances` after its setup.
struct Joined {
    name: String,
    redis: String,
    lease_secs: f64,
    /// Joining (with the warm-ups) until every instance served.
    join_secs: f64,
    /// The first create, which waited out the new fleet's hold.
    hold_secs: f64,
    /// The instances' barrier wait before the traffic (the first create's, in the hold).
    barrier_wait_micros: u64,
}

/// Joins the backend's guard and `--instances - 1` new ones (pushed on `others`) to a new
/// fleet, waits until all serve, and waits out the new fleet's hold on creates.
fn join_fleet(
    args: &DrillArgs,
    backend: &dyn Backend,
    capacity: usize,
    others: &mut Vec<Box<dyn Guarded>>,
) -> Result<Joined, CliError> {
    let redis = args.fleet_redis();
    let name = format!(
        "cuckoo-guard-drill-{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    );
    let lease = args.fleet_lease();
    // The drill's writes are single-row statements against a database on this machine: 2 s
    // bounds them well, and a new fleet's first scan waits that long ([fleet.M7]).
    let config = || {
        FleetConfig::new(name.clone())
            .lease(lease)
            .write_bound(Duration::from_secs(2))
    };
    let started = Instant::now();
    let progress = bar(args.instances as u64, "joining the fleet");
    // A new fleet holds creates for two leases (the least the coordinator accepts).
    backend.guard().join_fleet(&redis, config(), 2 * lease)?;
    progress.set_position(1);
    for i in 1..args.instances {
        let guard = backend.instance(new_filter(args, capacity)?, args.threads())?;
        guard.join_fleet(&redis, config(), 2 * lease)?;
        others.push(guard);
        progress.set_position(i as u64 + 1);
    }
    progress.finish_and_clear();
    let guards: Vec<&dyn Guarded> = std::iter::once(backend.guard())
        .chain(others.iter().map(|guard| &**guard))
        .collect();
    for (i, guard) in guards.iter().enumerate() {
        let len = guard.filter().len() as u64;
        if len != args.rows {
            return Err(CliError::new(format!(
                "instance {i} warmed up {len} keys but the table holds {} rows; \
                 is something else writing to it?",
                args.rows
            )));
        }
    }
    let deadline = Instant::now() + SERVE_TIMEOUT;
    while let Some(i) = guards
        .iter()
        .position(|guard| !guard.fleet_stats().is_some_and(|stats| stats.serving))
    {
        if Instant::now() >= deadline {
            return Err(CliError::new(format!(
                "instance {i} of the fleet did not serve within {} s of joining",
                SERVE_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let join_secs = started.elapsed().as_secs_f64();
    // One create and delete, so the traffic's creates do not wait out the hold.
    let hold_started = Instant::now();
    let probe = backend.guard();
    match probe.guard_put(HOLD_PROBE_KEY) {
        Ok(true) => {}
        Ok(false) => {
            return Err(CliError::new(format!(
                "row {HOLD_PROBE_KEY} existed already: is something else writing to the table?"
            )))
        }
        Err(e) => {
            return Err(CliError::new(format!(
                "the fleet's first create failed: {e}"
            )))
        }
    }
    with_retries(|| probe.guard_delete(HOLD_PROBE_KEY))
        .map_err(|e| CliError::new(format!("cannot delete row {HOLD_PROBE_KEY}: {e}")))?;
    Ok(Joined {
        name,
        redis: crate::backend::redact(&redis),
        lease_secs: lease.as_secs_f64(),
        join_secs,
        hold_secs: hold_started.elapsed().as_secs_f64(),
        barrier_wait_micros: guards
            .iter()
            .filter_map(|guard| guard.fleet_stats())
            .map(|stats| stats.barrier_wait_micros)
            .sum(),
    })
}

/// The coordinator calls of every instance so far.
fn coordinator_calls(guards: &[&dyn Guarded]) -> u64 {
    guards
        .iter()
        .filter_map(|guard| guard.fleet_stats())
        .map(|stats| stats.coordinator_calls)
        .sum()
}

/// The report of the fleet of `--instances`; `redis_calls` were made during the phase with
/// the guard.
fn fleet_report(
    joined: Joined,
    guards: &[&dyn Guarded],
    phases: [&PhaseRun; 2],
    redis_calls: u64,
) -> FleetReport {
    let mut creates =
        Histogram::<u64>::new_with_bounds(1, LATENCY_MAX_NS, 3).expect("the bounds are valid");
    for phase in phases {
        creates
            .add(&phase.tally.create_latency)
            .expect("histograms share their bounds");
    }
    let us = |ns: f64| ns / 1_000.0;
    let [direct, guarded] = phases;
    let mut barrier_wait_micros = 0;
    let instances = guards
        .iter()
        .map(|guard| {
            let stats = guard.stats();
            let fleet = guard.fleet_stats().unwrap_or_default();
            barrier_wait_micros += fleet.barrier_wait_micros;
            Instance {
                serving: fleet.serving,
                creates_announced: fleet.creates_announced,
                creates_applied: stats.fleet_creates_applied,
                entries_applied: fleet.entries_applied,
                failing_open: stats.passed_failing_open,
                rejoins: fleet.rejoins,
                coordinator_errors: fleet.coordinator_errors,
            }
        })
        .collect();
    FleetReport {
        name: joined.name,
        redis: joined.redis,
        lease_secs: joined.lease_secs,
        join_secs: joined.join_secs,
        hold_secs: joined.hold_secs,
        creates: direct.tally.creates + guarded.tally.creates,
        create_p50_us: us(creates.value_at_quantile(0.5) as f64),
        create_p99_us: us(creates.value_at_quantile(0.99) as f64),
        create_mean_us: us(creates.mean()),
        barrier_wait_micros: barrier_wait_micros - joined.barrier_wait_micros,
        cross_reads: guarded.tally.cross_reads,
        cross_false_negatives: guarded.tally.cross_false_negatives,
        first_cross_false_negative: guarded.tally.first_cross_false_negative,
        redis_calls,
        lookups: guarded.requests(),
        instances,
    }
}

/// The drill's filter for `capacity` keys at `--fpr`.
fn new_filter(args: &DrillArgs, capacity: usize) -> Result<CuckooFilter, CliError> {
    CuckooFilter::builder()
        .capacity(capacity)
        .false_positive_rate(args.fpr)
        .build()
        .context("cannot build the filter")
}

/// Warms `guard` up, checking it loaded every row; its seconds.
fn warm_up(args: &DrillArgs, guard: &dyn Guarded, message: &str) -> Result<f64, CliError> {
    let started = Instant::now();
    let progress = bar(args.rows, message);
    let warmed = guard.warm_up(&mut |loaded| progress.set_position(loaded))?;
    progress.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    if warmed != args.rows {
        return Err(CliError::new(format!(
            "the warm-up scanned {warmed} keys but the table holds {} rows; \
             is something else writing to it?",
            args.rows
        )));
    }
    Ok(secs)
}

/// `--restart`, after the cold warm-up (`cold_secs`): a restart after a write cleared the
/// seal (it must warm up), then one from a sealed snapshot (it must filter at once). The
/// restored guard stays in `backend` for the traffic.
fn restart(
    args: &DrillArgs,
    backend: &mut dyn Backend,
    capacity: usize,
    cold_secs: f64,
) -> Result<Restarts, CliError> {
    let temp;
    let path = match &args.snapshot {
        Some(path) => path.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("cuckoo-guard-snapshot-")
                .tempdir()
                .context("cannot create a temporary directory for the snapshot")?;
            temp.path().join("drill.cgsnap")
        }
    };

    backend.guard().seal(&path)?;
    clear_seal(backend.guard())?;
    // The fallback filter is built inside the timing: a restarted process builds it too.
    let started = Instant::now();
    let cleared = backend.restart(&path, new_filter(args, capacity)?)?;
    warm_up(args, backend.guard(), "warming after restart")?;
    let cleared_secs = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let sealed = backend.guard().seal(&path)?;
    let seal_secs = started.elapsed().as_secs_f64();
    if args.sabotage_seal {
        clear_seal(backend.guard())?;
    }
    let restored = backend.restart(&path, new_filter(args, capacity)?)?;
    let ready_at_once = !backend.guard().stats().warming;
    let trusted = restored.restart.is_trusted();
    if !trusted {
        // The traffic needs a guard that filters; the report fails the drill.
        warm_up(args, backend.guard(), "warming after restart")?;
    }
    Ok(Restarts {
        snapshot: path.display().to_string(),
        cold_secs,
        snapshot_bytes: sealed.written.bytes,
        snapshot_keys: sealed.written.items,
        seal_secs,
        restore_secs: restored.elapsed.as_secs_f64(),
        open_secs: restored.open.as_secs_f64(),
        trusted,
        ready_at_once,
        reason: restored.restart.to_string(),
        cleared_secs,
        cleared_restore_secs: cleared.elapsed.as_secs_f64(),
        cleared_no_seal: matches!(cleared.restart, Restart::NoSeal),
        cleared_reason: cleared.restart.to_string(),
    })
}

/// Creates and deletes [`SEAL_PROBE_KEY`] through the guard: writes, so they clear the seal.
fn clear_seal(guard: &dyn Guarded) -> Result<(), CliError> {
    let key = SEAL_PROBE_KEY;
    guard.guard_put(key).map_err(|e| {
        CliError::new(format!(
            "cannot create the row {key} through the guard: {e}"
        ))
    })?;
    match guard.guard_delete(key) {
        Ok(true) => Ok(()),
        Ok(false) => Err(CliError::new(format!(
            "the row {key} was gone before the drill deleted it; is something else writing?"
        ))),
        Err(e) => Err(CliError::new(format!(
            "cannot delete the row {key} through the guard (it stays in the table): {e}"
        ))),
    }
}

/// A store call of the checks after the traffic, tried up to three times (50, 100 ms apart)
/// so a connection the server dropped a moment ago does not end the drill; the last error
/// if every attempt failed.
fn with_retries<T>(mut call: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let mut pause = Duration::from_millis(50);
    let mut attempts = 1;
    loop {
        match call() {
            Err(_) if attempts < 3 => {
                std::thread::sleep(pause);
                pause *= 2;
                attempts += 1;
            }
            result => return result,
        }
    }
}

/// Deletes the rows the traffic created, through the guard; a delete that fails counts as a
/// check error (the row stays; a rerun's census reports it).
fn remove_created(backend: &dyn Backend, created: &[i64], verification: &mut Verification) {
    if created.is_empty() {
        return;
    }
    let progress = bar(created.len() as u64, "deleting created rows");
    for (i, &key) in created.iter().enumerate() {
        match with_retries(|| backend.guard().guard_delete(key)) {
            Ok(true) => {}
            Ok(false) => verification.check_error(format!(
                "created row {key} was gone before the drill deleted it"
            )),
            Err(e) => verification.check_error(format!("cannot delete created row {key}: {e}")),
        }
        progress.set_position(i as u64 + 1);
    }
    progress.finish_and_clear();
}

struct Prepared {
    reused: bool,
    load_secs: f64,
}

/// Makes the table hold exactly the keys `1..=rows`: reuses it if it does, loads it if it is
/// empty (or `--fresh`), and refuses to touch other data.
fn prepare(args: &DrillArgs, backend: &dyn Backend) -> Result<Prepared, CliError> {
    let census = backend.census(args.rows)?;
    if census.is_drill_data {
        return Ok(Prepared {
            reused: true,
            load_secs: 0.0,
        });
    }
    if census.rows > 0 {
        if !args.fresh {
            return Err(CliError::new(format!(
                "table {:?} holds {} rows that are not the drill's keys 1..={}; \
                 pass --fresh to replace them, or --table to use another table",
                args.table, census.rows, args.rows
            )));
        }
        backend.clear()?;
    }
    let started = Instant::now();
    let progress = bar(args.rows, "loading rows");
    let mut lo = 1u64;
    while lo <= args.rows {
        let hi = (lo + LOAD_CHUNK - 1).min(args.rows);
        // Both fit in i64: rows <= MAX_ROWS.
        backend.load(lo as i64, hi as i64)?;
        progress.set_position(hi);
        lo = hi + 1;
    }
    progress.finish_and_clear();
    let census = backend.census(args.rows)?;
    if !census.is_drill_data {
        return Err(CliError::new(format!(
            "after loading, table {:?} holds {} rows instead of the keys 1..={}",
            args.table, census.rows, args.rows
        )));
    }
    Ok(Prepared {
        reused: false,
        load_secs: started.elapsed().as_secs_f64(),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every lookup is a database query.
    Direct,
    /// Every lookup goes through the guard.
    Guarded,
}

/// What one thread saw in one phase.
struct Tally {
    legit: u64,
    attack: u64,
    /// Legitimate keys (all of which exist) answered "absent".
    legit_absent: u64,
    /// Distinct legitimate keys answered "absent" (up to a bound).
    legit_absent_keys: HashSet<i64>,
    /// Answers "absent" for legitimate keys not kept for the check (beyond the bound).
    legit_absent_unkept: u64,
    /// Attack keys (none of which exists) answered "present".
    attack_present: u64,
    /// A sample of attack keys answered "absent", to check against the database.
    absent_sample: Vec<i64>,
    errors: u64,
    first_error: Option<String>,
    latency: Histogram<u64>,
    /// Rows this thread created (`--write-share`).
    creates: u64,
    created: Vec<i64>,
    /// Latency of the creates that created their row.
    create_latency: Histogram<u64>,
    /// `--instances`: lookups on another instance of a key whose create had just returned
    /// (counted as legitimate lookups too).
    cross_reads: u64,
    /// Of those, answered "absent": false negatives.
    cross_false_negatives: u64,
    first_cross_false_negative: Option<i64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            legit: 0,
            attack: 0,
            legit_absent: 0,
            legit_absent_unkept: 0,
            legit_absent_keys: HashSet::new(),
            attack_present: 0,
            absent_sample: Vec::new(),
            errors: 0,
            first_error: None,
            latency: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                .expect("the bounds are valid"),
            creates: 0,
            created: Vec::new(),
            create_latency: Histogram::new_with_bounds(1, LATENCY_MAX_NS, 3)
                .expect("the bounds are valid"),
            cross_reads: 0,
            cross_false_negatives: 0,
            first_cross_false_negative: None,
        }
    }

    fn merge(&mut self, other: Tally) {
        self.legit += other.legit;
        self.attack += other.attack;
        self.legit_absent += other.legit_absent;
        self.legit_absent_unkept += other.legit_absent_unkept;
        self.legit_absent_keys.extend(other.legit_absent_keys);
        self.attack_present += other.attack_present;
        self.absent_sample.extend(other.absent_sample);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.latency
            .add(&other.latency)
            .expect("histograms share their bounds");
        self.creates += other.creates;
        self.created.extend(other.created);
        self.create_latency
            .add(&other.create_latency)
            .expect("histograms share their bounds");
        self.cross_reads += other.cross_reads;
        self.cross_false_negatives += other.cross_false_negatives;
        if self.first_cross_false_negative.is_none() {
            self.first_cross_false_negative = other.first_cross_false_negative;
        }
    }
}

/// The guard's store reads between two of its stats: lookups the filter passed (or the
/// warm-up sent on), less those the false-positive memo answered without the store.
fn store_reads(before: &GuardStats, after: &GuardStats) -> u64 {
    (after.passed - after.memo_hits) - (before.passed - before.memo_hits)
}

/// One phase's merged tallies and wall time.
struct PhaseRun {
    mode: Mode,
    tally: Tally,
    elapsed: Duration,
}

impl PhaseRun {
    fn requests(&self) -> u64 {
        self.tally.legit + self.tally.attack
    }

    /// The report of this phase; `stats` are the counters of every instance's guard around
    /// a guarded phase.
    fn summary(&self, stats: Option<(&[GuardStats], &[GuardStats])>) -> Phase {
        let requests = self.requests();
        let secs = self.elapsed.as_secs_f64();
        let (db_queries, attack_queries, blocked) = match (self.mode, stats) {
            (Mode::Guarded, Some((before, after))) => before.iter().zip(after).fold(
                (0, 0, 0),
                |(reads, attack, blocked), (before, after)| {
                    (
                        reads + store_reads(before, after),
                        // Every attack key is absent, so an attack key the filter let through
                        // is one of the guard's false positives (legitimate keys all exist
                        // and never are).
                        attack + after.false_positives - before.false_positives,
                        blocked + after.blocked - before.blocked,
                    )
                },
            ),
            _ => (requests, self.tally.attack, 0),
        };
        let quantile = |q: f64| self.tally.latency.value_at_quantile(q) as f64 / 1_000.0;
        Phase {
            requests,
            legit: self.tally.legit,
            attack: self.tally.attack,
            secs,
            requests_per_sec: if secs > 0.0 {
                requests as f64 / secs
            } else {
                0.0
            },
            db_queries,
            attack_queries,
            blocked,
            p50_us: quantile(0.5),
            p99_us: quantile(0.99),
            errors: self.tally.errors,
            first_error: self.tally.first_error.clone(),
        }
    }
}

/// Runs `threads` threads of traffic for the phase's duration.
fn run_phase(
    args: &DrillArgs,
    guards: &[&dyn Guarded],
    threads: usize,
    seed: u64,
    mode: Mode,
) -> Result<PhaseRun, CliError> {
    let duration = args.phase_duration();
    let message = match mode {
        Mode::Direct => "traffic without guard",
        Mode::Guarded => "traffic with guard",
    };
    let progress = bar(duration.as_millis() as u64, message);
    progress.set_style(
        ProgressStyle::with_template("{msg:<24} [{bar:32}] {elapsed}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    let started = Instant::now();
    let deadline = started + duration;
    let mut total = Tally::new();
    let mut last_end = started;
    std::thread::scope(|s| -> Result<(), CliError> {
        let mut workers = Vec::with_capacity(threads);
        for t in 0..threads {
            let worker = std::thread::Builder::new()
                .name(format!("traffic-{t}"))
                .spawn_scoped(s, move || {
                    traffic(args, guards, mode, seed, t as u64, deadline)
                })
                .context("cannot start a traffic thread")?;
            workers.push(worker);
        }
        while !workers.iter().all(|w| w.is_finished()) {
            progress.set_position(started.elapsed().as_millis() as u64);
            std::thread::sleep(Duration::from_millis(20));
        }
        for worker in workers {
            match worker.join() {
                Ok((tally, end)) => {
                    total.merge(tally);
                    last_end = last_end.max(end);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(())
    })?;
    progress.finish_and_clear();
    // From the common start to the last thread's last answer: spawning and the progress
    // loop's polling are not traffic.
    Ok(PhaseRun {
        mode,
        tally: total,
        elapsed: last_end - started,
    })
}

/// One traffic thread: legitimate Zipf lookups of existing keys mixed with attack lookups of
/// random absent keys, until `deadline`. The same seed gives both phases the same sequence.
/// Its requests go to the instances in turn; with several, each key it creates in the phase
/// with the guard is then looked up on another instance.
fn traffic(
    args: &DrillArgs,
    guards: &[&dyn Guarded],
    mode: Mode,
    seed: u64,
    thread: u64,
    deadline: Instant,
) -> (Tally, Instant) {
    let mut rng = SmallRng::seed_from_u64(seed ^ thread.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // Validated: rows >= 1 and the exponent >= 0.
    let zipf = Zipf::new(args.rows as f64, args.zipf).expect("validated Zipf parameters");
    let first_attack_key = args.rows as i64 + 1;
    let mut tally = Tally::new();
    let instances = guards.len();
    let mut turn = thread as usize;
    let phase = match mode {
        Mode::Direct => 0,
        Mode::Guarded => 1,
    };
    let first_created =
        CREATED_BASE + (((phase * crate::MAX_THREADS as u64 + thread) as i64) << 32);
    loop {
        // No draw at all without writes, so a drill without them sees the same lookups.
        if args.write_share > 0.0 && rng.random::<f64>() < args.write_share {
            let key = first_created + tally.created.len() as i64;
            let writer = turn % instances;
            turn = turn.wrapping_add(1);
            let start = Instant::now();
            match guards[writer].guard_put(key) {
                Ok(true) => {
                    tally
                        .create_latency
                        .saturating_record(nanos(start.elapsed()));
                    tally.creates += 1;
                    tally.created.push(key);
                    if instances > 1 && mode == Mode::Guarded {
                        // Another instance, a different one each time.
                        let other = 1 + tally.creates as usize % (instances - 1);
                        let reader = guards[(writer + other) % instances];
                        if args.sabotage_fleet {
                            reader.filter().remove(&key);
                        }
                        cross_read(reader, key, &mut tally);
                    }
                }
                Ok(false) => {
                    tally.errors += 1;
                    tally
                        .first_error
                        .get_or_insert_with(|| format!("created row {key} existed already"));
                }
                Err(error) => {
                    tally.errors += 1;
                    tally.first_error.get_or_insert(error);
                }
            }
            if Instant::now() >= deadline {
                return (tally, Instant::now());
            }
            continue;
        }
        let attack = rng.random::<f64>() < args.attack;
        let key = if attack {
            rng.random_range(first_attack_key..=ATTACK_KEY_MAX)
        } else {
            (zipf.sample(&mut rng) as i64).clamp(1, args.rows as i64)
        };
        let guard = guards[turn % instances];
        turn = turn.wrapping_add(1);
        let start = Instant::now();
        let answer = match mode {
            Mode::Direct => guard.direct_get(key),
            Mode::Guarded => guard.guard_get(key),
        };
        let end = Instant::now();
        tally.latency.saturating_record(nanos(end - start));
        if attack {
            tally.attack += 1;
        } else {
            tally.legit += 1;
        }
        match answer {
            Ok(true) if attack => tally.attack_present += 1,
            Ok(true) => {}
            Ok(false) if attack => {
                if tally.absent_sample.len() < ABSENT_SAMPLE_PER_THREAD {
                    tally.absent_sample.push(key);
                }
            }
            Ok(false) => {
                tally.legit_absent += 1;
                if tally.legit_absent_keys.len() < MISSING_KEPT_PER_THREAD {
                    tally.legit_absent_keys.insert(key);
                } else if !tally.legit_absent_keys.contains(&key) {
                    tally.legit_absent_unkept += 1;
                }
            }
            Err(error) => {
                tally.errors += 1;
                tally.first_error.get_or_insert(error);
            }
        }
        if end >= deadline {
            return (tally, end);
        }
    }
}

/// Looks `key`, whose create has returned, up on `guard` (another instance than the one that
/// created it): "absent" is a false negative.
fn cross_read(guard: &dyn Guarded, key: i64, tally: &mut Tally) {
    let start = Instant::now();
    let answer = guard.guard_get(key);
    tally.latency.saturating_record(nanos(start.elapsed()));
    tally.legit += 1;
    tally.cross_reads += 1;
    match answer {
        Ok(true) => {}
        Ok(false) => {
            tally.cross_false_negatives += 1;
            tally.first_cross_false_negative.get_or_insert(key);
        }
        Err(error) => {
            tally.errors += 1;
            tally.first_error.get_or_insert(error);
        }
    }
}

/// Checks the guard's "absent" answers against the database: every legitimate key it
/// answered absent, and the sample of attack keys. A key the database has is a false negative.
fn verify(backend: &dyn Backend, direct: &PhaseRun, guarded: &PhaseRun) -> Verification {
    let mut check_errors = Vec::new();
    let mut exists = |key: i64| match with_retries(|| backend.guard().direct_get(key)) {
        Ok(present) => Some(present),
        Err(e) => {
            check_errors.push(format!("cannot check key {key} against the database: {e}"));
            None
        }
    };
    let mut false_negatives = 0u64;
    let mut rows_missing = 0u64;
    for &key in &guarded.tally.legit_absent_keys {
        match exists(key) {
            Some(true) => false_negatives += 1,
            Some(false) => rows_missing += 1,
            None => {}
        }
    }
    let mut absent_checked = 0u64;
    for &key in &guarded.tally.absent_sample {
        absent_checked += 1;
        if exists(key) == Some(true) {
            false_negatives += 1;
        }
    }
    let mut verification = Verification {
        legit_absent_checked: guarded.tally.legit_absent_keys.len() as u64,
        legit_absent_unchecked: guarded.tally.legit_absent_unkept,
        sweep_checked: 0,
        sweep_false_negatives: 0,
        absent_sample_checked: absent_checked,
        false_negatives,
        rows_missing: rows_missing
            + direct.tally.legit_absent_keys.len() as u64
            + direct.tally.legit_absent_unkept,
        attack_keys_present: direct.tally.attack_present + guarded.tally.attack_present,
        check_errors: 0,
        first_check_error: None,
    };
    for error in check_errors {
        verification.check_error(error);
    }
    verification
}

#[cfg(test)]
mod tests {
    use cuckoo_guard::guard::{CacheGuard, MemoryStore, RebuildPolicy};
    use cuckoo_guard::CuckooFilter;

    use super::store_reads;

    #[test]
    fn memo_hits_are_not_counted_as_database_queries() {
        let filter = CuckooFilter::builder()
            .capacity(2_000)
            .fingerprint_bits(8)
            .seed(7)
            .build()
            .unwrap();
        let guard = CacheGuard::with_policy(
            filter,
            MemoryStore::from_rows((0..1_000u64).map(|k| (k, k))),
            RebuildPolicy::manual(),
        );
        guard.warm_up(1_000, |_| {}).unwrap();
        let false_positive = (1_000_000..2_000_000u64)
            .find(|k| guard.may_contain(k))
            .expect("a false positive");
        let before = guard.stats();
        for _ in 0..100 {
            assert_eq!(guard.get(&false_positive).unwrap(), None);
        }
        assert_eq!(guard.get(&1).unwrap(), Some(1));
        let after = guard.stats();
        assert!(
            after.memo_hits - before.memo_hits >= 98,
            "the memo answered the replays"
        );
        let answered_by_the_store = (after.store_hits - before.store_hits)
            + (after.false_positives - before.false_positives);
        assert_eq!(store_reads(&before, &after), answered_by_the_store);
    }
}
