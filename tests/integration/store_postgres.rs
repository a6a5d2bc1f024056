//! The PostgreSQL adapter against the real server at `DATABASE_URL` (set by `.ci/run`):
//! the conformance suite, schema and error handling, and the guard under concurrent tasks.
//! Without `DATABASE_URL` each test prints that it was skipped.
#![cfg(feature = "postgres")]

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::Make;
use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, GuardError};
use cuckoo_guard::stores::{PostgresStore, PostgresStoreError};
use cuckoo_guard::{CuckooFilter, Growth};

const INTEGER_KEYS: Make<i64, String> = Make {
    key: |k| k as i64,
    value: |v| format!("value {v}"),
};

async fn store(url: &str, table: &str) -> PostgresStore<i64, String> {
    PostgresStore::builder(url)
        .table(table)
        .create_table_if_missing(true)
        .connect()
        .await
        .unwrap()
}

async fn count_rows(url: &str, table: &str) -> i64 {
    common::pg_client(url)
        .await
        .query_one(&format!("SELECT count(*) FROM \"{table}\""), &[])
        .await
        .unwrap()
        .get(0)
}

async fn drop_table(url: &str, table: &str) {
    common::pg_client(url)
        .await
        .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
        .await
        .unwrap();
}

#[test]
fn conformance_with_integer_keys() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_conformance");
        common::conformance(Arc::new(store(&url, &table).await), INTEGER_KEYS).await;
        drop_table(&url, &table).await;
    });
}

#[test]
fn conformance_with_text_keys_and_bytea_values() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_text");
        let store = PostgresStore::<String, Vec<u8>>::builder(&url)
            .table(&table)
            .key_column("e-mail")
            .value_column("select")
            .create_table_if_missing(true)
            .connect()
            .await
            .unwrap();
        let make = Make {
            key: |k| format!("user{k:08}@example.com"),
            value: |v| v.to_le_bytes().to_vec(),
        };
        common::conformance(Arc::new(store), make).await;
        drop_table(&url, &table).await;
    });
}

/// A key column whose type is a domain over `bigint`, and one with a case-blind collation:
/// `get_many` answers as `get` does (the domain types `get`'s `$1` as `bigint`, and the
/// batch's array as `bigint[]`).
#[test]
fn get_many_answers_as_get_on_a_domain_key_column() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_domain");
        let domain = format!("{table}_id");
        let admin = common::pg_client(&url).await;
        admin
            .batch_execute(&format!(
                "CREATE DOMAIN {domain} AS bigint CHECK (VALUE >= 0); \
                 CREATE TABLE {table} (key {domain} PRIMARY KEY, value text NOT NULL); \
                 INSERT INTO {table} VALUES (1, 'one'), (3, 'three')"
            ))
            .await
            .unwrap();
        let store = store(&url, &table).await;
        let keys = [3, 2, 1, 3];
        let mut one_by_one = Vec::new();
        for key in &keys {
            one_by_one.push(store.get(key).await.unwrap());
        }
        assert_eq!(
            one_by_one,
            [
                Some("three".into()),
                None,
                Some("one".into()),
                Some("three".into())
            ]
        );
        assert_eq!(store.get_many(&keys).await.unwrap(), one_by_one);
        drop_table(&url, &table).await;
        admin
            .batch_execute(&format!("DROP DOMAIN {domain}"))
            .await
            .unwrap();
    });
}

#[test]
fn sampling() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_sample");
        let store = store(&url, &table).await;
        assert!(store.fast_sampling());
        common::sampling(&store, INTEGER_KEYS).await;
        drop_table(&url, &table).await;
    });
}

/// A table large enough for a block sample (200,000 rows in about 1,000 blocks, analyzed):
/// the sample plans about 3% of the blocks (32 at least), some 6,000 rows, so 100 come back
/// unless the server's block choice is wildly off; over 20 samples the keys reach every
/// tenth of the table, which a sample that kept to the first blocks it read would not.
/// Unanalyzed, the same table is sampled as one row per block would be (more blocks).
#[test]
fn sampling_a_large_table_by_block() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_sample_large");
        let store = store(&url, &table).await;
        let rows = 200_000i64;
        let fill = format!(
            "INSERT INTO \"{table}\" (key, value) \
             SELECT g, 'value ' || g FROM generate_series(0, {}) g",
            rows - 1
        );
        common::pg_client(&url)
            .await
            .batch_execute(&fill)
            .await
            .unwrap();
        let all: BTreeSet<i64> = (0..rows).collect();
        for analyzed in [false, true] {
            if analyzed {
                let analyze = format!("ANALYZE \"{table}\"");
                common::pg_client(&url)
                    .await
                    .batch_execute(&analyze)
                    .await
                    .unwrap();
            }
            let mut tenths = BTreeSet::new();
            for _ in 0..20 {
                let sample = store.sample_keys(100).await.unwrap();
                common::check_sample(&sample, 100, &all);
                assert_eq!(sample.len(), 100, "analyzed: {analyzed}");
                tenths.extend(sample.iter().map(|k| k * 10 / rows));
            }
            assert_eq!(
                tenths.len(),
                10,
                "analyzed: {analyzed}: tenths reached {tenths:?}"
            );
        }
        drop_table(&url, &table).await;
    });
}

