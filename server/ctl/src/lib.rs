//! `hookd`'s client subcommands: a running hookd driven over gRPC from the shell.
//!
//! Human tables by default, `--json` (the response messages as JSON, field names as in the
//! `.proto`) for scripts. The server and credentials come from `--server` / `HOOKD_SERVER`
//! and `--token` / `HOOKD_TOKEN`.
//!
//! Exit codes: 0 done; 1 any other failure; 2 bad usage or an argument hookd refused
//! (INVALID_ARGUMENT, FAILED_PRECONDITION); 3 hookd unreachable or unavailable; 4 not
//! found; 5 not authenticated or not allowed; 6 hookd is at capacity (retry later).

#![forbid(unsafe_code)]

/// `println!` for the command line's output: a closed stdout (`hookd stats | head -2`) ends
/// the command quietly instead of panicking with "Broken pipe" (see [`write_stdout`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($t)*)))
    };
}

/// `print!` with [`outln!`]'s handling of a closed stdout.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {
        $crate::write_stdout(format_args!($($t)*))
    };
}

mod event_types;
mod queues;
pub mod replay;
mod tenants;
pub mod wire;

pub use tenants::{PortalCmd, TenantsCmd, TokensCmd};

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use hookd_proto::v1::{self as pb, hookd_client::HookdClient};

