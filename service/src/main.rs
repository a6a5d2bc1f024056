//! `users-service`: the users service on a TCP port (see the library docs).
//!
//! ```text
//! cargo run --release -p cuckoo-guard-users-service -- --seed 100000
//! cargo run --release -p cuckoo-guard-users-service -- --db postgres://postgres@127.0.0.1:5432/test
//! # one replica of a fleet (run several, each on its own ports, over the same table)
//! cargo run --release -p cuckoo-guard-users-service -- --db postgres://postgres@127.0.0.1:5432/test \
//!     --fleet-redis redis://127.0.0.1:6379 --listen 127.0.0.1:0 --admin-addr 127.0.0.1:0
//! ```
//!
//! The users routes are served on `--listen`; `/stats` and `/metrics` only on `--admin-addr`
//! (loopback by default), which must stay private.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use users_service::{build, Config, Database, FleetSettings};

/// An axum users service with the cuckoo-guard layer and a moka cache in front of SQLite or
/// PostgreSQL.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The database: an SQLite path (`sqlite:PATH`) or a `postgres://` URL.
    #[arg(long, default_value = "sqlite:users-service.db")]
    db: Database,
    /// The address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// The address of the admin routes (`/stats`, `/metrics`), or `off`; keep it private
    /// (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:3001", value_name = "ADDR|off")]
    admin_addr: AdminAddr,
    /// The users table (created if missing).
    #[arg(long, default_value = "users")]
    table: String,
    /// Insert users 1..=N (those missing) before starting.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Serve lookups without the guard's layer (cache, then database), for comparison.
    #[arg(long)]
    no_guard: bool,
    /// Database connections.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    connections: u16,
    /// Bytes the cache may hold (names, plus a fixed overhead per row).
    #[arg(long, default_value_t = 64 << 20)]
    cache_bytes: u64,
    /// The longest name accepted, in bytes; longer ones are refused with 422.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    max_name_bytes: u32,
    /// Run as a member of a fleet of replicas over the same table, coordinated by the Redis
    /// server at URL (`redis://[:password@]host:port[/db]`, with `maxmemory-policy
    /// noeviction`): a row created through any replica is never answered absent by another.
    #[arg(long, value_name = "URL")]
    fleet_redis: Option<String>,
    /// The fleet's name (every replica of the table must use the same one); default: the
    /// table's name.
    #[arg(long, value_name = "NAME", requires = "fleet_redis")]
    fleet_name: Option<String>,
    /// Answer 429 to clients whose lookups the filter keeps blocking, a client named by this
    /// request header (its first comma-separated value: `x-forwarded-for` behind a proxy).
    #[arg(long, value_name = "HEADER")]
    throttle_by: Option<String>,
    /// Throttle a client once 20 of its requests within a window of this many milliseconds
    /// were blocked.
    #[arg(long, value_name = "MS", default_value_t = 1_000, requires = "throttle_by",
          value_parser = clap::value_parser!(u64).range(1..))]
    throttle_window_ms: u64,
    /// Answer a throttled client 429 for this many milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000, requires = "throttle_by",
          value_parser = clap::value_parser!(u64).range(1..))]
    throttle_cool_down_ms: u64,
    /// Hold each 429 this many milliseconds before sending it (shorter than the cool-down;
    /// at most 1,000 answers held at once), so that a throttled client waiting for its
    /// answers sends at most one request per connection per hold.
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "throttle_by")]
    throttle_hold_ms: u64,
}

/// `--admin-addr`: an address, or `off`.
#[derive(Debug, Clone, Copy)]
enum AdminAddr {
    Off,
    At(SocketAddr),
}

impl std::str::FromStr for AdminAddr {
    type Err = std::net::AddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "off" {
            Ok(AdminAddr::Off)
        } else {
            s.parse().map(AdminAddr::At)
        }
    }
}

async fn bind(what: &str, addr: SocketAddr) -> Result<tokio::net::TcpListener, ExitCode> {
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            match listener.local_addr() {
                Ok(addr) => println!("{what} on http://{addr}"),
                Err(error) => eprintln!("{what} (address unknown: {error})"),
            }
            Ok(listener)
        }
        Err(error) => {
            eprintln!("error: cannot listen on {addr}: {error}");
            Err(ExitCode::from(2))
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut config = Config::new(args.db);
    config.table = args.table;
    config.seed = args.seed;
    config.guard = !args.no_guard;
    config.connections = usize::from(args.connections);
    config.cache_bytes = args.cache_bytes;
    config.max_name_bytes = args.max_name_bytes as usize;
    config.throttle_by = args.throttle_by;
    config.throttle_window = std::time::Duration::from_millis(args.throttle_window_ms);
    config.throttle_cool_down = std::time::Duration::from_millis(args.throttle_cool_down_ms);
    config.throttle_hold = std::time::Duration::from_millis(args.throttle_hold_ms);
    config.fleet = args.fleet_redis.map(|url| {
        let name = args.fleet_name.unwrap_or_else(|| config.table.clone());
        FleetSettings::new(url, name)
    });
    let (router, app) = match build(&config).await {
        Ok(built) => built,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = app.ready().await {
        eprintln!("error: {error}");
        return ExitCode::from(2);
    }
    let admin = match args.admin_addr {
        AdminAddr::Off => None,
        AdminAddr::At(addr) => match bind("admin (stats, metrics)", addr).await {
            Ok(listener) => Some(listener),
            Err(code) => return code,
        },
    };
    let listener = match bind("listening", args.listen).await {
        Ok(listener) => listener,
        Err(code) => return code,
    };
    if let Some(admin) = admin {
        let router = app.admin_router();
        tokio::spawn(async move {
            if let Err(error) = axum::serve(admin, router).await {
                eprintln!("error: admin listener: {error}");
            }
        });
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if let Err(error) = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        eprintln!("error: {error}");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
