//! The `hookd` command line: `hookd serve [--config FILE] [--data-dir DIR] [--grpc-addr
//! HOST:PORT] [--http-addr HOST:PORT] [--log-level LEVEL] [--log-format text|json]
//! [--allow-destination CIDR]...` runs the server (flags override the file; the file
//! overrides the defaults; every flag also reads a `HOOKD_*` variable). The other
//! subcommands (`stats`, `enqueue`, `endpoints`, `dlq`, `message`) are a client of a
//! running hookd: see the crate `hookd-ctl`.

use hookd_ctl::{out, outln};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use crate::config::Config;

/// `hookd --version`: the package version and the commit (`build.rs`).
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HOOKD_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "hookd",
    version = VERSION,
    about = "A durable webhook delivery queue with a gRPC API"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    connection: hookd_ctl::Connection,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Make or hash a bearer token for `[[auth.tokens]]`.
    #[command(subcommand)]
    Token(TokenCmd),
    /// Ask hookd's gRPC health service (`grpc.health.v1`, the whole server by default):
    /// exit 0 when it answers SERVING, 3 when it is unreachable, answers NOT_SERVING
    /// (its storage failed, or it is stopping) or does not answer within --timeout-ms.
    /// For container health checks and probes: the image has no shell or curl.
    Health {
        /// A service name instead of the whole server (`hookd.v1.Hookd`).
        #[arg(long, default_value = "")]
        service: String,
        #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
        timeout_ms: u64,
    },
    /// The configuration file: print the annotated defaults, or check a file.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Cut a damaged write-ahead log at its first damage so that hookd starts again.
    /// hookd refuses to start on damage (a bad record with whole records after it, a
    /// segment cut short or missing) and names it; this says exactly what cutting there
    /// drops (positions, records, the messages they enqueued) and, without --dry-run, does
    /// it. hookd must be stopped (the data file is locked while it runs). Exit code 0 when
    /// the log opens afterwards (or already did), 2 when it cannot be repaired here.
    Repair(RepairArgs),
    /// Serve the Model Context Protocol on standard input and output, as a client of the
    /// hookd at --server (with --token): an agent's MCP client starts it as a command.
    /// Its tools publish and enqueue events, read messages, list, analyse and replay dead
    /// letters, and list endpoints, subscriptions, event types and stats, each allowed what
    /// its gRPC call is. Nothing but MCP is written to standard output.
    Mcp,
    #[command(flatten)]
    Ctl(hookd_ctl::Ctl),
}

