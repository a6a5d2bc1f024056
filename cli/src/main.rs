//! `cuckoo-guard`: the command-line tool. Its default (and so far only) job is the
//! penetration drill: load a table, put a guard in front of it, and measure what an attack of
//! lookups for absent keys costs the database without and with the guard.
//!
//! Exit codes: 0 the drill ran and found no false negative; 1 the drill ran and found false
//! negatives or store errors, or (`--restart`) a restart that did not start as it must; 2 bad
//! input or a setup failure (one line on stderr).

mod backend;
mod drill;
mod report;
mod snapshot;

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Guard a database against cache-penetration traffic with a concurrent cuckoo filter.
#[derive(Debug, Parser)]
#[command(name = "cuckoo-guard", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a subcommand, the drill runs with these options.
    #[command(flatten)]
    drill: DrillArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load a table, then send legitimate lookups mixed with an attack of absent keys, once
    /// straight to the database and once through the guard, and compare (the default).
    Drill(DrillArgs),
    /// Build, inspect and check filter snapshots.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
}

/// The most traffic threads (each keeps a latency histogram and a sample of keys).
pub(crate) const MAX_THREADS: usize = 1024;
/// The most guards of `--instances` (each has its own runtime and store connections).
pub(crate) const MAX_INSTANCES: usize = 64;

/// Options of the drill.
#[derive(Debug, Clone, Args)]
pub(crate) struct DrillArgs {
    /// The database: an SQLite file path, `postgres://...` (or a PostgreSQL key=value
    /// connection string, `host=... dbname=...`) or `redis://...`. Default: a new
    /// SQLite file in a temporary directory, removed afterwards.
    #[arg(long, value_name = "PATH|URL")]
    pub(crate) db: Option<String>,
    /// Rows to load (keys 1..=N).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub(crate) rows: u64,
    /// Traffic threads (default: one per core).
    #[arg(long, value_name = "T")]
    pub(crate) threads: Option<usize>,
    /// Seconds of traffic in each of the two phases.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub(crate) duration: f64,
    /// Share of lookups that are an attack (random keys that do not exist), 0 to 1.
    #[arg(long, default_value_t = 0.5, value_name = "SHARE")]
    pub(crate) attack: f64,
    /// Zipf exponent of the legitimate lookups over the existing keys.
    #[arg(long, default_value_t = 0.99, value_name = "S")]
    pub(crate) zipf: f64,
    /// Target false-positive rate of the filter (picks the fingerprint width).
    #[arg(long, default_value_t = 0.001, value_name = "RATE")]
    pub(crate) fpr: f64,
    /// Filter capacity as a multiple of the rows (room for creates after warm-up).
    #[arg(long, default_value_t = 1.1, value_name = "FACTOR")]
    pub(crate) headroom: f64,
    /// The filter's starting capacity in keys, instead of the rows times --headroom: a filter
    /// too small grows, and the guard rebuilds it from the database to fit.
    #[arg(long, value_name = "KEYS")]
    pub(crate) capacity: Option<u64>,
    /// Share of requests that create a new row through the guard, 0 to 1 (the rest are
    /// lookups); the rows created are deleted through the guard after the check.
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    pub(crate) write_share: f64,
    /// The table (SQLite, PostgreSQL) or key namespace (Redis) of the drill's rows.
    #[arg(long, default_value = "cuckoo_guard_drill", value_name = "NAME")]
    pub(crate) table: String,
    /// Replace the table's rows if they are not exactly the drill's keys 1..=N.
    #[arg(long)]
    pub(crate) fresh: bool,
    /// Do not create the table if it is missing (report an error instead).
    #[arg(long)]
    pub(crate) no_create: bool,
    /// Seed of the traffic generators (default: random; the report prints it).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Print the report as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub(crate) json: bool,
    /// After the warm-up, measure the guard's restart: seal its snapshot, restart it from
    /// the snapshot with a new store (the traffic then runs on the restored guard), and
    /// restart it once after a write has cleared the seal (it must warm up instead).
    #[arg(long)]
    pub(crate) restart: bool,
    /// The snapshot file of `--restart` (replaced). Default: a file in a temporary directory,
    /// removed afterwards.
    #[arg(long, value_name = "FILE")]
    pub(crate) snapshot: Option<PathBuf>,
    /// Guards in front of the database, each with its own store connections, kept coherent
    /// as one fleet through Redis (`--fleet-redis`): the traffic's lookups and creates are
    /// spread over all of them, and every key created on one is read at once on another.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) instances: usize,
    /// The Redis that coordinates the fleet of `--instances` (a fleet named for the run).
    /// Default: REDIS_URL, or redis://127.0.0.1:6379.
    #[arg(long, value_name = "URL")]
    pub(crate) fleet_redis: Option<String>,
    /// The fleet's lease in seconds: how long an instance that stopped renewing may still
    /// answer "absent". A new fleet holds creates for two leases.
    #[arg(long, default_value_t = 3.0, value_name = "SECS")]
    pub(crate) fleet_lease: f64,
    /// Negative control of the false-negative check, for the tool's tests: after the warm-up,
    /// remove the keys 1..=K and N-K+1..=N from the guard's filter (not from the database),
    /// so the guard wrongly answers "absent" for the hottest keys (which the traffic finds)
    /// and the coldest (which only the sweep finds), and the drill must fail.
    #[arg(long, hide = true, value_name = "K")]
    pub(crate) sabotage_filter: Option<u64>,
    /// Negative control of the restart check, for the tool's tests: write through the guard
    /// after the seal of the timed restart too, so the restart cannot trust the snapshot and
    /// the drill must fail.
    #[arg(long, hide = true)]
    pub(crate) sabotage_seal: bool,
    /// Negative control of the cross-instance check, for the tool's tests: remove each key
    /// created on one instance from the filter of the instance that reads it next, so that
    /// read answers "absent" and the drill must fail.
    #[arg(long, hide = true)]
    pub(crate) sabotage_fleet: bool,
}

