//! The comparison report: every contender measured in turn, in the same run, and the results
//! written into the generated sections of `BENCHMARKS.md` (with SVG plots under `docs/`).
//!
//! ```sh
//! cargo run --release --example compare                 # 1M and 16M keys, 5 rounds
//! CG_BENCH_SIZES=1M cargo run --release --example compare -- 3   # one size, 3 rounds
//! ```
//!
//! Workloads, contenders and key generation are those of the criterion suite
//! (`benches/contenders.rs`); `measure` times them, `markdown` and `plot` turn the results
//! into tables and plots, and `splice` puts the tables between the
//! `<!-- generated:NAME begin -->` and `<!-- generated:NAME end -->` lines of
//! `BENCHMARKS.md`, leaving every other line as it is. If the markers are not exactly those
//! of the sections the report writes, it stops before measuring and writes nothing.

#[path = "../../benches/contenders.rs"]
mod contenders;
mod markdown;
mod measure;
mod plot;
mod splice;

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use measure::{Machine, Report};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The report's file; plots go to `docs/` beside it.
fn report_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md")
}

fn run() -> Result<(), Box<dyn Error>> {
    let rounds: usize = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|_| format!("rounds: a number, not `{arg}`"))?,
        None => 5,
    };
    let path = report_path();
    let read = || std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()));
    let in_file = |e: splice::SpliceError| format!("{}: {e}; nothing written", path.display());
    splice::check(&read()?, &markdown::section_names()).map_err(in_file)?;

    let started = Instant::now();
    let sizes = contenders::sizes()
        .into_iter()
        .map(|(size, n)| measure::measure_size(size, n, rounds))
        .collect();
    let report = Report {
        rounds,
        seconds: started.elapsed().as_secs_f64(),
        machine: Machine::detect(),
        sizes,
    };

    let sections = markdown::sections(&report);
    let mut plots = Vec::new();
    for r in &report.sizes {
        plots.extend(plot::plots(r)?);
    }
    // Read again: the hand-written text may have been edited during the run.
    let spliced = match splice::splice(&read()?, &sections) {
        Ok(spliced) => spliced,
        Err(e) => {
            for name in markdown::section_names() {
                println!("<!-- {name} -->\n{}\n", sections[&name]);
            }
            return Err(in_file(e).into());
        }
    };
    let docs = path.with_file_name("docs");
    std::fs::create_dir_all(&docs)?;
    for (file, svg) in plots {
        std::fs::write(docs.join(file), svg)?;
    }
    std::fs::write(&path, spliced)?;
    for name in markdown::section_names() {
        println!("{}\n", sections[&name]);
    }
    Ok(())
}
