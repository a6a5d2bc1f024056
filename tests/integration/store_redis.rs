//! The Redis adapter against the real server at `REDIS_URL` (set by `.ci/run`): the
//! conformance suite, error handling, and the guard under concurrent tasks. Without
//! `REDIS_URL` each test prints that it was skipped.
#![cfg(feature = "redis")]

use crate::common;

use std::sync::Arc;

use common::{Make, OwnRedis};
use cuckoo_guard::guard::{AsyncCacheGuard, AsyncStore, GuardError, Written};
use cuckoo_guard::stores::{RedisStore, RedisStoreError};
use cuckoo_guard::CuckooFilter;

const TEXT: Make<String, String> = Make {
    key: |k| format!("key:{k:08}"),
    value: |v| format!("value {v}"),
};

/// The test's own connection to the server, beside the store's.
async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn cleanup<K, V>(url: &str, store: &RedisStore<K, V>) {
    let _: () = redis::cmd("DEL")
        .arg(store.rows_key())
        .arg(store.index_key())
        .query_async(&mut connection(url).await)
        .await
        .unwrap();
}

#[test]
fn conformance_with_text_keys() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let store = Arc::new(
            RedisStore::<String, String>::connect(&url, &common::unique_name("cg"))
                .await
                .unwrap(),
        );
        common::conformance(Arc::clone(&store), TEXT).await;
        cleanup(&url, &store).await;
    });
}

#[test]
fn conformance_with_integer_keys_and_binary_values() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let store = Arc::new(
            RedisStore::<i64, Vec<u8>>::connect(&url, &common::unique_name("cg"))
                .await
                .unwrap(),
        );
        let make = Make {
            key: |k| k as i64,
            value: |v| v.to_le_bytes().to_vec(),
        };
        common::conformance(Arc::clone(&store), make).await;
        cleanup(&url, &store).await;
    });
}

#[test]
fn sampling() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let store = RedisStore::<String, String>::connect(&url, &common::unique_name("cg"))
            .await
            .unwrap();
        assert!(store.fast_sampling());
        common::sampling(&store, TEXT).await;
        assert!(store.fast_sampling(), "the server took HRANDFIELD");
        cleanup(&url, &store).await;
    });
}

/// The sample is of the rows' hash: a row written over another connection without its index
/// entry (which scans miss) is drawn too.
#[test]
fn sampling_reaches_rows_missing_from_the_index() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let store = RedisStore::<String, String>::connect(&url, &common::unique_name("cg"))
            .await
            .unwrap();
        store.put(&"indexed".into(), &"v".into()).await.unwrap();
        let _: () = redis::cmd("HSET")
            .arg(store.rows_key())
            .arg("around the store")
            .arg("v")
            .query_async(&mut connection(&url).await)
            .await
            .unwrap();
        assert_eq!(
            store.scan_keys(None, 10).await.unwrap().keys,
            vec!["indexed"]
        );
        let mut sample = store.sample_keys(10).await.unwrap();
        sample.sort();
        assert_eq!(sample, vec!["around the store", "indexed"]);
        cleanup(&url, &store).await;
    });
}

/// A server that refuses `HRANDFIELD` (renamed away here, as on servers before 6.2) is
/// sampled by a scan of the index, and the store says sampling is no longer fast.
#[test]
fn a_server_without_hrandfield_is_sampled_by_scan() {
    let Some(server) = OwnRedis::start(&["--rename-command", "HRANDFIELD", ""]) else {
        return;
    };
    let url = server.url();
    common::runtime().block_on(async {
        let store = RedisStore::<String, String>::connect(&url, "cg_sample")
            .await
            .unwrap();
        assert!(store.fast_sampling());
        common::sampling(&store, TEXT).await;
        assert!(!store.fast_sampling(), "the server refused HRANDFIELD");
    });
}