impl DrillArgs {
    /// The drill's defaults for the table `table` of the database `db`, which must exist.
    pub(crate) fn for_database(db: &str, table: &str) -> DrillArgs {
        let cli = Cli::parse_from(["cuckoo-guard", "--db", db, "--table", table, "--no-create"]);
        cli.drill
    }

    /// Checks the options that clap cannot, with a one-line reason.
    fn validate(&self) -> Result<(), String> {
        if self.rows == 0 {
            return Err("--rows must be at least 1".into());
        }
        if self.rows > drill::MAX_ROWS {
            return Err(format!("--rows must be at most {}", drill::MAX_ROWS));
        }
        if let Some(threads) = self.threads {
            if !(1..=MAX_THREADS).contains(&threads) {
                return Err(format!("--threads must be between 1 and {MAX_THREADS}"));
            }
        }
        if !(self.duration.is_finite() && self.duration > 0.0 && self.duration <= 86_400.0) {
            return Err("--duration must be a number of seconds above 0 (at most a day)".into());
        }
        if !(0.0..=1.0).contains(&self.attack) {
            return Err("--attack must be a share between 0 and 1".into());
        }
        if !(self.zipf.is_finite() && self.zipf >= 0.0) {
            return Err("--zipf must be an exponent of 0 or more".into());
        }
        if !(self.headroom.is_finite() && self.headroom >= 1.0 && self.headroom <= 100.0) {
            return Err("--headroom must be a factor between 1 and 100".into());
        }
        if let Some(capacity) = self.capacity {
            if !(1..=drill::MAX_ROWS).contains(&capacity) {
                return Err(format!(
                    "--capacity must be between 1 and {} keys",
                    drill::MAX_ROWS
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.write_share) {
            return Err("--write-share must be a share between 0 and 1".into());
        }
        if self.table.is_empty() {
            return Err("--table must not be empty".into());
        }
        if self.snapshot.is_some() && !self.restart {
            return Err("--snapshot needs --restart".into());
        }
        if self.sabotage_seal && !self.restart {
            return Err("--sabotage-seal needs --restart".into());
        }
        if !(1..=MAX_INSTANCES).contains(&self.instances) {
            return Err(format!("--instances must be between 1 and {MAX_INSTANCES}"));
        }
        if self.sabotage_fleet && self.instances < 2 {
            return Err("--sabotage-fleet needs --instances 2 or more".into());
        }
        if self.instances > 1 && self.restart {
            return Err("--restart works with one instance only".into());
        }
        if !(self.fleet_lease.is_finite() && (0.2..=4.0).contains(&self.fleet_lease)) {
            // Creates wait out the hold of a new fleet (two leases) within a request's timeout.
            return Err("--fleet-lease must be between 0.2 and 4 seconds".into());
        }
        Ok(())
    }

    /// The Redis of the fleet: `--fleet-redis`, REDIS_URL, or the local default.
    pub(crate) fn fleet_redis(&self) -> String {
        self.fleet_redis
            .clone()
            .or_else(|| {
                std::env::var("REDIS_URL")
                    .ok()
                    .filter(|url| !url.is_empty())
            })
            .unwrap_or_else(|| "redis://127.0.0.1:6379".into())
    }

    pub(crate) fn fleet_lease(&self) -> Duration {
        Duration::from_secs_f64(self.fleet_lease)
    }

    pub(crate) fn threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }

    pub(crate) fn phase_duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration)
    }
}

/// An error of the tool, shown as one line.
#[derive(Debug)]
pub(crate) struct CliError(String);

impl CliError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        CliError(message.into())
    }

    /// `context: error: its sources...`, on one line.
    pub(crate) fn from_error(context: &str, error: &(dyn Error + 'static)) -> Self {
        let mut line = format!("{context}: {error}");
        let mut source = error.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            source = cause.source();
        }
        CliError(line.replace(['\n', '\r'], " "))
    }
}

/// `.context("...")` for results whose error is a std error.
pub(crate) trait Context<T> {
    fn context(self, what: &str) -> Result<T, CliError>;
}

impl<T, E: Error + 'static> Context<T> for Result<T, E> {
    fn context(self, what: &str) -> Result<T, CliError> {
        self.map_err(|e| CliError::from_error(what, &e))
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            use clap::error::ErrorKind;
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                error.exit();
            }
            // clap's message, without its usage lines: one line, like every other error.
            let rendered = error.to_string();
            let line = rendered.lines().next().unwrap_or("error: bad arguments");
            eprintln!("{line} (see --help)");
            return ExitCode::from(2);
        }
    };
    let args = match cli.command {
        Some(Command::Drill(args)) => args,
        Some(Command::Snapshot(command)) => {
            return snapshot::run(command).unwrap_or_else(|CliError(message)| {
                eprintln!("error: {message}");
                ExitCode::from(2)
            })
        }
        None => cli.drill,
    };
    if let Err(message) = args.validate() {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    match drill::run(&args) {
        Ok(report) => {
            let text = if args.json {
                format!("{}\n", report::to_json(&report))
            } else {
                report::to_table(&report)
            };
            // A closed stdout (`| head`) is not worth a panic; the exit code still tells.
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
            let failures = report.failures();
            if failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                for failure in failures {
                    eprintln!("error: {failure}");
                }
                ExitCode::from(1)
            }
        }
        Err(CliError(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
