//! `cuckoo-guard snapshot`: build a filter snapshot from a database, inspect a snapshot file,
//! look keys up in one.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use cuckoo_guard::{snapshot, CuckooFilter};

use crate::{backend, CliError, Context, DrillArgs};

/// What `snapshot` does.
#[derive(Debug, Subcommand)]
pub(crate) enum SnapshotCommand {
    /// Load every key of a table into a filter and write the filter's snapshot to a file
    /// (owner-only: it holds the filter's hash keys).
    Build(BuildArgs),
    /// Print a snapshot file's header, size, load and checksum state; exit 1 if the file
    /// does not check out.
    Inspect {
        /// The snapshot file.
        file: PathBuf,
    },
    /// Load a snapshot file and look keys up in it: one line per key; exit 0 if every key is
    /// present, 1 if some is absent.
    Check {
        /// The snapshot file.
        file: PathBuf,
        /// Keys to look up.
        #[arg(required = true, allow_negative_numbers = true)]
        keys: Vec<String>,
        /// How the keys were hashed: as integers (the drill's tables) or as strings.
        #[arg(long, value_enum, default_value_t = KeyType::Int)]
        key_type: KeyType,
    },
}

/// How `snapshot check` hashes its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum KeyType {
    /// 64-bit signed integers.
    Int,
    /// UTF-8 strings.
    Str,
}

/// Options of `snapshot build`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BuildArgs {
    /// The database: an SQLite file path, `postgres://...` (or a PostgreSQL key=value
    /// connection string, `host=... dbname=...`) or `redis://...`.
    #[arg(long, value_name = "PATH|URL")]
    db: String,
    /// The table (SQLite, PostgreSQL) or key namespace (Redis), with the drill's columns.
    #[arg(long, default_value = "cuckoo_guard_drill", value_name = "NAME")]
    table: String,
    /// Where to write the snapshot (replaced whole, or left as it was on failure).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Target false-positive rate of the filter (picks the fingerprint width).
    #[arg(long, default_value_t = 0.001, value_name = "RATE")]
    fpr: f64,
    /// Filter capacity as a multiple of the rows (room for creates after a restart).
    #[arg(long, default_value_t = 1.1, value_name = "FACTOR")]
    headroom: f64,
}

/// Runs a `snapshot` subcommand, printing its result; the exit code as documented above.
pub(crate) fn run(command: SnapshotCommand) -> Result<ExitCode, CliError> {
    match command {
        SnapshotCommand::Build(args) => build(&args),
        SnapshotCommand::Inspect { file } => inspect(&file),
        SnapshotCommand::Check {
            file,
            keys,
            key_type,
        } => check(&file, &keys, key_type),
    }
}

fn build(args: &BuildArgs) -> Result<ExitCode, CliError> {
    if !(args.fpr > 0.0 && args.fpr < 1.0) {
        return Err(CliError::new("--fpr must be a rate between 0 and 1"));
    }
    if !(args.headroom.is_finite() && args.headroom >= 1.0 && args.headroom <= 100.0) {
        return Err(CliError::new(
            "--headroom must be a factor between 1 and 100",
        ));
    }
    // The drill's options, with its defaults, for the backend (it never creates the table).
    let drill = DrillArgs::for_database(&args.db, &args.table);
    let counting = CuckooFilter::with_capacity(1);
    let rows = backend::open(&drill, counting)?.census(1)?.rows;
    let capacity = ((rows as f64 * args.headroom).ceil() as usize).max(1);
    let filter = CuckooFilter::builder()
        .capacity(capacity)
        .false_positive_rate(args.fpr)
        .build()
        .context("cannot build the filter")?;
    let backend = backend::open(&drill, filter)?;
    let started = Instant::now();
    let loaded = backend.guard().warm_up(&mut |_| {})?;
    let warm_up = started.elapsed();
    let filter = backend.guard().filter();
    let started = Instant::now();
    let written = filter
        .write_snapshot_file(&args.out)
        .context(&format!("cannot write {}", args.out.display()))?;
    let write = started.elapsed();
    println!(
        "{}: {} keys from {} ({} rows) in {:.2} s; {} bytes written in {:.3} s ({:.0} MB/s)",
        args.out.display(),
        written.items,
        backend.describe(),
        loaded,
        warm_up.as_secs_f64(),
        written.bytes,
        write.as_secs_f64(),
        written.bytes as f64 / 1e6 / write.as_secs_f64().max(1e-9),
    );
    Ok(ExitCode::SUCCESS)
}

fn inspect(file: &PathBuf) -> Result<ExitCode, CliError> {
    let reader = std::fs::File::open(file).context(&format!("cannot open {}", file.display()))?;
    let info = snapshot::inspect(std::io::BufReader::with_capacity(1 << 20, reader))
        .context(&format!("{} is not a readable snapshot", file.display()))?;
    println!("file:              {}", file.display());
    println!("format version:    {}", info.format_version);
    match (info.overflow_bits, info.fingerprint_bits) {
        (true, 16) => println!("fingerprint bits:  16 (15-bit fingerprints and overflow bits)"),
        (true, bits) => println!("fingerprint bits:  {bits} (with overflow bits)"),
        (false, bits) => println!("fingerprint bits:  {bits}"),
    }
    println!(
        "tables:            {} ({} buckets, {} slots; base table {} buckets)",
        info.tables,
        info.buckets,
        info.capacity(),
        info.base_buckets
    );
    println!("built for:         {} keys", info.built_for);
    println!("growth:            {:?}", info.growth);
    println!(
        "path search:       {:?}, at most {} buckets",
        info.displacement, info.max_path_len
    );
    let hashing = match info.probe_matches {
        Some(true) => "ahash keys in the file; this build hashes alike",
        Some(false) => {
            "ahash keys in the file; this build hashes DIFFERENTLY (it would refuse the file)"
        }
        None => "the caller's own hasher (no keys in the file)",
    };
    println!("hashing:           {hashing}");
    println!("tag:               {:#018x}", info.tag);
    match &info.body {
        Ok(body) => {
            println!(
                "items:             {} ({} extras), load {:.1}%",
                body.items,
                body.extras,
                100.0 * body.items as f64 / info.capacity() as f64
            );
            println!("size:              {} bytes", body.bytes);
            println!("checksums:         ok");
        }
        Err(error) => println!("checksums:         FAILED: {error}"),
    }
    Ok(if info.body.is_ok() && info.probe_matches != Some(false) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn check(file: &PathBuf, keys: &[String], key_type: KeyType) -> Result<ExitCode, CliError> {
    let filter = CuckooFilter::read_snapshot_file(file)
        .context(&format!("cannot load {}", file.display()))?;
    if key_type == KeyType::Int {
        if let Some(bad) = keys.iter().find(|k| k.parse::<i64>().is_err()) {
            return Err(CliError::new(format!(
                "{bad:?} is not an integer key (see --key-type)"
            )));
        }
    }
    let mut all_present = true;
    for key in keys {
        let present = match key_type {
            KeyType::Int => filter.contains(&key.parse::<i64>().expect("checked above")),
            KeyType::Str => filter.contains(key.as_str()),
        };
        all_present &= present;
        println!("{key} {}", if present { "present" } else { "absent" });
    }
    Ok(if all_present {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