#[test]
fn errors_surface_when_the_keys_hold_other_types() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let store = RedisStore::<String, String>::connect(&url, &common::unique_name("cg"))
            .await
            .unwrap();
        let _: () = redis::pipe()
            .cmd("SET")
            .arg(store.rows_key())
            .arg("not a hash")
            .cmd("SET")
            .arg(store.index_key())
            .arg("not a sorted set")
            .query_async(&mut connection(&url).await)
            .await
            .unwrap();
        common::errors_surface(&store, "k".into(), "v".into()).await;
        // The scripts check types before writing, so the failure is known to change nothing.
        let error = store.put(&"k".into(), &"v".into()).await.unwrap_err();
        assert!(
            !RedisStore::<String, String>::write_outcome_unknown(&error),
            "{error}"
        );
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(10), store);
        assert!(matches!(
            guard.put(&"k".into(), &"v".into()).await,
            Err(GuardError::Store(_))
        ));
        assert_eq!(guard.filter().len(), 0, "a rejected create left its copy");
        cleanup(&url, guard.store()).await;
    });
}

#[test]
fn warm_up_loads_existing_rows_and_then_blocks_misses() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let store = RedisStore::<String, String>::connect(&url, &common::unique_name("cg_warm"))
            .await
            .unwrap();
        // 2,500 rows: two full pages of 1,000 and a partial last one.
        for k in 0..2_500 {
            store.put(&(TEXT.key)(k), &(TEXT.value)(k)).await.unwrap();
        }
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(2_500), store);
        let mut pages = 0;
        let done = guard.warm_up(1_000, |_| pages += 1).await.unwrap();
        assert_eq!((done.keys_loaded, pages), (2_500, 3));
        assert!((0..2_500).all(|k| guard.may_contain(&(TEXT.key)(k))));
        assert_eq!(
            guard.get(&(TEXT.key)(2_499)).await.unwrap(),
            Some((TEXT.value)(2_499))
        );
        for k in 100_000..101_000 {
            assert_eq!(guard.get(&(TEXT.key)(k)).await.unwrap(), None);
        }
        let stats = guard.stats();
        assert!(
            stats.false_positives < 10,
            "{} of 1,000 misses reached Redis",
            stats.false_positives
        );
        cleanup(&url, guard.store()).await;
    });
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    // Needs no server: nothing listens on port 1.
    common::runtime().block_on(async {
        let error = RedisStore::<String, String>::connect("redis://127.0.0.1:1", "x")
            .await
            .unwrap_err();
        assert!(matches!(error, RedisStoreError::Connect { .. }), "{error}");
        assert!(error.to_string().starts_with("cannot connect to Redis"));
        let invalid = RedisStore::<String, String>::connect("not a url", "x")
            .await
            .unwrap_err();
        assert!(
            matches!(invalid, RedisStoreError::Connect { .. }),
            "{invalid}"
        );
    });
}

#[test]
fn the_guard_stays_exact_under_concurrent_tasks() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let store = RedisStore::<String, String>::connect(&url, &common::unique_name("cg"))
            .await
            .unwrap();
        let guard = Arc::new(AsyncCacheGuard::new(
            CuckooFilter::with_capacity(5_000),
            store,
        ));
        let (checked, present) =
            common::guard_concurrency(Arc::clone(&guard), TEXT, 5_000, 10_000).await;
        let mut connection = connection(&url).await;
        let rows: usize = redis::cmd("HLEN")
            .arg(guard.store().rows_key())
            .query_async(&mut connection)
            .await
            .unwrap();
        let indexed: usize = redis::cmd("ZCARD")
            .arg(guard.store().index_key())
            .query_async(&mut connection)
            .await
            .unwrap();
        println!("redis: {checked} lookups of present keys checked; {rows} rows at the end");
        assert!(checked > 100, "too few lookups checked: {checked}");
        assert_eq!(
            (rows, indexed),
            (present, present),
            "rows and index disagree"
        );
        assert_eq!(
            guard.filter().len(),
            present,
            "filter length differs from the row count"
        );
        cleanup(&url, guard.store()).await;
    });
}