/// Where hookd is and how to talk to it.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// hookd's gRPC address.
    #[arg(
        long,
        global = true,
        env = "HOOKD_SERVER",
        default_value = "http://127.0.0.1:7700"
    )]
    pub server: String,
    /// Bearer token sent as `authorization` (a hookd with authentication needs one).
    #[arg(long, global = true, env = "HOOKD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The tenant a command acts on (an operator's token; a tenant's token acts on its own).
    /// Without it an operator acts on `default`.
    #[arg(long, global = true, env = "HOOKD_TENANT")]
    pub tenant: Option<String>,
    /// Print JSON (one document per answer) instead of tables.
    #[arg(long, global = true, env = "HOOKD_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    pub json: bool,
    /// PEM CA certificate(s) to trust for hookd's TLS certificate (with `--server https://...`).
    #[arg(long, global = true, env = "HOOKD_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate for mTLS (with --key).
    #[arg(long, global = true, env = "HOOKD_CLIENT_CERT")]
    pub cert: Option<std::path::PathBuf>,
    /// PEM private key of --cert.
    #[arg(long, global = true, env = "HOOKD_CLIENT_KEY")]
    pub key: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Ctl {
    /// Totals, storage figures and every destination.
    Stats {
        /// Print again every --interval seconds until interrupted.
        #[arg(long)]
        watch: bool,
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
        interval: u64,
    },
    /// Store one event. The payload comes from --data, --file, or standard input.
    Enqueue(EnqueueArgs),
    /// Manage endpoints.
    #[command(subcommand)]
    Endpoints(EndpointsCmd),
    /// Dead letters: list, analyze, replay, purge.
    #[command(subcommand)]
    Dlq(DlqCmd),
    /// Webhook sources of the ingest listener (`POST /in/{name}`).
    #[command(subcommand)]
    Sources(SourcesCmd),
    /// The event types the server's config declares ([[event_types]]).
    #[command(subcommand, name = "event-types")]
    EventTypes(event_types::EventTypesCmd),
    /// Which endpoints and queues get the events published to a topic
    /// (`hookd enqueue topic:NAME`).
    #[command(subcommand)]
    Subscriptions(SubscriptionsCmd),
    /// Pull queues' own settings (FIFO lanes): list, get, put, delete.
    #[command(subcommand)]
    Queues(queues::QueuesCmd),
    /// Tenants (an operator's token): list, get, create, update, delete.
    #[command(subcommand)]
    Tenants(TenantsCmd),
    /// A tenant's API tokens: create (printed once), list, revoke. An operator names the
    /// tenant with --tenant.
    #[command(subcommand)]
    Tokens(TokensCmd),
    /// Links to a tenant's portal, its own view of the console: `link` prints one to open
    /// or put in an iframe; `revoke` refuses one, or all.
    #[command(subcommand)]
    Portal(PortalCmd),
    /// Lease messages from a pull queue and print them (payload as text, headers); with
    /// --ack, acknowledge them once printed.
    Receive {
        queue: String,
        /// At most this many.
        #[arg(long, default_value_t = 10)]
        max: u32,
        /// Wait up to this many milliseconds for a first message (long poll).
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
        /// Acknowledge each message after printing it (otherwise its lease expires in
        /// --visibility-ms and it is delivered again).
        #[arg(long)]
        ack: bool,
        #[arg(long, default_value_t = 30_000)]
        visibility_ms: u64,
    },
    /// Retained messages that match every condition given, newest first (SearchMessages):
    /// `hookd search --destination endpoint:acme --state dead --since 6h`.
    Search(SearchArgs),
    /// Delete, for good, the messages a search finds (the search's flags) or these ids
    /// (--id), with every delivery of their events: their payloads are overwritten on disk
    /// (PurgeMessages; a GDPR erasure). Prints the counts first; purges only with --yes.
    /// Messages still on their way are left (counted): purge again once delivered.
    Purge {
        #[command(flatten)]
        search: SearchArgs,
        /// A message id; repeat (instead of the search's flags).
        #[arg(long = "id")]
        ids: Vec<String>,
        /// Purge (without it: only the counts, nothing changes).
        #[arg(long)]
        yes: bool,
        /// Messages one call purges at most (calls repeat until the search is done).
        #[arg(long = "max", default_value_t = 10_000)]
        max: u32,
    },
    /// Replay jobs: resend what an endpoint missed (`missed`), a search's results or ids
    /// (`create`), durably and paced; `status`, `list`, `pause`, `resume`, `cancel`.
    #[command(subcommand)]
    Replay(replay::ReplayCmd),
    /// One message: state, attempts, statuses, errors.
    Message {
        /// The message id.
        id: String,
    },
    /// Follow live events (outcomes, dead letters, breaker moves, pauses) until
    /// interrupted; with --json, one JSON object per line.
    Tail {
        /// Only this destination's events.
        #[arg(long)]
        destination: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
pub struct EnqueueArgs {
    /// Where it goes: `queue:NAME`, `endpoint:NAME`, an http(s) URL, or `topic:TYPE`
    /// (published: each subscription that takes it gets a delivery).
    destination: String,
    /// The payload as text.
    #[arg(long, conflicts_with = "file")]
    data: Option<String>,
    /// Read the payload from this file (`-`: standard input).
    #[arg(long)]
    file: Option<std::path::PathBuf>,
    #[arg(long)]
    idempotency_key: Option<String>,
    #[arg(long)]
    event_type: Option<String>,
    /// An HTTP header for push delivery, `NAME=VALUE`; repeatable.
    #[arg(long = "header", short = 'H', value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// Deliver no earlier than this many milliseconds from now.
    #[arg(long)]
    delay_ms: Option<u64>,
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Its FIFO lane at an ordered endpoint or queue (events of one key go one at a
    /// time, in order, numbered).
    #[arg(long)]
    ordering_key: Option<String>,
}

/// An endpoint's FIFO lanes, as `--fifo` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FifoArg {
    /// Unordered.
    Off,
    /// A dead letter holds its lane until replayed or purged.
    Block,
    /// A dead letter is parked; its lane moves on.
    Park,
}

impl FifoArg {
    fn wire(self) -> pb::Fifo {
        match self {
            Self::Off => pb::Fifo::Off,
            Self::Block => pb::Fifo::Block,
            Self::Park => pb::Fifo::Park,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum SubscriptionsCmd {
    List,
    Get {
        name: String,
    },
    /// Create or replace a subscription.
    Put {
        name: String,
        /// Where its deliveries go: `endpoint:NAME` or `queue:NAME`.
        #[arg(long)]
        to: String,
        /// An event type it takes: exact, `prefix.*` (`*` spans dots) or `*`; repeatable.
        #[arg(long = "event-type", required = true)]
        event_types: Vec<String>,
        /// Only events this matches: a JSON filter in Hookdeck Outpost's syntax
        /// (`{"data": {"priority": {"$in": ["high", "urgent"]}}}`).
        #[arg(long)]
        filter: Option<String>,
        #[arg(long)]
        description: Option<String>,
    },
    Delete {
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SourcesCmd {
    List,
    Get {
        name: String,
    },
    /// Create or replace a source from a TOML file with the keys of a config file's
    /// `[[sources]]` entry (`secret_env` and `secret_files` are read here, by this
    /// command, and sent as secrets).
    Put {
        file: std::path::PathBuf,
    },
    Delete {
        name: String,
    },
}

#[derive(Debug, Subcommand)]
#[expect(
    clippy::large_enum_variant,
    reason = "parsed once per command line; boxing would buy nothing"
)]
pub enum EndpointsCmd {
    List,
    Get {
        name: String,
    },
    /// Create or replace an endpoint (re-enables one hookd disabled; a pause stays).
    Put {
        name: String,
        #[arg(long)]
        url: String,
        #[arg(long)]
        description: Option<String>,
        /// Standard Webhooks signing secret: `whsec_...` (HMAC, v1) or `whsk_...` (ed25519,
        /// v1a; `hookd endpoints get` prints its public key); repeatable while rotating.
        #[arg(long = "secret")]
        secrets: Vec<String>,
        #[arg(long)]
        max_attempts: Option<u32>,
        #[arg(long)]
        timeout_ms: Option<u64>,
        #[arg(long)]
        max_in_flight: Option<u32>,
        #[arg(long)]
        rate_limit_per_s: Option<f64>,
        /// A static header sent with every attempt, NAME=VALUE (e.g. an API key the
        /// receiver's gateway wants); repeatable.
        #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
        headers: Vec<(String, String)>,
        /// Egress through this HTTP proxy (CONNECT): http://[user:password@]host:port.
        /// The destination guard then checks the proxy's address.
        #[arg(long, value_name = "URL")]
        proxy: Option<String>,
        /// mTLS: a PEM file with the client certificate chain (leaf first); with
        /// --client-key.
        #[arg(long, value_name = "FILE", requires = "client_key")]
        client_cert: Option<std::path::PathBuf>,
        /// mTLS: a PEM file with the client certificate's private key.
        #[arg(long, value_name = "FILE", requires = "client_cert")]
        client_key: Option<std::path::PathBuf>,
        /// OAuth2 client credentials: the token endpoint; with --oauth2-client-id and
        /// --oauth2-client-secret (or HOOKD_OAUTH2_CLIENT_SECRET).
        #[arg(long, value_name = "URL", requires_all = ["oauth2_client_id", "oauth2_client_secret"])]
        oauth2_token_url: Option<String>,
        #[arg(long, value_name = "ID", requires = "oauth2_token_url")]
        oauth2_client_id: Option<String>,
        #[arg(
            long,
            value_name = "SECRET",
            env = "HOOKD_OAUTH2_CLIENT_SECRET",
            hide_env_values = true,
            requires = "oauth2_token_url"
        )]
        oauth2_client_secret: Option<String>,
        /// A scope the token is asked for; repeatable.
        #[arg(long = "oauth2-scope", value_name = "SCOPE")]
        oauth2_scopes: Vec<String>,
        #[arg(long, value_name = "AUDIENCE")]
        oauth2_audience: Option<String>,
        /// FIFO lanes per ordering key: one delivery per lane in flight, each numbered
        /// (webhook-sequence); `block` or `park` says what a dead letter does to its lane.
        #[arg(long, value_enum, default_value = "off")]
        fifo: FifoArg,
        /// Let its receiver pull its retained events (catch-up, `hookd` README).
        #[arg(long)]
        catch_up: bool,
        /// How long its completed messages are kept (90m, 7d; without: its tenant's, else
        /// the server's).
        #[arg(long, value_parser = parse_age)]
        retention: Option<u64>,
    },
    Delete {
        name: String,
    },
    /// Hold deliveries to an endpoint (messages wait; nothing is dropped).
    Pause {
        name: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    Resume {
        name: String,
    },
}

/// Which dead letters (every part given must hold).
#[derive(Debug, Clone, clap::Args)]
pub struct FilterArgs {
    /// `queue:NAME`, `endpoint:NAME` or an http(s) URL.
    #[arg(long)]
    destination: Option<String>,
    /// Dead-lettered within this long before now, e.g. `90m`, `6h`, `2d`.
    #[arg(long, value_parser = parse_age)]
    since: Option<u64>,
    /// The last attempt's HTTP status.
    #[arg(long)]
    status: Option<u32>,
    /// The last error contains this text (case-insensitive).
    #[arg(long)]
    error: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// Only this destination's messages (`endpoint:NAME`, `queue:NAME`, a URL).
    #[arg(long)]
    pub destination: Option<String>,
    /// Only this event type.
    #[arg(long)]
    pub event_type: Option<String>,
    /// A publish's event id (or a message's own id).
    #[arg(long)]
    pub event_id: Option<String>,
    /// The idempotency key it was enqueued with.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Any of these states: pending, retrying, in-flight, dead, delivered (its payload
    /// kept), expired (delivered, its payload past retention); repeat, or comma-separated.
    #[arg(long = "state", value_delimiter = ',', value_parser = parse_state)]
    pub states: Vec<i32>,
    /// Its last attempt's HTTP status.
    #[arg(long)]
    pub status: Option<u32>,
    /// Created within this long before now (90m, 6h, 2d).
    #[arg(long, value_parser = parse_age)]
    pub since: Option<u64>,
    /// Created at or after this time (Unix ms).
    #[arg(long, conflicts_with = "since")]
    pub after_ms: Option<u64>,
    /// Created before this time (Unix ms).
    #[arg(long)]
    pub before_ms: Option<u64>,
    /// A declared search key's value, `POINTER=VALUE` (`/customer/id=c_42`); repeat.
    #[arg(long = "payload", value_parser = parse_pointer_value)]
    pub payload: Vec<(String, String)>,
    /// At most this many messages in all.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// Also say how many match in all (counted, or estimated past about a million).
    #[arg(long)]
    pub count: bool,
}

fn parse_state(s: &str) -> Result<i32, String> {
    let state = match s {
        "pending" => pb::MessageState::Pending,
        "retrying" | "awaiting-retry" => pb::MessageState::AwaitingRetry,
        "in-flight" | "leased" => pb::MessageState::InFlight,
        "dead" | "dead-letter" => pb::MessageState::DeadLetter,
        "delivered" => pb::MessageState::Delivered,
        "expired" => pb::MessageState::Expired,
        _ => {
            return Err(format!(
                "{s:?}: one of pending, retrying, in-flight, dead, delivered, expired"
            ));
        }
    };
    Ok(state as i32)
}

fn parse_pointer_value(s: &str) -> Result<(String, String), String> {
    let (pointer, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: give POINTER=VALUE, such as /customer/id=c_42"))?;
    Ok((pointer.to_owned(), value.to_owned()))
}

fn state_name(state: i32) -> &'static str {
    match pb::MessageState::try_from(state) {
        Ok(pb::MessageState::Pending) => "pending",
        Ok(pb::MessageState::AwaitingRetry) => "retrying",
        Ok(pb::MessageState::InFlight) => "in flight",
        Ok(pb::MessageState::DeadLetter) => "dead",
        Ok(pb::MessageState::Delivered) => "delivered",
        Ok(pb::MessageState::Expired) => "expired",
        _ => "?",
    }
}

/// The SearchMessages request `args` make (its first page).
fn search_request(args: &SearchArgs) -> Result<pb::SearchMessagesRequest, Failure> {
    let destination = args.destination.as_deref().map(destination).transpose()?;
    let after_ms = match (args.since, args.after_ms) {
        (Some(age), _) => now_ms().saturating_sub(age),
        (None, Some(ms)) => ms,
        (None, None) => 0,
    };
    Ok(pb::SearchMessagesRequest {
        destination,
        event_type: args.event_type.clone().unwrap_or_default(),
        event_id: args.event_id.clone().unwrap_or_default(),
        idempotency_key: args.idempotency_key.clone().unwrap_or_default(),
        states: args.states.clone(),
        last_status: args.status.unwrap_or(0),
        created_after_unix_ms: after_ms,
        created_before_unix_ms: args.before_ms.unwrap_or(0),
        payload: args.payload.iter().cloned().collect(),
        page_size: args.limit.clamp(1, 1_000),
        page_token: String::new(),
        count: args.count,
    })
}

/// `hookd purge`: the counts (a dry run); with `yes`, calls until the selection is done.
async fn purge(
    api: &mut Api,
    json: bool,
    args: &SearchArgs,
    ids: Vec<String>,
    yes: bool,
    max: u32,
    server: &str,
) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    let request = pb::PurgeMessagesRequest {
        search: match ids.is_empty() {
            true => Some(search_request(args)?),
            false => None,
        },
        ids,
        dry_run: !yes,
        limit: max,
        wait_ms: 0,
    };
    let mut all = pb::PurgeMessagesResponse {
        overwritten: true,
        ..Default::default()
    };
    // A call purges at most `max`; the next finds what is left. Bounded: a selection that
    // keeps growing (live traffic matching it) is not chased forever.
    for _ in 0..1_000 {
        let r = api
            .purge_messages(request.clone())
            .await
            .map_err(fail)?
            .into_inner();
        all.matched += r.matched;
        all.purged += r.purged;
        all.dead += r.dead;
        all.live = r.live;
        all.missing += r.missing;
        all.bytes += r.bytes;
        all.more = r.more;
        all.overwritten &= r.overwritten;
        if request.dry_run || !r.more || r.purged == 0 {
            break;
        }
    }
    if request.dry_run {
        all.overwritten = false;
    }
    show(json, &all, |r| {
        if request.dry_run {
            outln!(
                "would purge {} message(s) ({} dead letters, {} delivered), {} of payload; {} still on their way are left{}",
                r.purged,
                r.dead,
                r.purged - r.dead,
                mib(r.bytes),
                r.live,
                if r.more {
                    "; more match past --max"
                } else {
                    ""
                }
            );
            if r.missing > 0 {
                outln!("{} id(s) are not kept", r.missing);
            }
            outln!("nothing changed: add --yes to purge");
            return;
        }
        outln!(
            "purged {} message(s) ({} dead letters, {} delivered), {} of payload; {}",
            r.purged,
            r.dead,
            r.purged - r.dead,
            mib(r.bytes),
            if r.overwritten {
                "their bytes are overwritten on disk"
            } else {
                "their bytes are overwritten at the next checkpoint (hookd stats shows what is left)"
            }
        );
        if r.live > 0 {
            outln!(
                "{} still on their way are left: purge again once they are delivered or dead",
                r.live
            );
        }
        if r.missing > 0 {
            outln!("{} id(s) are not kept", r.missing);
        }
    })
}

async fn search(api: &mut Api, json: bool, args: SearchArgs, server: &str) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    let mut request = search_request(&args)?;
    let mut all = pb::SearchMessagesResponse::default();
    // A page looks at a bounded number of candidates; a search goes on until it has
    // `limit` messages or there is no next page.
    loop {
        let page = api
            .search_messages(request.clone())
            .await
            .map_err(fail)?
            .into_inner();
        all.scanned += page.scanned;
        if request.count {
            // The first page's count is the whole search's.
            (all.total, all.total_exact) = (page.total, page.total_exact);
            request.count = false;
        }
        all.messages.extend(page.messages);
        all.next_page_token = page.next_page_token;
        if all.next_page_token.is_empty() || all.messages.len() >= args.limit as usize {
            break;
        }
        request.page_token.clone_from(&all.next_page_token);
        request.page_size = (args.limit as usize - all.messages.len()).clamp(1, 1_000) as u32;
    }
    all.messages.truncate(args.limit as usize);
    show(json, &all, |r| {
        let rows = r
            .messages
            .iter()
            .map(|m| {
                vec![
                    m.id.clone(),
                    destination_text(&m.destination),
                    if m.event_type.is_empty() {
                        "-".to_owned()
                    } else {
                        m.event_type.clone()
                    },
                    state_name(m.state).to_owned(),
                    m.attempts.to_string(),
                    match m.last_status {
                        0 => "-".to_owned(),
                        s => s.to_string(),
                    },
                    when(m.enqueued_unix_ms),
                ]
            })
            .collect();
        table(
            &[
                "ID",
                "DESTINATION",
                "EVENT TYPE",
                "STATE",
                "ATTEMPTS",
                "LAST STATUS",
                "ENQUEUED",
            ],
            rows,
        );
        if !r.next_page_token.is_empty() {
            outln!("(more: raise --limit, or narrow the search)");
        }
        if args.count {
            let about = if r.total_exact { "" } else { "about " };
            outln!("matching in all: {about}{}", r.total);
        }
    })
}

#[derive(Debug, Subcommand)]
pub enum DlqCmd {
    List {
        #[arg(long)]
        destination: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Per destination: counts, commonest error and status, and the patterns found.
    Analyze {
        #[arg(long)]
        destination: Option<String>,
        /// How far back, e.g. `24h`, `7d` (default 7d).
        #[arg(long, value_parser = parse_age)]
        window: Option<u64>,
    },
    /// Put dead letters back in their queue, paced.
    Replay {
        /// These ids (instead of a filter).
        #[arg(long = "id")]
        ids: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        /// Required to replay with an empty filter (every dead letter).
        #[arg(long)]
        all: bool,
        /// Only count what would be replayed.
        #[arg(long)]
        dry_run: bool,
        /// At most this many become due per second (default: the server's setting).
        #[arg(long)]
        rate: Option<f64>,
        #[arg(long, default_value_t = 10_000)]
        limit: u32,
        /// As a replay job: durable, paced, with progress (`hookd replay status ID`),
        /// pause and cancel, resumed after a restart.
        #[arg(long)]
        job: bool,
    },
    /// Delete dead letters. Purging the one that blocks a FIFO lane (`--id`) skips it: the
    /// lane moves on.
    Purge {
        /// These ids (instead of a filter).
        #[arg(long = "id")]
        ids: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        /// Required to purge with an empty filter (every dead letter).
        #[arg(long)]
        all: bool,
        #[arg(long)]
        dry_run: bool,
        #[arg(long, default_value_t = 10_000)]
        limit: u32,
    },
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?} is not NAME=VALUE"))
}

/// `30s`, `90m`, `6h`, `2d` (or plain seconds) as milliseconds.
fn parse_age(s: &str) -> Result<u64, String> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 90m, 6h or 2d"))?;
    let ms = match unit {
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{s:?}: the unit is one of s, m, h, d")),
    };
    n.checked_mul(ms)
        .ok_or_else(|| format!("{s:?} is too long"))
}

/// Parses `queue:NAME`, `endpoint:NAME`, `url:URL` or a bare http(s) URL.
fn destination(s: &str) -> Result<pb::Destination, Failure> {
    use hookd_core::destination::Destination;
    use hookd_core::scope::TenantId;
    // The tenant is the call's, not the text's: the wire form names none.
    let dest = Destination::from_local_key(TenantId::DEFAULT, s)
        .or_else(|| {
            (s.starts_with("http://") || s.starts_with("https://"))
                .then(|| Destination::url(TenantId::DEFAULT, s))
        })
        .ok_or_else(|| {
            Failure::usage(format!(
                "destination {s:?}: write queue:NAME, endpoint:NAME or an http(s) URL"
            ))
        })?;
    Ok(wire::destination(&dest))
}

fn destination_text(d: &Option<pb::Destination>) -> String {
    use pb::destination::Kind;
    match d.as_ref().and_then(|d| d.kind.as_ref()) {
        Some(Kind::Queue(n)) => format!("queue:{n}"),
        Some(Kind::Endpoint(n)) => format!("endpoint:{n}"),
        Some(Kind::Url(u)) => u.clone(),
        None => String::new(),
    }
}

/// A failed command: what to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    fn usage(message: String) -> Self {
        Self { message, code: 2 }
    }

    fn status(server: &str, s: &tonic::Status) -> Self {
        use tonic::Code;
        let (code, hint) = match s.code() {
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => (2, ""),
            Code::Unavailable => (3, ""),
            Code::NotFound => (4, ""),
            Code::Unauthenticated => (5, " (give a token with --token or HOOKD_TOKEN)"),
            Code::PermissionDenied => (5, " (the token lacks the scope this needs)"),
            Code::ResourceExhausted => (6, " (hookd is at capacity; retry later)"),
            _ => (1, ""),
        };
        let what = match s.code() {
            Code::Unavailable => format!("hookd at {server} is unavailable: {}", s.message()),
            _ => format!("{:?}: {}", s.code(), s.message()),
        };
        Self {
            message: format!("{what}{hint}"),
            code,
        }
    }
}

