//! Where the tests find PostgreSQL and Redis. Shared by the library's tests
//! (`tests/common/mod.rs`), the tool's (`cli/tests/cli.rs`) and the users service's
//! (`service/tests/http.rs`), the last two through `#[path]`.
//!
//! `DATABASE_URL` and `REDIS_URL` name the servers; unset, they default to the local
//! addresses `.ci/run` uses (`postgres://postgres@127.0.0.1:5432/test`,
//! `redis://127.0.0.1:6379`). A test skips only when the variable is unset and nothing
//! answers at the default address, and then says so on the terminal's stderr, past the test
//! harness's capture, so a skip shows without `--show-output`, with a running count of the
//! binary's skipped server tests. With `CG_REQUIRE_SERVERS=1`
//! (as `.ci/run` sets) a missing server fails the test instead.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A server the tests use: its variable, its default URL and the address that URL names.
pub(crate) struct Server {
    pub(crate) variable: &'static str,
    pub(crate) name: &'static str,
    pub(crate) default_url: &'static str,
    pub(crate) default_addr: &'static str,
}

pub(crate) const POSTGRES: Server = Server {
    variable: "DATABASE_URL",
    name: "PostgreSQL",
    default_url: "postgres://postgres@127.0.0.1:5432/test",
    default_addr: "127.0.0.1:5432",
};

pub(crate) const REDIS: Server = Server {
    variable: "REDIS_URL",
    name: "Redis",
    default_url: "redis://127.0.0.1:6379",
    default_addr: "127.0.0.1:6379",
};

/// The URL of `server` for the calling test, or `None` (after a notice on stderr) if the test
/// must skip.
pub(crate) fn server_url(server: &Server) -> Option<String> {
    if let Ok(url) = std::env::var(server.variable) {
        if !url.is_empty() {
            return Some(url);
        }
    }
    let addr: SocketAddr = server.default_addr.parse().expect("a literal address");
    if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
        return Some(server.default_url.to_owned());
    }
    // The test harness names each test's thread after the test.
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    let notice = format!(
        "SKIPPED {test}: no {} at {} and {} is not set",
        server.name, server.default_addr, server.variable
    );
    assert!(
        std::env::var("CG_REQUIRE_SERVERS").as_deref() != Ok("1"),
        "{notice} (CG_REQUIRE_SERVERS=1 forbids skipping)"
    );
    // libtest has no "skipped" outcome, so each notice carries the running count: the
    // largest count a test binary prints is its total.
    static SKIPPED: AtomicUsize = AtomicUsize::new(0);
    // ORDERING: Relaxed; a count for display, publishes nothing.
    let skipped = SKIPPED.fetch_add(1, Ordering::Relaxed) + 1;
    // Straight to the process's stderr: the harness captures `eprintln!`, not this.
    let _ = writeln!(
        std::io::stderr().lock(),
        "{notice} ({skipped} server test(s) skipped by this test binary so far)"
    );
    None
}

/// `url` (a PostgreSQL URL or key=value string) with commits that return before their WAL
/// record reaches the disk (`synchronous_commit=off`). For tests that commit many thousands
/// of rows and check what the guard answers, not what survives a server crash: a commit is
/// visible to every other session when it returns either way, and the flush would be most
/// of their time. Never for a test that stops or kills the server.
#[allow(dead_code)]
pub(crate) fn without_flush_wait(url: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}options=-c%20synchronous_commit%3Doff")
    } else {
        format!("{url} options='-c synchronous_commit=off'")
    }
}
