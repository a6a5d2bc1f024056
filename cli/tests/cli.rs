//! The `cuckoo-guard` command-line tool, run as a user runs it: the drill on each database,
//! its JSON report, its refusal of bad input, and its false-negative check caught failing.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

#[path = "../../tests/common/servers.rs"]
mod servers;
use servers::server_url;

fn drill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cuckoo-guard"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs a drill with `--json`, checks it passed, and returns the report.
fn passing_drill(args: &[&str]) -> Value {
    let mut all = vec!["drill", "--json", "--duration", "1", "--threads", "2"];
    all.extend_from_slice(args);
    let output = drill(&all);
    assert!(
        output.status.success(),
        "drill {args:?} failed: {}",
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("the report is JSON")
}

/// The checks every passing report must meet.
fn check_report(report: &Value, rows: u64) {
    assert_eq!(report["passed"], true);
    assert_eq!(report["setup"]["rows"], rows);
    assert_eq!(report["filter"]["len"], rows, "the guard loaded every row");
    assert_eq!(report["verification"]["false_negatives"], 0);
    assert_eq!(report["verification"]["sweep_checked"], rows);
    assert_eq!(report["verification"]["sweep_false_negatives"], 0);
    let without = &report["without_guard"];
    let with = &report["with_guard"];
    assert!(without["requests"].as_u64().unwrap() > 0);
    assert!(with["blocked"].as_u64().unwrap() > 0);
    // Every blocked lookup was an attack key: legitimate keys all exist and must pass.
    assert!(with["blocked"].as_u64().unwrap() <= with["attack_requests"].as_u64().unwrap());
    assert!(
        report["verification"]["absent_sample_checked"]
            .as_u64()
            .unwrap()
            > 0,
        "blocked keys were checked against the database"
    );
    // The share of the attack that still reached the database is the false-positive rate,
    // about 0.02% for the 16-bit class.
    let cut = report["attack_queries_cut"].as_f64().unwrap();
    assert!(cut >= 0.99, "attack queries cut by only {cut}");
    // Every request is counted once: blocked or sent to the database.
    assert_eq!(
        with["blocked"].as_u64().unwrap() + with["db_queries"].as_u64().unwrap(),
        with["requests"].as_u64().unwrap()
    );
}

/// The checks of a drill with `--write-share` that started from a small filter.
fn check_writes(report: &Value, rows: u64) {
    assert_eq!(report["passed"], true);
    let writes = &report["writes"];
    let creates = writes["creates"].as_u64().unwrap();
    // Writes ran (a second's worth on a loaded machine is still hundreds); the filter grew
    // from its small first table and was rebuilt.
    assert!(creates >= 100, "{writes}");
    assert_eq!(writes["refused"], 0, "{writes}");
    assert!(writes["growth_steps"].as_u64().unwrap() >= 1, "{writes}");
    assert!(writes["rebuilds"].as_u64().unwrap() >= 1, "{writes}");
    assert_eq!(writes["rebuilds_failed"], 0, "{writes}");
    // Every row, loaded or created, passed the filter after the traffic.
    let v = &report["verification"];
    assert_eq!(v["sweep_checked"].as_u64().unwrap(), rows + creates);
    assert_eq!(v["sweep_false_negatives"], 0);
    assert_eq!(v["false_negatives"], 0);
    let cut = report["attack_queries_cut"].as_f64().unwrap();
    assert!(cut >= 0.99, "attack queries cut by only {cut}");
}

/// The checks of a drill with `--restart`: the restore trusted the sealed snapshot, and the
/// restart after a cleared seal warmed up. (The traffic and the sweep ran on the restored
/// guard: the report's checks cover it.)
fn check_restart(report: &Value, rows: u64) {
    assert_eq!(report["passed"], true);
    let r = &report["restart"];
    assert_eq!(r["trusted"], true, "{r}");
    assert_eq!(r["ready_at_once"], true, "{r}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .starts_with("started from the sealed snapshot"),
        "{r}"
    );
    assert_eq!(r["snapshot_keys"], rows, "{r}");
    // 16-bit fingerprints: at least two bytes a key.
    assert!(r["snapshot_bytes"].as_u64().unwrap() > 2 * rows, "{r}");
    assert_eq!(
        r["cold_warm_up_seconds"],
        report["setup"]["warm_up_seconds"]
    );
    for field in ["seal_seconds", "restore_seconds", "speedup"] {
        assert!(r[field].as_f64().unwrap() > 0.0, "{field}: {r}");
    }
    let cleared = &r["seal_cleared"];
    assert_eq!(cleared["no_seal"], true, "{r}");
    assert!(
        cleared["reason"]
            .as_str()
            .unwrap()
            .starts_with("warming up: the store holds no seal"),
        "{r}"
    );
    // That restart included a warm-up.
    assert!(
        cleared["seconds"].as_f64().unwrap() > cleared["restore_seconds"].as_f64().unwrap(),
        "{r}"
    );
}

fn sqlite_path(dir: &Path) -> String {
    dir.join("drill.sqlite").to_str().unwrap().to_string()
}

#[test]
fn the_default_drill_runs_on_a_temporary_sqlite_database() {
    let report = passing_drill(&["--rows", "20000"]);
    check_report(&report, 20_000);
    assert_eq!(report["setup"]["kind"], "sqlite");
    assert_eq!(report["setup"]["rows_reused"], false);
}

#[test]
fn a_one_percent_rate_picks_the_12_bit_class() {
    let report = passing_drill(&["--rows", "50000", "--fpr", "0.01"]);
    check_report(&report, 50_000);
    let filter = &report["filter"];
    assert_eq!(filter["fingerprint_bits"], 12);
    assert!(filter["configured_false_positive_rate"].as_f64().unwrap() <= 0.003);
    let observed = report["observed_false_positive_rate"]
        .as_f64()
        .expect("attack lookups measured the rate");
    assert!(observed <= 0.01, "observed {observed}");
    // Five slots per 64-bit bucket, at the drill's headroom of 1.1 rows per key; the report's
    // bits per row also count the 32 KiB of stripe words, 5 bits per row at this size.
    let slots = filter["capacity"].as_u64().unwrap();
    assert_eq!(slots % 5, 0, "five slots per bucket");
    let bucket_bits_per_row = (slots / 5 * 64) as f64 / 50_000.0;
    assert!(
        bucket_bits_per_row < 16.0,
        "{bucket_bits_per_row} bits per row"
    );
    let bits_per_row = filter["bits_per_row"].as_f64().unwrap();
    println!(
        "12-bit class: {bucket_bits_per_row:.2} bits of buckets per row ({bits_per_row:.2} in \
         all), observed rate {observed:.5}"
    );
}

#[test]
fn a_restart_from_a_sealed_snapshot_filters_at_once_on_sqlite() {
    let report = passing_drill(&["--rows", "20000", "--restart"]);
    check_report(&report, 20_000);
    check_restart(&report, 20_000);
    assert_eq!(report["setup"]["kind"], "sqlite");

    // A snapshot file of one's own stays, owner-only; the text report has the lines.
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_path(dir.path());
    let file = dir.path().join("guard.cgsnap");
    let report = passing_drill(&[
        "--db",
        &db,
        "--rows",
        "5000",
        "--restart",
        "--snapshot",
        file.to_str().unwrap(),
        "--write-share",
        "0.1",
    ]);
    check_restart(&report, 5000);
    // The restored guard took creates; the sweep found each of them and every row.
    let creates = report["writes"]["creates"].as_u64().unwrap();
    assert!(creates > 0);
    assert_eq!(report["writes"]["refused"], 0);
    let v = &report["verification"];
    assert_eq!(v["sweep_checked"].as_u64().unwrap(), 5000 + creates);
    assert_eq!(v["sweep_false_negatives"], 0);
    assert_eq!(v["false_negatives"], 0);
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        report["restart"]["snapshot_bytes"].as_u64().unwrap()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let output = drill(&[
        "--db",
        &db,
        "--rows",
        "5000",
        "--duration",
        "0.3",
        "--restart",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    for line in [
        "restart                ready in ",
        "from the sealed snapshot",
        "restart, seal cleared  ready in ",
        "warming up: the store holds no seal",
        "false negatives        0",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
}

#[test]
fn the_restart_check_catches_a_seal_cleared_before_the_restart() {
    // A write after the timed restart's seal too: the restore must not trust the file, the
    // guard warms up instead, and the drill exits 1 though the traffic found nothing wrong.
    let output = drill(&[
        "--json",
        "--rows",
        "5000",
        "--duration",
        "0.3",
        "--restart",
        "--sabotage-seal",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("did not trust the sealed snapshot"),
        "{}",
        stderr(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["passed"], false);
    assert_eq!(report["restart"]["trusted"], false);
    assert_eq!(report["verification"]["false_negatives"], 0);
    assert_eq!(report["verification"]["sweep_false_negatives"], 0);
}

#[test]
fn a_small_filter_grows_and_is_rebuilt_under_writes() {
    let report = passing_drill(&[
        "--rows",
        "20000",
        "--capacity",
        "1000",
        "--write-share",
        "0.2",
    ]);
    check_writes(&report, 20_000);
}

#[test]
fn the_text_report_has_the_promised_lines() {
    let output = drill(&["--rows", "5000", "--duration", "0.5", "--seed", "7"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    for line in [
        "requests per second",
        "database queries",
        "queries blocked",
        "latency p50",
        "latency p99",
        "attack queries cut",
        "false-positive rate",
        "false negatives        0",
        "seed 7",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    // The figures, not just the labels: the cut is a percentage of at least 99.
    let cut_line = text
        .lines()
        .find(|l| l.contains("attack queries cut"))
        .unwrap();
    let cut: f64 = cut_line
        .split_whitespace()
        .find_map(|w| w.strip_suffix('%').and_then(|n| n.parse().ok()))
        .expect("a percentage");
    assert!((99.0..=100.0).contains(&cut), "{cut_line}");
}

#[test]
fn a_loaded_table_is_reused_and_other_data_is_not_touched() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_path(dir.path());
    let first = passing_drill(&["--db", &db, "--rows", "3000"]);
    assert_eq!(first["setup"]["rows_reused"], false);
    let second = passing_drill(&["--db", &db, "--rows", "3000"]);
    assert_eq!(second["setup"]["rows_reused"], true);
    check_report(&second, 3000);

    // A different row count is not the drill's data: refused without --fresh...
    let refused = drill(&["--db", &db, "--rows", "2000", "--duration", "0.2"]);
    assert_eq!(refused.status.code(), Some(2));
    let message = stderr(&refused);
    assert!(message.contains("--fresh"), "{message}");
    assert_eq!(message.trim().lines().count(), 1, "one line: {message}");
    // ...and replaced with it.
    let fresh = passing_drill(&["--db", &db, "--rows", "2000", "--fresh"]);
    check_report(&fresh, 2000);
}

#[test]
fn bad_input_gets_one_line_and_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_path(dir.path());
    let not_a_db = dir.path().join("not-a-db");
    std::fs::write(
        &not_a_db,
        "hello, this is not SQLite, it is long enough to be read",
    )
    .unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--rows", "0"], "--rows"),
        (vec!["--rows", "many"], "invalid value"),
        (vec!["--no-such-option"], "unexpected argument"),
        (vec!["--attack", "1.5"], "--attack"),
        (vec!["--threads", "0"], "--threads"),
        (vec!["--threads", "100000"], "--threads"),
        (vec!["--rows", "100000000000"], "--rows"),
        (vec!["--duration", "0"], "--duration"),
        (vec!["--write-share", "2"], "--write-share"),
        (vec!["--write-share=-0.1"], "--write-share"),
        (vec!["--capacity", "0"], "--capacity"),
        (vec!["--instances", "0"], "--instances"),
        (
            vec!["--instances", "2", "--restart"],
            "--restart works with one instance",
        ),
        (
            vec!["--instances", "2", "--fleet-lease", "10"],
            "--fleet-lease",
        ),
        (
            vec!["--sabotage-fleet"],
            "--sabotage-fleet needs --instances",
        ),
        (
            vec!["--instances", "2", "--fleet-redis", "redis://127.0.0.1:1"],
            "cannot reach the fleet's Redis",
        ),
        (vec!["--snapshot", "x.cgsnap"], "--snapshot needs --restart"),
        (
            vec!["--restart", "--snapshot", "/no/such/dir/x.cgsnap"],
            "cannot seal",
        ),
        (vec!["--db", &db, "--no-create"], "does not exist"),
        (vec!["--db", not_a_db.to_str().unwrap()], "not a database"),
        (vec!["--db", "mysql://localhost/x"], "unknown scheme"),
        // Nothing listens on port 1.
        (
            vec!["--db", "postgres://postgres@127.0.0.1:1/test"],
            "cannot connect",
        ),
        (vec!["--db", "redis://127.0.0.1:1"], "cannot connect"),
    ];
    for (args, expected) in cases {
        let mut all = args.clone();
        for (option, value) in [("--rows", "100"), ("--duration", "0.2")] {
            if !args.contains(&option) {
                all.extend_from_slice(&[option, value]);
            }
        }
        let output = drill(&all);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
        assert!(message.starts_with("error: "), "{args:?}: {message}");
        assert!(message.contains(expected), "{args:?}: {message}");
        assert_eq!(message.trim().lines().count(), 1, "{args:?}: {message}");
        assert!(output.stdout.is_empty(), "{args:?}: no report on failure");
    }
}

#[test]
fn the_false_negative_check_catches_a_sabotaged_filter() {
    // Removing the 10 hottest and 10 coldest keys from the filter (not from the database)
    // makes the guard answer "absent" for rows that exist: the traffic finds the hot ones, the
    // sweep all 20, and the drill must exit 1.
    let output = drill(&[
        "--json",
        "--rows",
        "5000",
        "--duration",
        "0.5",
        "--sabotage-filter",
        "10",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(stderr(&output).contains("false negatives"));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["passed"], false);
    assert!(
        report["verification"]["false_negatives_in_traffic"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(report["verification"]["sweep_false_negatives"], 20);
}

/// A figure of the text report: the number after `label` on the line that has it.
fn figure_after(text: &str, label: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    let rest = &line[line.find(label).unwrap() + label.len()..];
    rest.split_whitespace()
        .next()
        .and_then(|w| w.trim_end_matches(['%', ',']).replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no figure after {label:?} in {line:?}"))
}

/// Whether the fleet `name` left any of its keys in Redis.
fn fleet_keys_left(url: &str, name: &str) -> u64 {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = redis::Client::open(url).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let mut exists = redis::cmd("EXISTS");
        for suffix in ["log", "acks", "members", "epoch", "inflight", "born"] {
            exists.arg(format!("cuckoo-guard:{{{name}}}:{suffix}"));
        }
        exists.query_async(&mut connection).await.unwrap()
    })
}

#[test]
fn three_instances_share_their_creates_through_a_redis_fleet() {
    let Some(url) = server_url(&servers::REDIS) else {
        return;
    };
    let output = drill(&[
        "--rows",
        "5000",
        "--duration",
        "0.5",
        "--threads",
        "2",
        "--write-share",
        "0.1",
        "--instances",
        "3",
        "--fleet-redis",
        &url,
        "--fleet-lease",
        "2",
    ]);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{}\n{text}", stderr(&output));
    for line in [
        "instances              3 guards in fleet",
        "create latency         p50",
        "barrier wait",
        "cross-instance reads",
        "fail-open lookups",
        "Redis calls per lookup",
        "instance 0",
        "instance 1",
        "instance 2",
        "false negatives        0",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    // Keys created on one instance were read on another, none answered absent.
    let cross = figure_after(&text, "cross-instance reads");
    assert!(cross > 0.0, "{text}");
    assert!(
        text.contains("as soon as their create returned: 0 answered absent"),
        "{text}"
    );
    assert!(
        figure_after(&text, "create latency         p50") > 0.0,
        "{text}"
    );
    // Creates announce in Redis (lookups make no call): some calls per lookup, far below one
    // per create and lookup.
    let calls = figure_after(&text, "Redis calls per lookup");
    assert!(calls > 0.0 && calls < 10.0, "{text}");
    // Every instance applied creates of the others.
    for i in 0..3 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("instance {i} ")))
            .unwrap();
        assert!(
            figure_after(line, "creates announced, ") > 0.0,
            "instance {i} applied no create of the others: {line}"
        );
    }
    // The fleet's keys were removed after the run.
    let name = text
        .split("guards in fleet \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    assert_eq!(fleet_keys_left(&url, name), 0, "{name}");
}

#[test]
fn the_cross_instance_check_catches_a_sabotaged_reader() {
    let Some(url) = server_url(&servers::REDIS) else {
        return;
    };
    // Each key created on one instance is removed from the filter of the instance that reads
    // it next: that read answers "absent" for a row that exists, and the drill must exit 1.
    let output = drill(&[
        "--json",
        "--rows",
        "2000",
        "--duration",
        "0.5",
        "--threads",
        "2",
        "--write-share",
        "0.1",
        "--instances",
        "2",
        "--fleet-redis",
        &url,
        "--fleet-lease",
        "2",
        "--sabotage-fleet",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("false negatives across instances"),
        "{}",
        stderr(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["passed"], false);
    let fleet = &report["fleet"];
    // Every sabotaged read answers "absent", unless its instance failed open just then (a
    // lease renewal late on a busy machine) or the filter gave a false positive for it
    // (another key's fingerprint: well under 1% of the reads).
    let cross = fleet["cross_reads"].as_u64().unwrap();
    let caught = fleet["cross_false_negatives"].as_u64().unwrap();
    let failing_open = fleet["fail_open_lookups"].as_u64().unwrap();
    assert!(caught > 0, "{fleet}");
    assert!(caught + failing_open + cross / 100 + 1 >= cross, "{fleet}");
}

fn unique_table(prefix: &str) -> String {
    format!("{prefix}_{}", std::process::id())
}

#[test]
fn the_drill_runs_against_postgres() {
    let Some(url) = server_url(&servers::POSTGRES) else {
        return;
    };
    let table = unique_table("cg_cli_drill");
    let report = passing_drill(&["--db", &url, "--table", &table, "--rows", "5000"]);
    check_report(&report, 5000);
    assert_eq!(report["setup"]["kind"], "postgres");
    let again = passing_drill(&["--db", &url, "--table", &table, "--rows", "5000"]);
    assert_eq!(again["setup"]["rows_reused"], true);
    // Writes from a small filter; the created rows are deleted again, so the table is reused.
    let writes = passing_drill(&[
        "--db",
        &url,
        "--table",
        &table,
        "--rows",
        "5000",
        "--capacity",
        "500",
        "--write-share",
        "0.3",
    ]);
    check_writes(&writes, 5000);
    assert_eq!(writes["setup"]["rows_reused"], true);
    // Leave nothing behind.
    drop_pg_table(&url, &table);
    // A table that is not there, with --no-create: one line, exit 2.
    let missing = drill(&[
        "--db",
        &url,
        "--table",
        &format!("{table}_missing"),
        "--no-create",
        "--duration",
        "0.2",
    ]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("does not exist"),
        "{}",
        stderr(&missing)
    );
    // A table of another shape (an int4 key): refused with one line, not a panic.
    let other = format!("{table}_int4");
    pg_execute(
        &url,
        &format!("CREATE TABLE \"{other}\" (\"key\" int4 PRIMARY KEY, \"value\" text NOT NULL)"),
    );
    let wrong = drill(&["--db", &url, "--table", &other, "--duration", "0.2"]);
    drop_pg_table(&url, &other);
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("shape"), "{}", stderr(&wrong));
    assert_eq!(stderr(&wrong).trim().lines().count(), 1);
}

#[test]
fn a_restart_from_a_sealed_snapshot_filters_at_once_on_postgres() {
    let Some(url) = server_url(&servers::POSTGRES) else {
        return;
    };
    let table = unique_table("cg_cli_restart");
    let report = passing_drill(&[
        "--db",
        &url,
        "--table",
        &table,
        "--rows",
        "20000",
        "--restart",
    ]);
    drop_pg_table(&url, &table);
    pg_execute(
        &url,
        &format!("DELETE FROM cuckoo_guard_seals WHERE store = '{table}'"),
    );
    check_report(&report, 20_000);
    check_restart(&report, 20_000);
    assert_eq!(report["setup"]["kind"], "postgres");
}

#[test]
fn a_restart_from_a_sealed_snapshot_filters_at_once_on_redis() {
    let Some(url) = server_url(&servers::REDIS) else {
        return;
    };
    let namespace = unique_table("cg_cli_restart");
    let report = passing_drill(&[
        "--db",
        &url,
        "--table",
        &namespace,
        "--rows",
        "5000",
        "--restart",
    ]);
    redis_del(&url, &namespace);
    check_report(&report, 5000);
    check_restart(&report, 5000);
    assert_eq!(report["setup"]["kind"], "redis");
}

/// Deletes the drill's keys (and the seal) of `namespace`.
fn redis_del(url: &str, namespace: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = redis::Client::open(url).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("DEL")
            .arg(format!("{{{namespace}}}:rows"))
            .arg(format!("{{{namespace}}}:keys"))
            .arg(format!("{{{namespace}}}:seal"))
            .query_async(&mut connection)
            .await
            .unwrap();
    });
}

#[test]
fn the_drill_runs_against_redis() {
    let Some(url) = server_url(&servers::REDIS) else {
        return;
    };
    let namespace = unique_table("cg_cli_drill");
    let report = passing_drill(&["--db", &url, "--table", &namespace, "--rows", "5000"]);
    check_report(&report, 5000);
    assert_eq!(report["setup"]["kind"], "redis");
    let again = passing_drill(&["--db", &url, "--table", &namespace, "--rows", "5000"]);
    assert_eq!(again["setup"]["rows_reused"], true);
    // An empty namespace with --no-create: refused, nothing written.
    let empty = drill(&[
        "--db",
        &url,
        "--table",
        &format!("{namespace}_empty"),
        "--no-create",
    ]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(
        stderr(&empty).contains("holds no rows"),
        "{}",
        stderr(&empty)
    );
    redis_del(&url, &namespace);
}

fn pg_execute(url: &str, sql: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client.batch_execute(sql).await.unwrap();
    });
}

fn drop_pg_table(url: &str, table: &str) {
    pg_execute(url, &format!("DROP TABLE IF EXISTS \"{table}\""));
}

/// The drill against PostgreSQL while its backends are terminated again and again: it
/// finishes with its report (exit 0, or 1 with the store errors counted), never a crash, and
/// finds no false negative.
#[test]
fn the_drill_finishes_while_its_postgres_backends_are_terminated() {
    let Some(url) = server_url(&servers::POSTGRES) else {
        return;
    };
    let table = unique_table("cg_cli_faults");
    let application = table.clone();
    let separator = if url.contains('?') { '&' } else { '?' };
    let drill_url = format!("{url}{separator}application_name={application}");
    // Load the table first, so the faulted run only reuses it.
    passing_drill(&["--db", &drill_url, "--table", &table, "--rows", "20000"]);

    let child = Command::new(env!("CARGO_BIN_EXE_cuckoo-guard"))
        .args([
            "drill",
            "--json",
            "--duration",
            "3",
            "--threads",
            "2",
            "--rows",
            "20000",
        ])
        .args([
            "--write-share",
            "0.05",
            "--db",
            &drill_url,
            "--table",
            &table,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (url, done) = (url.clone(), std::sync::Arc::clone(&done));
        let table = table.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                // Past the census and the warm-up, into the traffic: once a backend of the
                // drill's has run a lookup of one key.
                let started = std::time::Instant::now();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let looked_up: i64 = admin
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity \
                             WHERE application_name = $1 \
                             AND query LIKE '%' || $2 || '% WHERE % = $1'",
                            &[&application, &table],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    if looked_up > 0 {
                        break;
                    }
                    assert!(
                        started.elapsed() < std::time::Duration::from_secs(60),
                        "the drill's traffic never began"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                let mut terminated = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    terminated += admin
                        .query(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                             WHERE application_name = $1",
                            &[&application],
                        )
                        .await
                        .unwrap()
                        .len();
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                }
                terminated
            })
        })
    };
    let output = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let terminated = killer.join().unwrap();
    drop_pg_table(&url, &table);

    assert!(
        terminated > 0,
        "no backend was terminated during the drill: {}",
        stderr(&output)
    );
    let code = output.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "exit {code:?}: {}",
        stderr(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report is JSON");
    assert_eq!(report["verification"]["false_negatives"], 0);
    let errors = report["without_guard"]["store_errors"].as_u64().unwrap()
        + report["with_guard"]["store_errors"].as_u64().unwrap()
        + report["verification"]["check_errors"].as_u64().unwrap();
    assert_eq!(report["passed"], errors == 0, "{report}");
    assert_eq!(code == Some(0), errors == 0);
    println!("{terminated} backends terminated during the drill; {errors} store errors counted");
}

/// `cuckoo-guard snapshot ...` with `args`.
fn snapshot_tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cuckoo-guard"))
        .arg("snapshot")
        .args(args)
        .output()
        .expect("the tool runs")
}

#[test]
fn snapshots_are_built_inspected_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rows.sqlite");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "CREATE TABLE cuckoo_guard_drill (key INTEGER PRIMARY KEY, value TEXT NOT NULL);
         WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < 20000)
         INSERT INTO cuckoo_guard_drill SELECT k, 'row-' || k FROM n;",
    )
    .unwrap();
    drop(conn);
    let file = dir.path().join("rows.cgsnap");
    let (db, file_arg) = (db.to_str().unwrap(), file.to_str().unwrap());

    let built = snapshot_tool(&["build", "--db", db, "--out", file_arg]);
    assert!(built.status.success(), "{}", stderr(&built));
    assert!(String::from_utf8_lossy(&built.stdout).contains("20000 keys"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "the snapshot holds hash keys: owner-only"
        );
    }

    let inspected = snapshot_tool(&["inspect", file_arg]);
    let text = String::from_utf8_lossy(&inspected.stdout).to_string();
    assert!(inspected.status.success(), "{text}{}", stderr(&inspected));
    for line in [
        "format version:    3",
        "fingerprint bits:  16 (15-bit fingerprints and overflow bits)",
        "items:             20000 (0 extras)",
        "checksums:         ok",
        "this build hashes alike",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }

    let present = snapshot_tool(&["check", file_arg, "1", "777", "20000"]);
    assert!(present.status.success(), "{}", stderr(&present));
    assert_eq!(
        String::from_utf8_lossy(&present.stdout),
        "1 present\n777 present\n20000 present\n"
    );
    // A false positive is possible for an absent key; among a thousand, most are absent.
    let absent: Vec<String> = (1_000_000..1_001_000).map(|k: i64| k.to_string()).collect();
    let mut args = vec!["check", file_arg];
    args.extend(absent.iter().map(String::as_str));
    let checked = snapshot_tool(&args);
    assert_eq!(checked.status.code(), Some(1));
    let absent_lines = String::from_utf8_lossy(&checked.stdout)
        .matches(" absent")
        .count();
    assert!(absent_lines > 990, "{absent_lines}");
    let bad_key = snapshot_tool(&["check", file_arg, "1", "x"]);
    assert_eq!(bad_key.status.code(), Some(2));
    assert!(bad_key.stdout.is_empty());

    // One flipped byte in the tables: inspect reports it, check refuses to load the file.
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[5_000] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();
    let damaged = snapshot_tool(&["inspect", file_arg]);
    assert_eq!(damaged.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&damaged.stdout).contains("checksums:         FAILED"));
    let refused = snapshot_tool(&["check", file_arg, "1"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("corrupt"), "{}", stderr(&refused));

    let missing_table = snapshot_tool(&["build", "--db", db, "--table", "nope", "--out", file_arg]);
    assert_eq!(missing_table.status.code(), Some(2));
    assert!(stderr(&missing_table).contains("does not exist"));
}