/// A row whose index entry was lost (removed by hand here, as an eviction or a partial
/// restore would) is indexed again by its next write, so a warm-up and a rebuild find it;
/// a delete removes an index entry that outlived its row.
#[test]
fn a_lost_index_entry_is_repaired_by_the_next_write() {
    let Some(url) = common::servers::server_url(&common::servers::REDIS) else {
        return;
    };
    common::runtime().block_on(async {
        let store = RedisStore::<String, String>::connect(&url, &common::unique_name("cg_index"))
            .await
            .unwrap();
        let (lost, kept) = ("lost".to_string(), "kept".to_string());
        store.put(&lost, &"v1".to_string()).await.unwrap();
        store.put(&kept, &"v1".to_string()).await.unwrap();
        let mut conn = connection(&url).await;
        let removed: i64 = redis::cmd("ZREM")
            .arg(store.index_key())
            .arg(&lost)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(removed, 1);

        assert_eq!(
            store.put(&lost, &"v2".to_string()).await.unwrap(),
            Written::Updated
        );
        let guard = AsyncCacheGuard::new(CuckooFilter::with_capacity(1_000), store);
        guard.warm_up(100, |_| {}).await.unwrap();
        assert!(guard.may_contain(&lost), "the warm-up loaded the row");
        assert_eq!(guard.get(&lost).await.unwrap().as_deref(), Some("v2"));
        let rebuilt = guard.rebuild().await.unwrap();
        assert!(
            guard.may_contain(&lost),
            "the rebuild kept the row: {rebuilt:?}"
        );

        // An index entry without its row goes with the next delete of the key.
        let store = guard.store();
        let _: i64 = redis::cmd("HDEL")
            .arg(store.rows_key())
            .arg(&kept)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!store.delete(&kept).await.unwrap());
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(store.index_key())
            .arg(&kept)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(score, None, "the stale index entry is gone");
        cleanup(&url, store).await;
    });
}

/// A server that may evict the store's keys is refused unless the builder opts in; the
/// policies that never evict keys without a time to live are accepted.
#[test]
fn a_server_that_may_evict_the_keys_is_refused_unless_allowed() {
    let Some(server) = OwnRedis::start(&["--maxmemory-policy", "allkeys-lru"]) else {
        return;
    };
    let url = server.url();
    common::runtime().block_on(async {
        let error = RedisStore::<String, String>::connect(&url, "cg_policy")
            .await
            .unwrap_err();
        assert!(
            matches!(&error, RedisStoreError::EvictionPolicy { policy } if policy == "allkeys-lru"),
            "{error}"
        );
        assert!(error.to_string().contains("noeviction"), "{error}");

        let store = RedisStore::<String, String>::builder(&url, "cg_policy")
            .allow_eviction(true)
            .connect()
            .await
            .unwrap();
        assert_eq!(store.eviction_policy(), Some("allkeys-lru"));
        store.put(&"k".into(), &"v".into()).await.unwrap();

        let mut conn = connection(&url).await;
        for (policy, accepted) in [
            ("allkeys-lfu", false),
            ("allkeys-random", false),
            ("volatile-lru", true),
            ("volatile-ttl", true),
            ("noeviction", true),
        ] {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-policy")
                .arg(policy)
                .query_async(&mut conn)
                .await
                .unwrap();
            let store = RedisStore::<String, String>::connect(&url, "cg_policy").await;
            assert_eq!(store.is_ok(), accepted, "{policy}: {store:?}");
            if let Ok(store) = store {
                assert_eq!(store.eviction_policy(), Some(policy));
            }
        }
    });
}

/// A server without `CONFIG` cannot be checked: the store connects and says so.
#[test]
fn a_server_without_config_is_accepted_unchecked() {
    let Some(server) = OwnRedis::start(&["--rename-command", "CONFIG", ""]) else {
        return;
    };
    let url = server.url();
    common::runtime().block_on(async {
        let store = RedisStore::<String, String>::connect(&url, "cg_policy")
            .await
            .unwrap();
        assert_eq!(store.eviction_policy(), None);
        store.put(&"k".into(), &"v".into()).await.unwrap();
        assert_eq!(store.get(&"k".into()).await.unwrap().as_deref(), Some("v"));
    });
}
