//! The penetration drill: load, warm up, two phases of traffic (straight to the database, then
//! through the guard), then check every "absent" answer the guard gave against the database.
//! With `--restart`, the guard is restarted from a sealed snapshot before the traffic.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use cuckoo_guard::guard::{GuardStats, Restart};
use cuckoo_guard::CuckooFilter;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

use crate::backend::{self, Backend, Guarded};
use crate::report::{Filter, Phase, Report, Restarts, Setup, Verification, Writes};
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
    let warm_secs = warm_up(args, backend.guard(), "warming the guard")?;
    let restarts = if args.restart {
        Some(restart(args, &mut *backend, capacity, warm_secs)?)
    } else {
        None
    };
    let backend = &*backend;

    if let Some(keys) = args.sabotage_filter {
        // The hottest keys (traffic finds them) and the coldest (only the sweep does).
        let keys = keys.min(args.rows / 2) as i64;
        let n = args.rows as i64;
        for key in (1..=keys).chain(n - keys + 1..=n) {
            backend.guard().filter().remove(&key);
        }
    }

    let direct = run_phase(args, backend, threads, seed, Mode::Direct)?;
    let before = backend.guard().stats();
    let guarded = run_phase(args, backend, threads, seed, Mode::Guarded)?;
    let after = backend.guard().stats();
    let mut verification = verify(backend, &direct, &guarded);
    // The traffic only checks keys it happened to ask for; under Zipf many rows are never
    // asked for. The table holds exactly the keys 1..=N (checked before the warm-up), so
    // every one of them must pass the filter.
    verification.sweep_checked = args.rows;
    verification.sweep_false_negatives = (1..=args.rows as i64)
        .filter(|key| !backend.guard().filter().contains(key))
        .count() as u64;

    // Every row the traffic created must pass the filter too; then they are deleted again
    // through the guard, so the table holds the drill's keys for the next run.
    let created: Vec<i64> = [&direct, &guarded]
        .iter()
        .flat_map(|phase| phase.tally.created.iter().copied())
        .collect();
    verification.sweep_checked += created.len() as u64;
    verification.sweep_false_negatives += created
        .iter()
        .filter(|key| !backend.guard().filter().contains(key))
        .count() as u64;
    let growth = backend.guard().stats();
    let writes = (args.write_share > 0.0).then(|| Writes {
        share: args.write_share,
        creates: direct.tally.creates + guarded.tally.creates,
        refused: growth.writes_refused + growth.writes_contended,
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

    let filter = backend.guard().filter();
    let filter = Filter {
        capacity: filter.capacity(),
        fingerprint_bits: filter.fingerprint_bits(),
        len: filter.len(),
        load_factor: filter.load_factor(),
        memory_bytes: filter.memory_usage(),
        configured_fpr: after.configured_false_positive_rate,
        expected_fpr: after.expected_false_positive_rate,
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
    })
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

    /// The report of this phase; `stats` are the guard's counters around a guarded phase.
    fn summary(&self, stats: Option<(&GuardStats, &GuardStats)>) -> Phase {
        let requests = self.requests();
        let secs = self.elapsed.as_secs_f64();
        let (db_queries, attack_queries, blocked) = match (self.mode, stats) {
            (Mode::Guarded, Some((before, after))) => (
                store_reads(before, after),
                // Every attack key is absent, so an attack key the filter let through is one
                // of the guard's false positives (legitimate keys all exist and never are).
                after.false_positives - before.false_positives,
                after.blocked - before.blocked,
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
    backend: &dyn Backend,
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
                    traffic(args, backend, mode, seed, t as u64, deadline)
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
fn traffic(
    args: &DrillArgs,
    backend: &dyn Backend,
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
    let guard = backend.guard();
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
            match guard.guard_put(key) {
                Ok(true) => {
                    tally.creates += 1;
                    tally.created.push(key);
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
        let start = Instant::now();
        let answer = match mode {
            Mode::Direct => guard.direct_get(key),
            Mode::Guarded => guard.guard_get(key),
        };
        let end = Instant::now();
        tally
            .latency
            .saturating_record((end - start).as_nanos().min(u128::from(u64::MAX)) as u64);
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