/// Fails if `text` holds `secret`, its percent-decoded form, or any piece of either between the
/// characters a URL parser may split at.
fn assert_hidden(text: &str, secret: &str, what: &str) {
    let decoded = secret.replace("%40", "@");
    for whole in [secret, decoded.as_str()] {
        assert!(!text.contains(whole), "{what} printed {whole:?}:\n{text}");
        for piece in whole.split(['?', '#', '/', '@', ' ']) {
            assert!(
                piece.len() < 3 || !text.contains(piece),
                "{what} printed {piece:?} of {whole:?}:\n{text}"
            );
        }
    }
}

/// Passwords with each character that moves a naive idea of where a URL's user info ends.
const SECRETS: &[&str] = &[
    "Sx3?Qc9-pw",
    "Pa9#Xq9",
    "Pz7%40Zk7",
    "Pq4/Qw7",
    "Pv2@Vx8",
    "Ab1?Bb2#Cc3/Dd4@Ee5",
];

#[test]
fn passwords_are_never_printed_when_the_server_cannot_be_reached() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never.cgsnap");
    let out = out.to_str().unwrap();
    // Nothing listens on port 1.
    let dbs: Vec<(&str, String)> = SECRETS
        .iter()
        .flat_map(|&secret| {
            let conninfo_secret = secret.replace('\'', "");
            [
                format!("postgres://app:{secret}@127.0.0.1:1/test"),
                format!("postgresql://127.0.0.1:1/test?user=app&password={secret}"),
                format!("redis://:{secret}@127.0.0.1:1"),
                format!("redis://app:{secret}@127.0.0.1:1/0"),
                format!("host=127.0.0.1 port=1 user=app password='{conninfo_secret}' dbname=test"),
            ]
            .map(|db| (secret, db))
        })
        .collect();
    // One thread per address: a Redis client spends seconds retrying before it gives up.
    std::thread::scope(|scope| {
        for (secret, db) in &dbs {
            scope.spawn(move || {
                let runs = [
                    drill(&["--db", db, "--rows", "100", "--duration", "0.2"]),
                    drill(&["--json", "--db", db, "--rows", "100", "--duration", "0.2"]),
                    snapshot_tool(&["build", "--db", db, "--out", out]),
                ];
                for output in runs {
                    let text = format!(
                        "{}{}",
                        String::from_utf8_lossy(&output.stdout),
                        stderr(&output)
                    );
                    assert_eq!(output.status.code(), Some(2), "{text}");
                    assert!(text.starts_with("error: "), "{text}");
                    assert_hidden(&text, secret, db);
                }
            });
        }
    });
}