#[derive(Debug, clap::Args)]
struct RepairArgs {
    /// TOML config file (for `data_dir`).
    #[arg(long, env = "HOOKD_CONFIG")]
    config: Option<PathBuf>,
    /// The data directory (default ./hookd-data, or the config's).
    #[arg(long, env = "HOOKD_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Say what would be dropped; change nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, Subcommand)]
enum TokenCmd {
    /// Print a new random token and the `sha256` line for the config.
    New,
    /// Read a token from standard input and print its `sha256` for the config.
    Hash,
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Print the complete configuration with every key at its default, annotated (the
    /// same text as deploy/hookd.toml).
    PrintDefault,
    /// Check the configuration `serve` would run with (the same flags and HOOKD_*
    /// variables): every key, the token, TLS and key files, the sources, the exposure
    /// rule; then say what it would listen on. Nothing is bound or opened. Exit code 0
    /// when `serve` would accept it, 2 when not.
    Check(Box<CheckArgs>),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The config file to check: the same as `--config FILE`, and taken instead of
    /// --config or HOOKD_CONFIG when given.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// TOML config file; every key is optional.
    #[arg(long, env = "HOOKD_CONFIG")]
    config: Option<PathBuf>,
    /// Where the database lives (default ./hookd-data).
    #[arg(long, env = "HOOKD_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// gRPC listen address (default 127.0.0.1:7700).
    #[arg(long, env = "HOOKD_GRPC_ADDR")]
    grpc_addr: Option<SocketAddr>,
    /// HTTP listen address for /healthz and /metrics (default 127.0.0.1:7701).
    #[arg(long, env = "HOOKD_HTTP_ADDR")]
    http_addr: Option<SocketAddr>,
    /// Ingest listen address for `POST /in/{source}` (default 127.0.0.1:7702): the one
    /// listener meant to face providers.
    #[arg(long, env = "HOOKD_INGEST_ADDR")]
    ingest_addr: Option<SocketAddr>,
    /// Log filter, e.g. `info` or `hookd=debug`; RUST_LOG is used when this is not given.
    #[arg(long, env = "HOOKD_LOG_LEVEL")]
    log_level: Option<String>,
    /// `text` (colour only on a terminal) or `json` (one object per line).
    #[arg(long, env = "HOOKD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Let push delivery reach this network although it is loopback, private, link-local,
    /// ..., optionally on one port or a range (e.g. 127.0.0.1/32:8080, 10.0.0.0/8). Repeatable;
    /// added to `delivery.allow_destinations`. From the environment: comma-separated.
    #[arg(
        long = "allow-destination",
        value_name = "CIDR[:PORT[-PORT]]",
        env = "HOOKD_ALLOW_DESTINATIONS",
        value_delimiter = ','
    )]
    allow_destinations: Vec<hookd_delivery::guard::AllowRule>,
    /// Serve on a non-loopback address without authentication (`auth.insecure`); logs a
    /// warning. Without it such a configuration refuses to start.
    #[arg(long, env = "HOOKD_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    insecure: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The subcommands that are not a client of a running hookd: the client's connection
/// flags (`hookd_ctl::Connection`, global so that they may come before or after a client
/// subcommand) are neither listed in their help nor taken on their command line.
const NOT_CLIENTS: [&str; 4] = ["serve", "token", "config", "repair"];

/// The client's connection flags: clap id, long name, and whether it takes a value.
const CONNECTION_FLAGS: [(&str, &str, bool); 6] = [
    ("server", "server", true),
    ("token", "token", true),
    ("json", "json", false),
    ("ca_file", "ca-file", true),
    ("cert", "cert", true),
    ("key", "key", true),
];

/// The command line. Each of [`NOT_CLIENTS`] holds hidden, local stand-ins of the global
/// connection flags (clap does not propagate a global flag to a subcommand that has an
/// argument of its id): their help lists only their own flags, and a connection flag
/// written there is refused, naming it.
fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let mut command = Cli::command();
    for name in NOT_CLIENTS {
        command = command.mut_subcommand(name, |sub| {
            CONNECTION_FLAGS
                .into_iter()
                .fold(sub, |sub, (id, long, takes_value)| {
                    let action = if takes_value {
                        clap::ArgAction::Set
                    } else {
                        clap::ArgAction::SetTrue
                    };
                    sub.arg(clap::Arg::new(id).long(long).hide(true).action(action))
                })
        });
    }
    let matches = command.try_get_matches_from_mut(args)?;
    if let Some((name, sub)) = matches.subcommand()
        && NOT_CLIENTS.contains(&name)
        && let Some(long) = CONNECTION_FLAGS
            .into_iter()
            .find(|(id, _, _)| sub.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
            .map(|(_, long, _)| long)
    {
        return Err(command.error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "--{long} is a flag of the client subcommands (stats, enqueue, endpoints, ...); `hookd {name}` does not take it"
            ),
        ));
    }
    Cli::from_arg_matches(&matches)
}

/// The binary's entry point; also the entry point of the test harness's crash-test binary.
pub fn main() -> ExitCode {
    main_from(std::env::args_os())
}