pub type Api = hookd_client::Api;

/// Builds a tokio runtime from `builder` (I/O and time enabled), or says why not on stderr
/// and gives the exit code: the command line's one way to start a runtime (`hookd serve`
/// sets its allocator trim on the builder first).
pub fn build_runtime(
    mut builder: tokio::runtime::Builder,
) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("hookd: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

/// The client's runtime: one thread, as a command makes one call at a time.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    build_runtime(tokio::runtime::Builder::new_current_thread())
}

/// Writes the command line's output to stdout. A reader that went away (`| head`, `| true`)
/// ends the command quietly, with exit code 0, as it would a shell tool; any other write
/// error ends it with exit code 1 and says so on stderr.
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("hookd: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

/// Runs a client subcommand; prints its answer (stdout) or its failure (stderr).
pub fn run(conn: Connection, cmd: Ctl) -> ExitCode {
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(execute(&conn, cmd)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("hookd: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

async fn connect(conn: &Connection) -> Result<Api, Failure> {
    let (channel, credentials) = channel(conn).await?;
    Ok(HookdClient::with_interceptor(channel, credentials)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20))
}

/// A client of `--server` that connects when it first calls and reconnects by itself
/// (`hookd mcp`: it starts, and answers, while hookd is down); the error names the flag.
pub fn lazy_api(conn: &Connection) -> Result<Api, String> {
    let (endpoint, credentials) = endpoint(conn).map_err(|f| f.message)?;
    Ok(
        HookdClient::with_interceptor(endpoint.connect_lazy(), credentials)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20),
    )
}

/// A channel to `--server` (TLS and mTLS as the flags say) and the token to send.
async fn channel(
    conn: &Connection,
) -> Result<(tonic::transport::Channel, hookd_client::Credentials), Failure> {
    let (endpoint, credentials) = endpoint(conn)?;
    let channel = endpoint.connect().await.map_err(|e| Failure {
        message: format!(
            "cannot reach hookd at {}: {e} (is it running? set --server or HOOKD_SERVER)",
            conn.server
        ),
        code: 3,
    })?;
    Ok((channel, credentials))
}

/// `--server`'s endpoint (TLS and mTLS as the flags say) and the token to send.
fn endpoint(
    conn: &Connection,
) -> Result<(tonic::transport::Endpoint, hookd_client::Credentials), Failure> {
    let mut credentials = match &conn.token {
        Some(t) => hookd_client::Credentials::bearer(t)
            .map_err(|_| Failure::usage("--token: not a valid header value".into()))?,
        None => hookd_client::Credentials::none(),
    };
    if let Some(tenant) = &conn.tenant {
        credentials = credentials
            .for_tenant(tenant)
            .map_err(|_| Failure::usage("--tenant: not a valid header value".into()))?;
    }
    let read = |flag: &str,
                path: &Option<std::path::PathBuf>|
     -> Result<Option<Vec<u8>>, Failure> {
        path.as_ref()
            .map(|p| {
                std::fs::read(p).map_err(|e| Failure::usage(format!("{flag} {}: {e}", p.display())))
            })
            .transpose()
    };
    let identity_pem = match (read("--cert", &conn.cert)?, read("--key", &conn.key)?) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err(Failure::usage("--cert and --key go together".into())),
    };
    let options = hookd_client::Options {
        token: None,
        tenant: None,
        ca_pem: read("--ca-file", &conn.ca_file)?,
        identity_pem,
        domain: None,
    };
    let endpoint = hookd_client::secure_endpoint(conn.server.clone(), &options)
        .map_err(|e| Failure::usage(format!("--server {}: {e}", conn.server)))?;
    Ok((endpoint, credentials))
}

/// `hookd health`: asks the gRPC health service on a channel of its own.
pub fn run_health(conn: Connection, service: String, timeout_ms: u64) -> ExitCode {
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(health(&conn, service, Duration::from_millis(timeout_ms))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("hookd: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// SERVING, or exit code 3.
async fn health(conn: &Connection, service: String, timeout: Duration) -> Result<(), Failure> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let unavailable = |message: String| Failure { message, code: 3 };
    let ask = async {
        let (channel, credentials) = channel(conn).await?;
        let mut client =
            tonic_health::pb::health_client::HealthClient::with_interceptor(channel, credentials);
        client
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.clone(),
            })
            .await
            .map(|r| r.into_inner().status)
            .map_err(|s| Failure::status(&conn.server, &s))
    };
    let status = tokio::time::timeout(timeout, ask).await.map_err(|_| {
        unavailable(format!(
            "no health answer from {} within {} ms",
            conn.server,
            timeout.as_millis()
        ))
    })??;
    let name = ServingStatus::try_from(status).map_or_else(
        |_| format!("status {status}"),
        |s| s.as_str_name().to_owned(),
    );
    let what = if service.is_empty() {
        "hookd"
    } else {
        service.as_str()
    };
    if status == ServingStatus::Serving as i32 {
        outln!("{what} at {}: {name}", conn.server);
        Ok(())
    } else {
        Err(unavailable(format!("{what} at {}: {name}", conn.server)))
    }
}

/// Prints an answer as the HTTP/JSON API writes it (proto3's JSON mapping: the same field
/// names, 64-bit integers as strings, enums by name), or runs `human` to print it for people.
fn show<M: prost::Message + prost::Name>(
    json: bool,
    message: &M,
    human: impl FnOnce(&M),
) -> Result<(), Failure> {
    if json {
        let value = hookd_proto::json::message_json(message).map_err(|e| Failure {
            message: format!("cannot print JSON: {e}"),
            code: 1,
        })?;
        print_json(&value)
    } else {
        human(message);
        Ok(())
    }
}

/// [`show`] for a value of the CLI's own (not an API answer).
fn show_value(json: bool, value: &serde_json::Value, human: impl FnOnce()) -> Result<(), Failure> {
    if json {
        print_json(value)
    } else {
        human();
        Ok(())
    }
}

fn print_json(value: &serde_json::Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure {
        message: format!("cannot print JSON: {e}"),
        code: 1,
    })?;
    outln!("{text}");
    Ok(())
}