#[test]
fn passwords_are_never_printed_in_reports_or_snapshot_builds() {
    let Some(url) = server_url(&servers::POSTGRES) else {
        return;
    };
    // The test server trusts local connections, so any password is accepted.
    let Some((scheme, rest)) = url.split_once("://") else {
        panic!("DATABASE_URL is not a URL: {url}");
    };
    let Some((user, host)) = rest.split_once('@') else {
        panic!("DATABASE_URL has no user: {url}");
    };
    assert!(!user.contains(':'), "DATABASE_URL must carry no password");
    let table = unique_table("cg_cli_redact");
    // One password with `?`, `#`, an encoded `@` and `/` (a raw `@` makes the URL name
    // another host; the unreachable-server test covers it).
    let secret = "Sx3?Qc9#Rr%40Ee7/Tt5";
    let with_password = format!("{scheme}://{user}:{secret}@{host}");
    let text_report = drill(&[
        "--db",
        &with_password,
        "--table",
        &table,
        "--rows",
        "2000",
        "--duration",
        "0.3",
        "--threads",
        "2",
    ]);
    let json_report = drill(&[
        "--json",
        "--db",
        &with_password,
        "--table",
        &table,
        "--rows",
        "2000",
        "--duration",
        "0.3",
        "--threads",
        "2",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rows.cgsnap");
    let built = snapshot_tool(&[
        "build",
        "--db",
        &with_password,
        "--table",
        &table,
        "--out",
        out.to_str().unwrap(),
    ]);
    // The same server as a key=value connection string.
    let (host_port, dbname) = host.split_once('/').unwrap_or((host, "postgres"));
    let (hostname, port) = host_port.split_once(':').unwrap_or((host_port, "5432"));
    let conninfo_secret = "Kv1 ?Wq2#Xr3@Ys4/Zt5";
    let conninfo = format!(
        "host={hostname} port={port} user={user} password='{conninfo_secret}' dbname={dbname}"
    );
    let conninfo_report = drill(&[
        "--json",
        "--db",
        &conninfo,
        "--table",
        &table,
        "--rows",
        "2000",
        "--duration",
        "0.3",
        "--threads",
        "2",
    ]);
    drop_pg_table(&url, &table);

    for (what, output, secret) in [
        ("the text report", &text_report, secret),
        ("the JSON report", &json_report, secret),
        ("snapshot build", &built, secret),
        ("the key=value report", &conninfo_report, conninfo_secret),
    ] {
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{what}: {}", stderr(output));
        assert!(stdout.contains(hostname), "{what}: {stdout}");
        assert_hidden(&format!("{stdout}{}", stderr(output)), secret, what);
    }
    let report: Value = serde_json::from_slice(&json_report.stdout).unwrap();
    assert_eq!(report["setup"]["kind"], "postgres");
    let shown = report["setup"]["db"].as_str().unwrap();
    assert_eq!(shown, format!("PostgreSQL {scheme}://{user}:***@{host}"));
    let conninfo: Value = serde_json::from_slice(&conninfo_report.stdout).unwrap();
    assert!(
        conninfo["setup"]["db"]
            .as_str()
            .unwrap()
            .contains("password=***"),
        "{conninfo}"
    );
}