#[test]
fn errors_surface_when_the_table_disappears() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_errors");
        let store = store(&url, &table).await;
        drop_table(&url, &table).await;
        common::errors_surface(&store, 1, "x".into()).await;
        // The server rejected the statement: nothing was applied, and the guard knows it.
        let error = store.put(&1, &"x".into()).await.unwrap_err();
        assert!(
            !PostgresStore::<i64, String>::write_outcome_unknown(&error),
            "{error}"
        );
    });
}

#[test]
fn schema_and_connection_problems_are_clear_errors() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let missing = PostgresStore::<i64, String>::builder(&url)
            .table(common::unique_name("cg_missing"))
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(missing, PostgresStoreError::MissingTable { .. }),
            "{missing}"
        );

        let table = common::unique_name("cg_loose");
        common::pg_client(&url)
            .await
            .batch_execute(&format!(
                "CREATE TABLE \"{table}\" (key BIGINT, value TEXT)"
            ))
            .await
            .unwrap();
        let builder = || PostgresStore::<i64, String>::builder(&url).table(&table);
        let not_unique = builder().connect().await.unwrap_err();
        assert!(
            matches!(not_unique, PostgresStoreError::KeyNotUnique { .. }),
            "{not_unique}"
        );
        let no_column = builder().value_column("nope").connect().await.unwrap_err();
        assert!(
            matches!(no_column, PostgresStoreError::MissingColumn { .. }),
            "{no_column}"
        );
        drop_table(&url, &table).await;

        let unreachable =
            PostgresStore::<i64, String>::builder("postgres://postgres@127.0.0.1:1/test")
                .connect()
                .await
                .unwrap_err();
        assert!(
            matches!(unreachable, PostgresStoreError::Connect { .. }),
            "{unreachable}"
        );
        assert!(unreachable
            .to_string()
            .starts_with("cannot connect to PostgreSQL"));
    });
}

#[test]
fn the_guard_stays_exact_under_concurrent_tasks() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_guard");
        let guard = Arc::new(AsyncCacheGuard::new(
            CuckooFilter::with_capacity(2_000),
            store(&url, &table).await,
        ));
        let (checked, present) =
            common::guard_concurrency(Arc::clone(&guard), INTEGER_KEYS, 2_000, 2_000).await;
        let rows = count_rows(&url, &table).await;
        println!("postgres: {checked} lookups of present keys checked; {rows} rows at the end");
        assert!(checked > 100, "too few lookups checked: {checked}");
        assert_eq!(rows as usize, present);
        assert_eq!(
            guard.filter().len(),
            present,
            "filter length differs from the row count"
        );
        drop_table(&url, &table).await;
    });
}

#[test]
fn warm_up_loads_existing_rows_and_then_blocks_misses() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_warm");
        let store = store(&url, &table).await;
        // 2,500 rows: two full pages of 1,000 and a partial last one.
        common::pg_client(&url)
            .await
            .batch_execute(&format!(
                "INSERT INTO \"{table}\" (key, value) \
                 SELECT g, 'value ' || g FROM generate_series(0, 2499) AS g"
            ))
            .await
            .unwrap();
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(2_500), store);
        let mut pages = 0;
        let done = guard.warm_up(1_000, |_| pages += 1).await.unwrap();
        assert_eq!((done.keys_loaded, pages), (2_500, 3));
        assert!((0..2_500i64).all(|k| guard.may_contain(&k)));
        assert_eq!(
            guard.get(&2_499).await.unwrap().as_deref(),
            Some("value 2499")
        );
        for k in 100_000..101_000i64 {
            assert_eq!(guard.get(&k).await.unwrap(), None);
        }
        let stats = guard.stats();
        assert!(
            stats.false_positives < 10,
            "{} of 1,000 misses reached PostgreSQL",
            stats.false_positives
        );
        drop_table(&url, &table).await;
    });
}

#[test]
fn a_create_refused_for_lack_of_room_never_reaches_the_table() {
    let Some(url) = common::servers::server_url(&common::servers::POSTGRES) else {
        return;
    };
    common::runtime().block_on(async {
        let table = common::unique_name("cg_full");
        let tiny = AsyncCacheGuard::new(
            CuckooFilter::builder()
                .capacity(1)
                .growth(Growth::Fixed)
                .seed(3)
                .build()
                .unwrap(),
            store(&url, &table).await,
        );
        tiny.warm_up(10, |_| {}).await.unwrap();
        let mut created = 0i64;
        let refused = loop {
            match tiny.put(&created, &"x".into()).await {
                Ok(_) => created += 1,
                Err(GuardError::FilterFull(_)) => break created,
                Err(e) => panic!("{e}"),
            }
        };
        let rows = count_rows(&url, &table).await;
        assert_eq!(rows, created, "the refused create reached the table");
        assert_eq!(tiny.store().get(&refused).await.unwrap(), None);
        drop_table(&url, &table).await;
    });
}