async fn execute(conn: &Connection, cmd: Ctl) -> Result<(), Failure> {
    let mut api = connect(conn).await?;
    let server = conn.server.as_str();
    let fail = |s: tonic::Status| Failure::status(server, &s);
    let json = conn.json;
    match cmd {
        Ctl::Stats { watch, interval } => loop {
            let stats = hookd_client::all_stats(&mut api).await.map_err(fail)?;
            if watch && !json {
                use std::io::IsTerminal;
                if std::io::stdout().is_terminal() {
                    // Clear the screen and go home, as `watch` does.
                    out!("\x1b[2J\x1b[H");
                } else {
                    outln!();
                }
            }
            show(json, &stats, print_stats)?;
            if !watch {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(interval)).await;
        },
        Ctl::Enqueue(args) => {
            let payload = match (&args.data, &args.file) {
                (Some(d), _) => d.clone().into_bytes(),
                (None, Some(p)) if p.as_os_str() != "-" => std::fs::read(p)
                    .map_err(|e| Failure::usage(format!("--file {}: {e}", p.display())))?,
                _ => {
                    let mut buf = Vec::new();
                    std::io::stdin()
                        .read_to_end(&mut buf)
                        .map_err(|e| Failure::usage(format!("standard input: {e}")))?;
                    buf
                }
            };
            let topic = args.destination.strip_prefix("topic:").map(str::to_owned);
            let dest = match &topic {
                Some(_) => pb::Destination::default(),
                None => destination(&args.destination)?,
            };
            let mut request = pb::EnqueueRequest {
                payload,
                idempotency_key: args.idempotency_key.unwrap_or_default(),
                event_type: args.event_type.unwrap_or_default(),
                headers: args.headers.into_iter().collect(),
                delay_ms: args.delay_ms.unwrap_or(0),
                max_attempts: args.max_attempts.unwrap_or(0),
                ordering_key: args.ordering_key.unwrap_or_default(),
                ..Default::default()
            };
            use pb::destination::Kind;
            use pb::enqueue_request::Destination as D;
            request.destination = dest.kind.map(|k| match k {
                Kind::Queue(n) => D::Queue(n),
                Kind::Endpoint(n) => D::Endpoint(n),
                Kind::Url(u) => D::Url(u),
            });
            if let Some(topic) = topic {
                request.destination = Some(D::Topic(topic));
            }
            let publish = matches!(request.destination, Some(D::Topic(_)));
            let r = api.enqueue(request).await.map_err(fail)?.into_inner();
            show(json, &r, |r| {
                if r.duplicate {
                    outln!("{} (duplicate: the idempotency key was used before)", r.id);
                } else if publish {
                    outln!("{} (event; {} subscriber(s))", r.id, r.subscribers);
                    for id in &r.delivery_ids {
                        outln!("  delivery {id}");
                    }
                    let unlisted = (r.subscribers as usize).saturating_sub(r.delivery_ids.len());
                    if unlisted > 0 {
                        outln!("  ... and {unlisted} more (an answer lists the first 1,000)");
                    }
                } else {
                    outln!("{}", r.id);
                }
            })
        }
        Ctl::Subscriptions(cmd) => subscriptions(&mut api, json, cmd, server).await,
        Ctl::Queues(cmd) => queues::queues(&mut api, json, cmd, server).await,
        Ctl::Tenants(cmd) => tenants::tenants(&mut api, json, cmd, server).await,
        Ctl::Tokens(cmd) => tenants::tokens(&mut api, json, cmd, server).await,
        Ctl::Portal(cmd) => tenants::portal(&mut api, json, cmd, server).await,
        Ctl::Endpoints(cmd) => endpoints(&mut api, json, cmd, conn.tenant.as_deref())
            .await
            .map_err(fail),
        Ctl::Sources(cmd) => sources(&mut api, json, cmd, server).await,
        Ctl::EventTypes(cmd) => event_types::event_types(&mut api, json, cmd, server).await,
        Ctl::Receive {
            queue,
            max,
            wait_ms,
            ack,
            visibility_ms,
        } => {
            let r = api
                .receive(pb::ReceiveRequest {
                    queue,
                    max_messages: max,
                    visibility_timeout_ms: visibility_ms,
                    wait_ms,
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                for m in &r.messages {
                    print_received(m);
                }
                if r.messages.is_empty() {
                    outln!("(no message)");
                }
            })?;
            if ack && !r.messages.is_empty() {
                api.ack(pb::AckRequest {
                    lease_ids: r.messages.iter().map(|m| m.lease_id.clone()).collect(),
                })
                .await
                .map_err(fail)?;
            }
            Ok(())
        }
        Ctl::Dlq(cmd) => dlq(&mut api, json, cmd, server).await,
        Ctl::Tail { destination: d } => {
            let destination = d.as_deref().map(destination).transpose()?;
            let watch = pb::WatchRequest { destination };
            let mut stream = api.watch(watch.clone()).await.map_err(fail)?.into_inner();
            loop {
                let e = match stream.message().await {
                    Ok(Some(e)) => e,
                    Ok(None) => break,
                    // An idle stream ends (connections.watch_idle_secs): watch again.
                    Err(s)
                        if s.code() == tonic::Code::DeadlineExceeded
                            && s.message().starts_with("idle") =>
                    {
                        stream = api.watch(watch.clone()).await.map_err(fail)?.into_inner();
                        continue;
                    }
                    Err(s) => return Err(fail(s)),
                };
                if json {
                    // One event per line, as `GET /v1/events` sends each.
                    let line = hookd_proto::json::message_json(&e).map_err(|e| Failure {
                        message: format!("cannot print JSON: {e}"),
                        code: 1,
                    })?;
                    outln!("{line}");
                } else {
                    let status = if e.http_status == 0 {
                        String::new()
                    } else {
                        format!(" {}", e.http_status)
                    };
                    let attempt = if e.attempt == 0 {
                        String::new()
                    } else {
                        format!(" attempt {}", e.attempt)
                    };
                    outln!(
                        "{} {:<18} {} {}{attempt}{status} {}",
                        when(e.unix_ms),
                        e.kind,
                        e.destination,
                        e.message_id,
                        excerpt(&e.detail, 100)
                    );
                }
                // A pipe reader sees each event as it comes.
                use std::io::Write;
                let _ = std::io::stdout().flush();
            }
            Err(Failure {
                message: "hookd ended the stream (it is stopping)".into(),
                code: 3,
            })
        }
        Ctl::Search(args) => search(&mut api, json, args, server).await,
        Ctl::Purge {
            search,
            ids,
            yes,
            max,
        } => purge(&mut api, json, &search, ids, yes, max, server).await,
        Ctl::Replay(cmd) => replay::replay(&mut api, json, cmd, server).await,
        Ctl::Message { id } => {
            let m = api
                .get_message(pb::GetMessageRequest { id })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &m, print_message)
        }
    }
}