/// [`main`] with its arguments given (the first is the program name): how `hookd-loadtest`
/// runs the hookd it measures as a child process of its own binary.
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match parse(args) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Token(cmd) => token(cmd),
        Command::Mcp => mcp(&cli.connection),
        Command::Health {
            service,
            timeout_ms,
        } => hookd_ctl::run_health(cli.connection, service, timeout_ms),
        Command::Config(ConfigCmd::PrintDefault) => {
            out!("{}", crate::config::DEFAULT_TOML);
            ExitCode::SUCCESS
        }
        Command::Config(ConfigCmd::Check(check)) => {
            let CheckArgs { file, serve } = *check;
            let args = ServeArgs {
                config: file.or(serve.config),
                ..serve
            };
            match load_config(&args).map_err(|e| e.to_string()).and_then(|c| {
                crate::app::preflight(&c)
                    .map(|()| c)
                    .map_err(|e| e.to_string())
            }) {
                Ok(config) => {
                    outln!(
                        "configuration ok: data_dir {}, gRPC {}, HTTP {}, ingest {}, {} source(s), {}",
                        config.data_dir.display(),
                        config.grpc_addr,
                        config.http_addr,
                        config.ingest_addr,
                        config.sources.len(),
                        if config.auth.tokens.is_empty() && config.auth.clients.is_empty() {
                            "no authentication (loopback only)".to_owned()
                        } else {
                            format!(
                                "{} token(s), {} client certificate name(s)",
                                config.auth.tokens.len(),
                                config.auth.clients.len()
                            )
                        }
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("hookd: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Repair(args) => match repair(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("hookd repair: {e}");
                ExitCode::from(2)
            }
        },
        Command::Ctl(cmd) => hookd_ctl::run(cli.connection, cmd),
    }
}

/// `hookd repair [--dry-run]`: see [`Command::Repair`].
fn repair(args: &RepairArgs) -> Result<ExitCode, String> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    if let Some(d) = &args.data_dir {
        config.data_dir = d.clone();
    }
    let dir = &config.data_dir;
    if !dir.join("hookd.redb").exists() {
        return Err(format!("no hookd data in {}", dir.display()));
    }
    let cannot_open = |e: hookd_storage::store::StoreError| {
        format!(
            "cannot open {} (is hookd still running?): {e}",
            dir.join("hookd.redb").display()
        )
    };
    // A dry run reads a copy of the data file: redb's opens and checks may write to the
    // file they open, and a dry run changes nothing.
    let copy = if args.dry_run {
        let copy = tempfile::Builder::new()
            .prefix("hookd-repair-dry-run-")
            .tempdir()
            .map_err(|e| format!("cannot make a directory for the dry run's copy: {e}"))?;
        std::fs::copy(dir.join("hookd.redb"), copy.path().join("hookd.redb")).map_err(|e| {
            format!(
                "cannot copy hookd.redb to {} for the dry run: {e}",
                copy.path().display()
            )
        })?;
        Some(copy)
    } else {
        None
    };
    let file_dir = copy.as_ref().map_or(dir.as_path(), |c| c.path());
    let (store, salvaged) = match hookd_storage::store::Store::open_checked(file_dir) {
        Ok(store) => (store, false),
        Err(e @ hookd_storage::store::StoreError::Integrity { .. }) => {
            outln!("found: {e}");
            salvage(file_dir, args.dry_run)?;
            if args.dry_run {
                outln!("--dry-run: nothing was changed");
                return Ok(ExitCode::SUCCESS);
            }
            (
                hookd_storage::store::Store::open(dir).map_err(cannot_open)?,
                true,
            )
        }
        Err(e) => return Err(cannot_open(e)),
    };
    let log_damaged = repair_log(&store, dir, args.dry_run)?;
    if !args.dry_run {
        // The log opens now (the proof of its repair), and replaying it brings the file up
        // to date, so the records checked below are the ones hookd would read.
        let log = hookd_storage::wal::OsDir::new(dir).map_err(|e| e.to_string())?;
        let (_, replayed) = store
            .open_log(Box::new(log), hookd_storage::store::DEFAULT_SEGMENT_BYTES)
            .map_err(|e| format!("the log still does not open: {e}"))?;
        if log_damaged {
            outln!(
                "repaired: the log opens and replays {} record(s)",
                replayed.records
            );
        }
    }
    if args.dry_run {
        // Records in the log are checked too (the log is read, not replayed).
        let log = hookd_storage::wal::OsDir::new(dir).map_err(|e| e.to_string())?;
        store.read_log(Box::new(log));
    }
    let mut records_damaged = repair_records(&store, args.dry_run)?;
    if !args.dry_run {
        let orphans = store.drop_orphans().map_err(|e| e.to_string())?;
        if !orphans.is_empty() {
            records_damaged = true;
            outln!(
                "removed the rows the log wrote again for {} removed message(s):",
                orphans.len()
            );
            for id in orphans {
                outln!("  {id}");
            }
        }
    }
    drop(store);
    if !args.dry_run {
        hookd_storage::store::Store::closed_cleanly(dir).map_err(|e| e.to_string())?;
    }
    match (args.dry_run, salvaged || log_damaged || records_damaged) {
        (true, true) => outln!("--dry-run: nothing was changed"),
        (false, true) => outln!("hookd can start"),
        (_, false) => outln!("nothing to repair"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The write-ahead log's part of `hookd repair`: what cutting at its damage drops, and
/// the cut unless `dry_run`. Whether the log was damaged.
fn repair_log(
    store: &hookd_storage::store::Store,
    dir: &std::path::Path,
    dry_run: bool,
) -> Result<bool, String> {
    let from = store.applied().map_err(|e| e.to_string())?;
    let log = hookd_storage::wal::OsDir::new(dir).map_err(|e| e.to_string())?;
    let plan = hookd_storage::wal::plan_repair(&log, from).map_err(|e| e.to_string())?;
    let Some(problem) = &plan.problem else {
        outln!("the write-ahead log in {} is whole", dir.display());
        return Ok(false);
    };
    outln!("found: {problem}");
    if let Some((segment, at)) = &plan.cut {
        outln!("repair cuts {segment} at offset {at}");
    }
    for name in &plan.remove {
        outln!("repair deletes {name}");
    }
    let enqueued = |record: &[u8]| -> Vec<hookd_core::ids::MessageId> {
        use hookd_storage::store::rowlog::{Change, TableId, decode};
        // A record that does not decode is still dropped; it is counted, not listed.
        decode(record)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|change| match change {
                Change::Put(TableId::Messages, key, _) => <[u8; 16]>::try_from(key)
                    .ok()
                    .map(|k| hookd_core::ids::MessageId(u128::from_be_bytes(k))),
                _ => None,
            })
            .collect()
    };
    let messages: Vec<_> = plan.dropped.iter().flat_map(|(_, r)| enqueued(r)).collect();
    if let Some((at, record)) = &plan.damaged {
        let ids = enqueued(record);
        outln!(
            "the damaged record at position {at} goes too; as read (its checksum failed, so this may be wrong) it enqueued {} message(s){}",
            ids.len(),
            if ids.is_empty() { "" } else { ":" }
        );
        for id in ids {
            outln!("  {id} (from the damaged record)");
        }
    }
    outln!(
        "this drops {} bytes of the log: {} whole record(s) after the checkpoint (at position {from}){}, enqueueing {} message(s){}",
        plan.dropped_bytes,
        plan.dropped.len(),
        match (plan.dropped.first(), plan.dropped.last()) {
            (Some(a), Some(b)) => format!(", positions {} to {}", a.0, b.0),
            _ => String::new(),
        },
        messages.len(),
        if messages.is_empty() { "" } else { ":" }
    );
    for id in &messages {
        outln!("  {id}");
    }
    if !dry_run {
        hookd_storage::wal::repair(&log, &plan).map_err(|e| e.to_string())?;
    }
    Ok(true)
}

/// `hookd repair` on a data file that fails redb's integrity check: what salvaging its
/// readable, whole records keeps and drops, and the salvage unless `dry_run`.
fn salvage(dir: &std::path::Path, dry_run: bool) -> Result<(), String> {
    let found = hookd_storage::store::salvage::salvage(dir, dry_run).map_err(|e| e.to_string())?;
    for (table, why) in &found.unreadable {
        outln!(
            "table {table} cannot be read to its end ({why}): the rows after that point are lost"
        );
    }
    outln!(
        "{} record(s) fail their checksum{}",
        found.damaged.len(),
        if found.damaged.is_empty() { "" } else { ":" }
    );
    for row in &found.damaged {
        outln!("  {row}");
    }
    outln!(
        "repair keeps {} record(s) in a new hookd.redb and leaves out {} message(s) whole{}",
        found.kept,
        found.messages.len(),
        if found.messages.is_empty() { "" } else { ":" }
    );
    for id in &found.messages {
        outln!("  {id}");
    }
    if let Some(kept) = &found.kept_damaged {
        outln!("salvaged: the damaged file is kept as {}", kept.display());
    }
    Ok(())
}

/// The data file's part of `hookd repair`: every record whose checksum fails, what
/// removing them drops, and the removal unless `dry_run`. Whether any was damaged.
fn repair_records(store: &hookd_storage::store::Store, dry_run: bool) -> Result<bool, String> {
    let damaged = store.damaged_rows().map_err(|e| e.to_string())?;
    if damaged.is_empty() {
        outln!("every record in hookd.redb passes its checksum");
        return Ok(false);
    }
    outln!(
        "found: {} record(s) in hookd.redb fail their checksum:",
        damaged.len()
    );
    for row in &damaged {
        outln!("  {row}");
    }
    let plan = hookd_storage::store::Store::damage_plan(&damaged);
    outln!(
        "repair removes {} message(s) whole (payload, schedule, attempts, dead-letter row){}",
        plan.messages.len(),
        if plan.messages.is_empty() { "" } else { ":" }
    );
    for id in &plan.messages {
        outln!("  {id}");
    }
    for row in &plan.rows {
        outln!("repair removes the row {row}");
    }
    if dry_run {
        return Ok(true);
    }
    store.remove_damaged(&damaged).map_err(|e| e.to_string())?;
    let left = store.damaged_rows().map_err(|e| e.to_string())?;
    if !left.is_empty() {
        return Err(format!(
            "{} damaged record(s) are still there after the removal",
            left.len()
        ));
    }
    outln!("repaired: every record left passes its checksum");
    Ok(true)
}

/// `hookd mcp`: MCP over stdio until the client closes standard input.
fn mcp(connection: &hookd_ctl::Connection) -> ExitCode {
    let runtime = match hookd_ctl::build_runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let served = runtime.block_on(async {
        let api = hookd_ctl::lazy_api(connection)?;
        crate::mcp::serve_stdio(api).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("hookd mcp: {why}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let filter = match &args.log_level {
        Some(level) => EnvFilter::try_new(level),
        None => EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new("info")),
    };
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            eprintln!("hookd: bad log filter: {e}");
            return ExitCode::from(2);
        }
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Json => logs.json().with_current_span(false).init(),
        LogFormat::Text => {
            use std::io::IsTerminal;
            logs.with_ansi(std::io::stderr().is_terminal()).init();
        }
    }

    let config = match load_config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hookd: {e}");
            return ExitCode::from(2);
        }
    };

    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.on_thread_park(crate::memory::parked);
    let runtime = match hookd_ctl::build_runtime(builder) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let result = runtime.block_on(async move {
        let bind = |name: &'static str, addr: SocketAddr| async move {
            tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot listen on the {name} address {addr}: {e}"),
                )
            })
        };
        let grpc = bind("gRPC (grpc_addr)", config.grpc_addr).await?;
        let http = bind("HTTP (http_addr)", config.http_addr).await?;
        let ingest = bind("ingest (ingest_addr)", config.ingest_addr).await?;
        let listeners = crate::app::Listeners { grpc, http, ingest };
        crate::app::run(config, listeners, shutdown_signal())
            .await
            .map_err(std::io::Error::other)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The configuration `serve` runs with: the file (or the defaults), then the flags and
