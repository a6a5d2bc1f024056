//! `users-service`: the users service on a TCP port (see the library docs).
//!
//! ```text
//! cargo run --release -p cuckoo-guard-users-service -- --seed 100000
//! cargo run --release -p cuckoo-guard-users-service -- --db postgres://postgres@127.0.0.1:5432/test
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use users_service::{build, Config, Database};

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
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut config = Config::new(args.db);
    config.table = args.table;
    config.seed = args.seed;
    config.guard = !args.no_guard;
    config.connections = usize::from(args.connections);
    let (router, app) = match build(&config).await {
        Ok(built) => built,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("error: cannot listen on {}: {error}", args.listen);
            return ExitCode::from(2);
        }
    };
    if let Err(error) = app.ready().await {
        eprintln!("error: {error}");
        return ExitCode::from(2);
    }
    match listener.local_addr() {
        Ok(addr) => println!("listening on http://{addr}"),
        Err(error) => eprintln!("listening (address unknown: {error})"),
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