async fn sources(api: &mut Api, json: bool, cmd: SourcesCmd, server: &str) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    match cmd {
        SourcesCmd::List => {
            let r = api
                .list_sources(pb::ListSourcesRequest {})
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_sources(&r.sources))
        }
        SourcesCmd::Get { name } => {
            let r = api
                .get_source(pb::GetSourceRequest { name })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_sources(r.source.as_slice()))
        }
        SourcesCmd::Put { file } => {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
            let mut spec: hookd_core::source::SourceSpec = toml::from_str(&text)
                .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
            spec.resolve_files("", &|var| std::env::var(var).ok())
                .map_err(|(key, message)| Failure::usage(format!("{key}: {message}")))?;
            let r = api
                .put_source(pb::PutSourceRequest {
                    source: Some(wire::source(&spec)),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                outln!("{} source", if r.created { "created" } else { "replaced" });
                print_sources(r.source.as_slice());
            })
        }
        SourcesCmd::Delete { name } => {
            api.delete_source(pb::DeleteSourceRequest { name: name.clone() })
                .await
                .map_err(fail)?;
            show_value(json, &serde_json::json!({ "deleted": name }), || {
                outln!("deleted source {name}");
            })
        }
    }
}

async fn subscriptions(
    api: &mut Api,
    json: bool,
    cmd: SubscriptionsCmd,
    server: &str,
) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    match cmd {
        SubscriptionsCmd::List => {
            let r = api
                .list_subscriptions(pb::ListSubscriptionsRequest {})
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_subscriptions(&r.subscriptions))
        }
        SubscriptionsCmd::Get { name } => {
            let r = api
                .get_subscription(pb::GetSubscriptionRequest { name })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| print_subscriptions(r.subscription.as_slice()))
        }
        SubscriptionsCmd::Put {
            name,
            to,
            event_types,
            filter,
            description,
        } => {
            use pb::subscription::Destination as D;
            let destination = if let Some(n) = to.strip_prefix("endpoint:") {
                D::Endpoint(n.to_owned())
            } else if let Some(n) = to.strip_prefix("queue:") {
                D::Queue(n.to_owned())
            } else {
                return Err(Failure::usage(format!(
                    "--to {to}: use endpoint:NAME or queue:NAME"
                )));
            };
            let filter = match filter {
                None => None,
                Some(text) => {
                    let value: serde_json::Value = serde_json::from_str(&text)
                        .map_err(|e| Failure::usage(format!("--filter: not JSON: {e}")))?;
                    Some(hookd_proto::json::json_to_struct(&value).ok_or_else(|| {
                        Failure::usage("--filter: must be a JSON object".to_owned())
                    })?)
                }
            };
            let r = api
                .put_subscription(pb::PutSubscriptionRequest {
                    subscription: Some(pb::Subscription {
                        name,
                        destination: Some(destination),
                        event_types,
                        filter,
                        description: description.unwrap_or_default(),
                        ..Default::default()
                    }),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                outln!(
                    "{} subscription",
                    if r.created { "created" } else { "replaced" }
                );
                print_subscriptions(r.subscription.as_slice());
            })
        }
        SubscriptionsCmd::Delete { name } => {
            api.delete_subscription(pb::DeleteSubscriptionRequest { name: name.clone() })
                .await
                .map_err(fail)?;
            show_value(json, &serde_json::json!({ "deleted": name }), || {
                outln!("deleted subscription {name}");
            })
        }
    }
}

fn print_subscriptions(subscriptions: &[pb::Subscription]) {
    let rows = subscriptions
        .iter()
        .map(|s| {
            let to = match &s.destination {
                Some(pb::subscription::Destination::Endpoint(e)) => format!("endpoint:{e}"),
                Some(pb::subscription::Destination::Queue(q)) => format!("queue:{q}"),
                None => String::new(),
            };
            let filter = s
                .filter
                .as_ref()
                .map(|f| hookd_proto::json::struct_to_json(f).to_string())
                .unwrap_or_default();
            vec![
                s.name.clone(),
                to,
                s.event_types.join(" "),
                filter,
                s.description.clone(),
            ]
        })
        .collect::<Vec<_>>();
    table(
        &["NAME", "TO", "EVENT TYPES", "FILTER", "DESCRIPTION"],
        rows,
    );
}

fn print_sources(sources: &[pb::Source]) {
    let rows = sources
        .iter()
        .map(|s| {
            let route = match &s.route {
                Some(pb::source::Route::Queue(q)) => format!("queue:{q}"),
                Some(pb::source::Route::Endpoint(e)) => format!("endpoint:{e}"),
                Some(pb::source::Route::Topic(t)) => format!("topic:{t}"),
                None => String::new(),
            };
            let secrets: Vec<&str> = s
                .secret_summaries
                .iter()
                .map(|x| x.fingerprint.as_str())
                .collect();
            vec![
                s.name.clone(),
                s.path.clone(),
                s.scheme.clone(),
                route,
                if s.from_config { "config" } else { "api" }.into(),
                secrets.join(" "),
            ]
        })
        .collect::<Vec<_>>();
    table(
        &["NAME", "PATH", "SCHEME", "ROUTE", "FROM", "SECRETS"],
        rows,
    );
}