/// their HOOKD_* variables, validated.
fn load_config(args: &ServeArgs) -> Result<Config, crate::config::ConfigError> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(d) = &args.data_dir {
        config.data_dir = d.clone();
    }
    if let Some(a) = args.grpc_addr {
        config.grpc_addr = a;
    }
    if let Some(a) = args.http_addr {
        config.http_addr = a;
    }
    if let Some(a) = args.ingest_addr {
        config.ingest_addr = a;
    }
    config
        .delivery
        .allow_destinations
        .extend(args.allow_destinations.iter().cloned());
    config.auth.insecure |= args.insecure;
    config.validate()?;
    Ok(config)
}

fn token(cmd: TokenCmd) -> ExitCode {
    let token = match cmd {
        TokenCmd::New => crate::auth::new_token(),
        TokenCmd::Hash => {
            let mut line = String::new();
            if let Err(e) = std::io::stdin().read_line(&mut line) {
                eprintln!("hookd: cannot read the token from standard input: {e}");
                return ExitCode::from(2);
            }
            let token = line.trim().to_owned();
            if token.is_empty() {
                eprintln!("hookd: no token on standard input");
                return ExitCode::from(2);
            }
            token
        }
    };
    let hash = hookd_core::names::hex(&crate::auth::token_hash(&token));
    if matches!(cmd, TokenCmd::New) {
        outln!("token:  {token}");
    }
    outln!("sha256 = \"{hash}\"");
    ExitCode::SUCCESS
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