fn print_received(m: &pb::ReceivedMessage) {
    outln!("id          {}", m.id);
    outln!("lease       {}", m.lease_id);
    if !m.event_type.is_empty() {
        outln!("event type  {}", m.event_type);
    }
    if !m.idempotency_key.is_empty() {
        outln!("key         {}", m.idempotency_key);
    }
    if m.sequence > 0 {
        outln!(
            "lane        {:?} #{}{}",
            m.ordering_key,
            m.sequence,
            if m.out_of_order {
                " (out of order: a replayed dead letter)"
            } else {
                ""
            }
        );
    }
    let mut headers: Vec<_> = m.headers.iter().collect();
    headers.sort();
    for (k, v) in headers {
        outln!("header      {k}: {v}");
    }
    outln!("payload     {}", String::from_utf8_lossy(&m.payload));
    outln!();
}

async fn endpoints(
    api: &mut Api,
    json: bool,
    cmd: EndpointsCmd,
    tenant: Option<&str>,
) -> Result<(), tonic::Status> {
    // A tenant's endpoint's keys are under its tenant's name (a tenant's own token: its
    // tenant's name, which the caller knows and the CLI does not).
    let jwks_path = |name: &str| match tenant {
        Some(t) => format!("/jwks/{t}/{name}"),
        None => format!("/jwks/{name}"),
    };
    let print = |e: &pb::Endpoint| {
        print_endpoints(std::slice::from_ref(e));
        if !e.proxy_url.is_empty() {
            outln!("proxy       {}", e.proxy_url);
        }
        if e.secret_summaries.iter().any(|s| !s.public_key.is_empty()) {
            outln!(
                "jwks        {} on hookd's HTTP listener (the v1a public keys; deliveries name theirs in hookd-key-id)",
                jwks_path(&e.name)
            );
        }
        match pb::Fifo::try_from(e.fifo) {
            Ok(pb::Fifo::Block) => outln!("fifo        block (a dead letter holds its lane)"),
            Ok(pb::Fifo::Park) => {
                outln!("fifo        park (a dead letter is parked; its lane moves on)")
            }
            _ => {}
        }
        if !e.client_certificate_summary.is_empty() {
            outln!("client cert {}", e.client_certificate_summary);
        }
        if let Some(o) = &e.oauth2 {
            outln!(
                "oauth2      {} client {}{}",
                o.token_url,
                o.client_id,
                if o.scopes.is_empty() {
                    String::new()
                } else {
                    format!(" scopes {}", o.scopes.join(" "))
                }
            );
        }
        // The one part of a v1a key that is no secret, and that the receiver needs.
        for s in e
            .secret_summaries
            .iter()
            .filter(|s| !s.public_key.is_empty())
        {
            outln!(
                "public key {} (of {}: the receiver verifies v1a signatures with it)",
                s.public_key,
                s.fingerprint
            );
        }
    };
    let shown = |r: Result<(), Failure>| r.map_err(|f| tonic::Status::internal(f.message));
    match cmd {
        EndpointsCmd::List => {
            let r = api
                .list_endpoints(pb::ListEndpointsRequest {})
                .await?
                .into_inner();
            shown(show(json, &r, |r| print_endpoints(&r.endpoints)))
        }
        EndpointsCmd::Get { name } => {
            let r = api
                .get_endpoint(pb::GetEndpointRequest {
                    name,
                    reveal_secrets: false,
                })
                .await?
                .into_inner();
            shown(show(json, &r, |r| {
                if let Some(e) = &r.endpoint {
                    print(e);
                }
            }))
        }
        EndpointsCmd::Put {
            name,
            url,
            description,
            secrets,
            max_attempts,
            timeout_ms,
            max_in_flight,
            rate_limit_per_s,
            headers,
            proxy,
            client_cert,
            client_key,
            oauth2_token_url,
            oauth2_client_id,
            oauth2_client_secret,
            oauth2_scopes,
            oauth2_audience,
            fifo,
            catch_up,
            retention,
        } => {
            let read = |path: Option<std::path::PathBuf>, flag: &str| {
                path.map_or(Ok(String::new()), |p| {
                    std::fs::read_to_string(&p).map_err(|e| {
                        tonic::Status::invalid_argument(format!("{flag} {}: {e}", p.display()))
                    })
                })
            };
            let endpoint = pb::Endpoint {
                name,
                headers: headers.into_iter().collect(),
                proxy_url: proxy.unwrap_or_default(),
                client_certificate_pem: read(client_cert, "--client-cert")?,
                client_key_pem: read(client_key, "--client-key")?,
                oauth2: oauth2_token_url.map(|token_url| pb::OAuth2 {
                    token_url,
                    client_id: oauth2_client_id.unwrap_or_default(),
                    client_secret: oauth2_client_secret.unwrap_or_default(),
                    scopes: oauth2_scopes,
                    audience: oauth2_audience.unwrap_or_default(),
                }),
                url,
                description: description.unwrap_or_default(),
                secrets,
                max_attempts: max_attempts.unwrap_or(0),
                timeout_ms: timeout_ms.unwrap_or(0),
                max_in_flight: max_in_flight.unwrap_or(0),
                rate_limit_per_s: rate_limit_per_s.unwrap_or(0.0),
                fifo: fifo.wire() as i32,
                catch_up,
                retention_secs: retention.map_or(0, |ms| ms / 1_000),
                ..Default::default()
            };
            let r = api
                .put_endpoint(pb::PutEndpointRequest {
                    endpoint: Some(endpoint),
                })
                .await?
                .into_inner();
            // Stored all the same; said on standard error so that `--json` stays one
            // document on standard output (which holds them too).
            for warning in &r.warnings {
                eprintln!("hookd: warning: {warning}");
            }
            shown(show(json, &r, |r| {
                outln!("{}", if r.created { "created" } else { "updated" });
                if let Some(e) = &r.endpoint {
                    print(e);
                }
            }))
        }
        EndpointsCmd::Delete { name } => {
            let r = api
                .delete_endpoint(pb::DeleteEndpointRequest { name: name.clone() })
                .await?
                .into_inner();
            shown(show(json, &r, |_| outln!("deleted {name}")))
        }
        EndpointsCmd::Pause { name, reason } => {
            let r = api
                .pause_endpoint(pb::PauseEndpointRequest { name, reason })
                .await?
                .into_inner();
            shown(show(json, &r, |r| {
                if let Some(e) = &r.endpoint {
                    print(e);
                }
            }))
        }
        EndpointsCmd::Resume { name } => {
            let r = api
                .resume_endpoint(pb::ResumeEndpointRequest { name })
                .await?
                .into_inner();
            shown(show(json, &r, |r| {
                if let Some(e) = &r.endpoint {
                    print(e);
                }
            }))
        }
    }
}

fn filter(f: FilterArgs, now_ms: u64) -> Result<pb::DeadLetterFilter, Failure> {
    Ok(pb::DeadLetterFilter {
        destination: f.destination.as_deref().map(destination).transpose()?,
        dead_after_unix_ms: f.since.map_or(0, |age| now_ms.saturating_sub(age)),
        dead_before_unix_ms: 0,
        http_status: f.status.unwrap_or(0),
        error_contains: f.error.unwrap_or_default(),
    })
}

fn now_ms() -> u64 {
    use hookd_core::clock::Clock;
    hookd_core::clock::SystemClock.now_ms()
}

async fn dlq(api: &mut Api, json: bool, cmd: DlqCmd, server: &str) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    match cmd {
        DlqCmd::List {
            destination: d,
            limit,
        } => {
            let destination = d.as_deref().map(destination).transpose()?;
            let r = api
                .list_dead_letters(pb::ListDeadLettersRequest {
                    destination,
                    page_size: limit,
                    page_token: String::new(),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                let rows = r
                    .dead_letters
                    .iter()
                    .map(|d| {
                        let lane = match (d.sequence, d.blocks_lane) {
                            (0, _) => "-".to_owned(),
                            (n, false) => format!("{:?} #{n}", d.ordering_key),
                            (n, true) => format!("{:?} #{n} (blocks its lane)", d.ordering_key),
                        };
                        vec![
                            d.id.clone(),
                            destination_text(&d.destination),
                            lane,
                            d.attempts.to_string(),
                            when(d.dead_lettered_unix_ms),
                            excerpt(&d.last_error, 60),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "ID",
                        "DESTINATION",
                        "LANE",
                        "ATTEMPTS",
                        "DEAD SINCE",
                        "LAST ERROR",
                    ],
                    rows,
                );
                if !r.next_page_token.is_empty() {
                    outln!("(more: raise --limit or filter by --destination)");
                }
            })
        }
        DlqCmd::Analyze {
            destination: d,
            window,
        } => {
            let destination = d.as_deref().map(destination).transpose()?;
            let r = api
                .analyze_dead_letters(pb::AnalyzeDeadLettersRequest {
                    destination,
                    window_secs: window.map_or(0, |ms| ms / 1_000),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, print_analysis)
        }
        DlqCmd::Replay {
            ids,
            filter: f,
            all,
            dry_run,
            rate,
            limit,
            job,
        } => {
            let empty = f.destination.is_none()
                && f.since.is_none()
                && f.status.is_none()
                && f.error.is_none();
            if ids.is_empty() && empty && !all {
                return Err(Failure::usage(
                    "give --id, a filter (--destination, --since, --status, --error), or --all to replay every dead letter".into(),
                ));
            }
            let request = pb::ReplayDeadLettersRequest {
                filter: ids.is_empty().then(|| filter(f, now_ms())).transpose()?,
                ids,
                limit,
                dry_run,
                max_per_s: rate.unwrap_or(0.0),
                as_job: job,
                ..Default::default()
            };
            let r = api
                .replay_dead_letters(request)
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                if dry_run {
                    outln!(
                        "{} would be replayed (dry run)",
                        dead_letters(r.matched.into())
                    );
                } else if !r.job_id.is_empty() {
                    outln!(
                        "replay job {} replays {} (`hookd replay status {}`)",
                        r.job_id,
                        dead_letters(r.matched.into()),
                        r.job_id
                    );
                } else {
                    outln!(
                        "replayed {} of {} matched; the last is due {}",
                        r.replayed,
                        r.matched,
                        when(r.last_due_unix_ms)
                    );
                }
            })
        }
        DlqCmd::Purge {
            ids,
            filter: f,
            all,
            dry_run,
            limit,
        } => {
            let by_filter = ids.is_empty();
            let r = api
                .purge_dead_letters(pb::PurgeDeadLettersRequest {
                    filter: if by_filter {
                        Some(filter(f, now_ms())?)
                    } else {
                        None
                    },
                    all,
                    dry_run,
                    limit,
                    ids,
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                if dry_run {
                    outln!(
                        "{} would be purged (dry run)",
                        dead_letters(r.matched.into())
                    );
                } else {
                    outln!("purged {} of {} matched", r.purged, r.matched);
                }
            })
        }
    }
}

/// Prints rows under headers, each column as wide as its widest cell.
fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        outln!("{}", text.join("  ").trim_end());
    };
    line(headers.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        line(row);
    }
}

/// A Unix time in ms as UTC `YYYY-MM-DD HH:MM:SS` (0: "-").
fn when(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let secs = ms / 1_000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn age(ms: u64) -> String {
    match ms {
        0 => "-".into(),
        ms if ms < 60_000 => format!("{:.1}s", ms as f64 / 1e3),
        ms if ms < 3_600_000 => format!("{}m", ms / 60_000),
        ms if ms < 86_400_000 => format!("{:.1}h", ms as f64 / 3.6e6),
        ms => format!("{:.1}d", ms as f64 / 8.64e7),
    }
}

fn excerpt(s: &str, max: usize) -> String {
    let first = s.lines().next().unwrap_or("");
    if first.chars().count() <= max {
        first.to_owned()
    } else {
        let cut: String = first.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// A latency in milliseconds, with its unit: `850 ms`, `12.3 s`, `2.0 min`, `1.5 h`.
fn duration_ms(ms: f64) -> String {
    if ms < 1_000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1e3)
    } else if ms < 3_600_000.0 {
        format!("{:.1} min", ms / 60e3)
    } else {
        format!("{:.1} h", ms / 3_600e3)
    }
}

fn breaker_text(p: &pb::PushStats) -> String {
    if p.disabled {
        return "disabled".into();
    }
    match pb::BreakerState::try_from(p.breaker) {
        Ok(pb::BreakerState::Open) => "open".into(),
        Ok(pb::BreakerState::HalfOpen) => "half-open".into(),
        _ => "closed".into(),
    }
}

/// Bytes as MiB, one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1_048_576.0)
}

fn print_stats(s: &pb::StatsResponse) {
    if let Some(st) = &s.storage {
        let p99 = st
            .commit_latency_last_hour
            .as_ref()
            .map_or(0.0, |l| l.p99_ms);
        outln!(
            "hookd up {} · {} live messages · {} destinations · log {:.1} MiB, checkpoint {} ago · {:.0} syncs/s, {:.1} requests each, p99 {p99:.2} ms · disk {:.0} MiB free (reserve {:.0})",
            age(s.uptime_ms),
            st.live_messages,
            st.destinations,
            st.log_bytes as f64 / 1_048_576.0,
            age(st.checkpoint_age_ms),
            st.commits_per_s,
            st.requests_per_commit,
            st.disk_available_bytes as f64 / 1_048_576.0,
            st.disk_reserve_bytes as f64 / 1_048_576.0,
        );
        // What the history keeps: delivered payloads from when (the log's retention),
        // in how many segments, and how much of it is live messages' records.
        outln!(
            "history: delivered payloads readable since {} · {} log segments, {:.1} MiB of them live records · {:.1} MiB reclaimable",
            if st.log_retained_from_unix_ms > 0 {
                when(st.log_retained_from_unix_ms)
            } else {
                "the start of the log".to_owned()
            },
            st.log_segments,
            st.log_live_bytes as f64 / 1_048_576.0,
            st.log_reclaimable_bytes as f64 / 1_048_576.0,
        );
        if let Some(r) = &s.retention {
            let secs = |s: u64| age(s.saturating_mul(1_000));
            let mut line = format!(
                "retention: completed messages kept {} ({}) · payloads readable since {} · server: summaries {}, payloads {}, log budget {}",
                if r.retention_secs > 0 {
                    secs(r.retention_secs)
                } else {
                    secs(
                        r.server_completed_retention_secs
                            .min(r.server_log_retention_secs),
                    )
                },
                if r.retention_secs > 0 {
                    "the tenant's"
                } else {
                    "the server's"
                },
                when(r.payloads_kept_since_unix_ms),
                secs(r.server_completed_retention_secs),
                secs(r.server_log_retention_secs),
                mib(r.disk_budget_bytes),
            );
            for d in &r.destinations {
                line.push_str(&format!(
                    " · {} {} (since {})",
                    d.destination,
                    secs(d.retention_secs),
                    when(d.payloads_kept_since_unix_ms)
                ));
            }
            outln!("{line}");
        }
        if st.purged_records > 0 || st.purge_pending_records > 0 {
            outln!(
                "purges: {} purged records ({}) overwritten on disk since start · {} still to overwrite",
                st.purged_records,
                mib(st.purged_bytes),
                st.purge_pending_records,
            );
        }
    }
    let row = |d: &pb::DestinationStats| {
        // End to end: enqueue to completion (after a replay, the time it lay dead too).
        let e2e = d
            .latency_last_hour
            .as_ref()
            .filter(|l| l.count > 0)
            .map_or_else(|| "-".to_owned(), |l| duration_ms(l.p95_ms));
        // One HTTP attempt, connect to the end of the response (push destinations only).
        let attempt = d
            .push
            .as_ref()
            .and_then(|p| p.attempt_latency_last_hour.as_ref())
            .filter(|l| l.count > 0)
            .map_or_else(|| "-".to_owned(), |l| duration_ms(l.p95_ms));
        vec![
            d.destination.clone(),
            d.pending.to_string(),
            d.awaiting_retry.to_string(),
            d.in_flight.to_string(),
            d.dead_letter.to_string(),
            age(d.oldest_pending_age_ms),
            d.delivered_last_hour.to_string(),
            d.failed_last_hour.to_string(),
            e2e,
            attempt,
            d.push.as_ref().map(breaker_text).unwrap_or_default(),
            match pb::BackpressureLevel::try_from(d.backpressure) {
                Ok(pb::BackpressureLevel::Soft) => "soft".into(),
                Ok(pb::BackpressureLevel::Hard) => "HARD".into(),
                _ => "ok".into(),
            },
            // FIFO lanes holding messages, and those a dead letter blocks.
            match (d.fifo_lanes, d.blocked_lanes) {
                (0, _) => "-".into(),
                (n, 0) => n.to_string(),
                (n, b) => format!("{n}, {b} BLOCKED"),
            },
        ]
    };
    let mut rows: Vec<Vec<String>> = s.total.iter().map(row).collect();
    rows.extend(s.destinations.iter().map(row));
    table(
        &[
            "DESTINATION",
            "PENDING",
            "RETRY",
            "IN FLIGHT",
            "DEAD",
            "OLDEST",
            "DONE/1H",
            "FAILED/1H",
            "E2E P95/1H",
            "ATTEMPT P95/1H",
            "BREAKER",
            "LEVEL",
            "LANES",
        ],
        rows,
    );
    if !s.quotas.is_empty() {
        outln!();
        let rows = s
            .quotas
            .iter()
            .map(|q| {
                let share = q.used as f64 * 100.0 / q.limit.max(1) as f64;
                vec![
                    q.quota.clone(),
                    q.used.to_string(),
                    q.limit.to_string(),
                    format!("{share:.0} %"),
                ]
            })
            .collect();
        table(&["QUOTA", "USED", "LIMIT", "USE"], rows);
    }
    let blocked: u64 = s.destinations.iter().map(|d| d.blocked_lanes).sum();
    if blocked > 0 {
        outln!();
        outln!(
            "{blocked} FIFO lane(s) blocked by a dead letter: `hookd dlq list` shows them (LANE); replay (`hookd dlq replay --id ID`) or skip (`hookd dlq purge --id ID`) to move each lane on"
        );
    }
    if !s.replay_jobs.is_empty() {
        outln!();
        outln!("replay jobs running or paused:");
        replay::print_jobs(&s.replay_jobs);
    }
}

fn print_endpoints(endpoints: &[pb::Endpoint]) {
    let rows = endpoints
        .iter()
        .map(|e| {
            let state = if e.paused {
                format!("paused: {}", e.paused_reason)
            } else if e.disabled {
                format!("disabled: {}", e.disabled_reason)
            } else {
                "active".into()
            };
            vec![
                e.name.clone(),
                e.url.clone(),
                state,
                e.secret_summaries.len().to_string(),
                {
                    let mut names: Vec<&str> = e.headers.keys().map(String::as_str).collect();
                    names.sort_unstable();
                    if names.is_empty() {
                        "-".to_owned()
                    } else {
                        names.join(",")
                    }
                },
                if e.max_attempts == 0 {
                    "default".into()
                } else {
                    e.max_attempts.to_string()
                },
            ]
        })
        .collect();
    table(
        &["NAME", "URL", "STATE", "SECRETS", "HEADERS", "MAX ATTEMPTS"],
        rows,
    );
}

fn print_message(m: &pb::GetMessageResponse) {
    let state = pb::MessageState::try_from(m.state)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("MESSAGE_STATE_")
                .to_lowercase()
        })
        .unwrap_or_else(|_| m.state.to_string());
    outln!("id           {}", m.id);
    outln!("destination  {}", destination_text(&m.destination));
    outln!("state        {state}");
    outln!("attempts     {} of {}", m.attempts, m.max_attempts);
    outln!("enqueued     {}", when(m.enqueued_unix_ms));
    if m.next_attempt_unix_ms > 0 {
        outln!("next attempt {}", when(m.next_attempt_unix_ms));
    }
    if !m.event_type.is_empty() {
        outln!("event type   {}", m.event_type);
    }
    outln!("payload      {} bytes", m.payload_size);
    // The payload itself: as JSON when it is JSON (the JSON API's rule), else as text when
    // it is UTF-8; a binary one is only sized.
    if let Some(v) = hookd_core::payload::as_json(&m.payload, &m.headers) {
        let text = serde_json::to_string_pretty(&v).unwrap_or_default();
        for line in text.lines() {
            outln!("  {line}");
        }
    } else if let Ok(text) = std::str::from_utf8(&m.payload)
        && !text.is_empty()
    {
        outln!("  {}", excerpt(text, 400));
    } else if m.payload_expired {
        outln!("  (expired: the log no longer holds it)");
    }
    if !m.last_error.is_empty() {
        outln!("last error   {}", excerpt(&m.last_error, 120));
    }
    let rows = m
        .history
        .iter()
        .map(|a| {
            vec![
                a.number.to_string(),
                when(a.started_unix_ms),
                a.outcome.clone(),
                if a.http_status == 0 {
                    "-".into()
                } else {
                    a.http_status.to_string()
                },
                format!("{:.1}", a.latency_us as f64 / 1e3),
                excerpt(&a.error, 60),
            ]
        })
        .collect();
    outln!();
    table(&["#", "STARTED", "OUTCOME", "STATUS", "MS", "ERROR"], rows);
}

fn print_analysis(r: &pb::AnalyzeDeadLettersResponse) {
    outln!(
        "dead letters from {} to {}: {} looked at{}",
        when(r.window_start_unix_ms),
        when(r.window_end_unix_ms),
        r.scanned,
        if r.truncated { " (more exist)" } else { "" }
    );
    if r.destinations.is_empty() {
        outln!("none in this window");
    }
    for a in &r.destinations {
        outln!();
        outln!(
            "{}: {}, first {}, last {}, {:.1} attempts on average, at most {} in one hour",
            a.destination,
            dead_letters(a.count),
            when(a.first_unix_ms),
            when(a.last_unix_ms),
            a.average_attempts,
            a.busiest_hour_count
        );
        outln!(
            "  commonest error: {} ({}x); commonest status: {} ({}x)",
            excerpt(&a.most_common_error, 80),
            a.most_common_error_count,
            if a.most_common_status == 0 {
                "none".into()
            } else {
                a.most_common_status.to_string()
            },
            a.most_common_status_count
        );
        for p in &a.patterns {
            outln!("  pattern {}: {}", p.kind, p.description);
            outln!("    what to do: {}", p.suggestion);
        }
    }
}

/// "1 dead letter", "2 dead letters".
fn dead_letters(n: u64) -> String {
    format!("{n} dead letter{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #26, 16: "1 dead letter", not "1 dead letters".
    #[test]
    fn counts_of_dead_letters_agree_in_number() {
        assert_eq!(dead_letters(1), "1 dead letter");
        assert_eq!(dead_letters(0), "0 dead letters");
        assert_eq!(dead_letters(12), "12 dead letters");
    }

    #[test]
    fn dates_and_durations_read_as_people_write_them() {
        assert_eq!(when(0), "-");
        assert_eq!(when(1_000), "1970-01-01 00:00:01");
        assert_eq!(when(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(when(1_796_083_200_000), "2026-12-01 00:00:00");
        assert_eq!(parse_age("90m"), Ok(5_400_000));
        assert_eq!(parse_age("2d"), Ok(172_800_000));
        assert_eq!(parse_age("15"), Ok(15_000));
        assert!(parse_age("2w").is_err());
        assert!(parse_age("h").is_err());
    }

    #[test]
    fn each_failure_class_has_its_exit_code_and_a_hint() {
        use tonic::{Code, Status};
        let f = |code| Failure::status("http://h:1", &Status::new(code, "why"));
        assert_eq!(f(Code::InvalidArgument).code, 2);
        assert_eq!(f(Code::FailedPrecondition).code, 2);
        let unavailable = f(Code::Unavailable);
        assert_eq!(unavailable.code, 3);
        assert_eq!(
            unavailable.message,
            "hookd at http://h:1 is unavailable: why"
        );
        assert_eq!(f(Code::NotFound).code, 4);
        let unauthenticated = f(Code::Unauthenticated);
        assert_eq!(unauthenticated.code, 5);
        assert!(unauthenticated.message.contains("--token or HOOKD_TOKEN"));
        let denied = f(Code::PermissionDenied);
        assert_eq!(denied.code, 5);
        assert!(denied.message.contains("scope"));
        assert_eq!(f(Code::ResourceExhausted).code, 6);
        assert_eq!(f(Code::Internal).code, 1);
    }

    #[test]
    fn destinations_parse_from_their_keys() {
        use pb::destination::Kind;
        let kind = |s: &str| destination(s).ok().and_then(|d| d.kind);
        assert_eq!(kind("queue:q"), Some(Kind::Queue("q".into())));
        assert_eq!(kind("endpoint:e"), Some(Kind::Endpoint("e".into())));
        assert_eq!(
            kind("https://x.example/h"),
            Some(Kind::Url("https://x.example/h".into()))
        );
        assert!(destination("q").is_err());
        assert_eq!(parse_header("x-a = 1"), Ok(("x-a".into(), "1".into())));
        assert!(parse_header("nope").is_err());
    }
}
