//! Broker configuration: the command line, the environment and an optional TOML file,
//! resolved into one [`Settings`].
//!
//! The 14 `CONNECTORS_AMQP10_*` settings keep the names, defaults and validation of the
//! KubeMQ AMQP 1.0 connector; sluice's own settings use `SLUICE_*` variables. Every
//! setting can also be given as a flag (`--kebab-name`) or as a flat snake_case key in
//! the TOML file. Precedence: flag > environment > file > default.
//!
//! Values are read as text from every source and go through one parser, so a setting is
//! judged the same way wherever it came from, and an error names its source and the
//! valid range on one line.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;

/// The version printed by `--version` and in the help text.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runtime ceiling applied to `max_unsettled_per_link` (the reference's `1<<20` clamp).
const MAX_UNSETTLED_CEILING: u32 = 1 << 20;

/// Runtime value used when `max_unsettled_per_link` is 0 (the reference's "unset" fallback).
const MAX_UNSETTLED_FALLBACK: u32 = 256;

/// Values longer than this are shortened in error messages.
const SHOWN_VALUE_MAX_CHARS: usize = 64;

/// All broker settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `CONNECTORS_AMQP10_ENABLE` (default true). When false no AMQP 1.0 listener binds
    /// and the other `CONNECTORS_AMQP10_*` settings are not validated.
    pub enable: bool,
    /// `CONNECTORS_AMQP10_PORT` (default 5672): plain TCP + SASL listener; 0 disables it.
    pub port: u16,
    /// `CONNECTORS_AMQP10_TLS_PORT` (default 5671): TLS listener; 0 disables it.
    pub tls_port: u16,
    /// `CONNECTORS_AMQP10_MAX_FRAME_SIZE` (default 131072, at least 512): advertised in OPEN.
    pub max_frame_size: u32,
    /// `CONNECTORS_AMQP10_MAX_MESSAGE_SIZE` (default 100 MiB, more than 0).
    pub max_message_size: u64,
    /// `CONNECTORS_AMQP10_SESSION_MAX` (default 256, 1..=65535): sessions per connection.
    pub session_max: u32,
    /// `CONNECTORS_AMQP10_MAX_LINKS_PER_SESSION` (default 256, at least 1).
    pub max_links_per_session: u32,
    /// `CONNECTORS_AMQP10_MAX_CONNECTIONS` (default 1000): per node; 0 = unlimited.
    pub max_connections: u32,
    /// `CONNECTORS_AMQP10_IDLE_TIMEOUT_SECONDS` (default 120): 0 disables idle handling.
    pub idle_timeout_seconds: u32,
    /// `CONNECTORS_AMQP10_DEFAULT_PATTERN` (default queues): backend for bare addresses.
    pub default_pattern: Pattern,
    /// `CONNECTORS_AMQP10_GET_BATCH_SIZE` (default 32, 1..=1024): queue items per long-poll.
    pub get_batch_size: u32,
    /// `CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK` (default 1024, at least 1). Use
    /// [`Settings::effective_max_unsettled`] at runtime: it applies the reference's clamp.
    pub max_unsettled_per_link: u32,
    /// `CONNECTORS_AMQP10_DEFAULT_RPC_TIMEOUT_SECONDS` (default 30, at least 1): RPC reply
    /// timeout for requests without a ttl.
    pub default_rpc_timeout_seconds: u32,
    /// `CONNECTORS_AMQP10_RPC_MAX_PENDING` (default 512, at least 1): outstanding RPC
    /// requests before new ones get `amqp:resource-limit-exceeded`.
    pub rpc_max_pending: u32,
    /// `SLUICE_HOST` (default 0.0.0.0): IP address the AMQP listeners bind to.
    pub host: String,
    /// `SLUICE_ADMIN_ADDR` (default 0.0.0.0:8080): socket address of the HTTP admin server.
    pub admin_addr: String,
    /// `SLUICE_SHARDS` (default: number of CPUs, 1..=256): executor threads.
    pub shards: usize,
    /// `SLUICE_DATA_DIR` (default ./data): where the durable store lives.
    pub data_dir: PathBuf,
    /// `SLUICE_DURABILITY` (default memory): how durable patterns persist messages.
    pub durability: Durability,
    /// `SLUICE_HANDSHAKE_TIMEOUT_SECONDS` (default 10, at least 1): time allowed from
    /// accept to a completed OPEN.
    pub handshake_timeout_seconds: u32,
    /// `SLUICE_WRITE_TIMEOUT_SECONDS` (default 30): a connection whose socket takes
    /// none of its output for this long (its peer stopped reading) is dropped; 0 waits
    /// for ever.
    pub write_timeout_seconds: u32,
    /// `SLUICE_LOG_FORMAT` (default human): log line format.
    pub log_format: LogFormat,
    /// `SLUICE_EVENTS_STORE_STALL` (default detach): what an events-store consume link
    /// does when its window fills at zero credit: detach (the reference) or hold (lossless).
    pub events_store_stall: StallPolicy,
    /// `SLUICE_MAX_OUTSTANDING_MESSAGES` (default 0 = off): server default for the
    /// per-link outstanding (delivered, unsettled) message watermark.
    pub max_outstanding_messages: u32,
    /// `SLUICE_MAX_OUTSTANDING_BYTES` (default 0 = off): server default for the per-link
    /// outstanding bytes watermark.
    pub max_outstanding_bytes: u64,
    /// `SLUICE_EVENTS_BUFFER` (default 0): events held per subscriber at zero credit
    /// before the oldest are dropped.
    pub events_buffer: u32,
    /// `SLUICE_EVENTS_IN_FLIGHT_BYTES` (default 32 MiB): events on their way to one
    /// subscriber link (handed on by the channel, not yet written by the subscriber's
    /// connection), each counted as its payload plus 64 bytes; beyond it, an event
    /// meets that subscriber as if it had no credit (at most once: dropped, counted,
    /// the gap announced). Bounds what a subscriber with a huge credit that stops
    /// reading can cost.
    pub events_in_flight_bytes: u64,
    /// `SLUICE_ACK_DEADLINE_SECONDS` (default 0 = off): queue deliveries not settled in
    /// time return to the queue.
    pub ack_deadline_seconds: u32,
    /// `SLUICE_MAX_RECEIVE_COUNT` (default 0 = off): a queue message delivered this many
    /// times moves to `queues/<channel>.dlq` instead of being requeued.
    pub max_receive_count: u32,
    /// `SLUICE_METRICS_CHANNEL_CAP` (default 100): channels with their own label set on
    /// /metrics; the rest are summed under channel="*other".
    pub metrics_channel_cap: u32,
    /// `SLUICE_EVENTS_STORE_RETENTION_SECONDS` (default 604800 = 7 days, 0 = no
    /// limit): events-store events older than this are dropped.
    pub events_store_retention_seconds: u64,
    /// `SLUICE_EVENTS_STORE_RETENTION_BYTES` (default 1073741824, 0 = no limit): per
    /// events-store channel, the oldest events are dropped beyond this size.
    pub events_store_retention_bytes: u64,
    /// `SLUICE_QUEUE_MAX_MESSAGES` (default 1000000, 0 = no limit): per queue channel,
    /// messages stored (waiting and delivered-unsettled); a publish beyond it is
    /// rejected with `amqp:resource-limit-exceeded` "queue full".
    pub queue_max_messages: u64,
    /// `SLUICE_QUEUE_MAX_BYTES` (default 1073741824, 0 = no limit): per queue channel,
    /// payload bytes stored; a publish that would pass it is rejected the same way (a
    /// single larger message still enters an empty queue).
    pub queue_max_bytes: u64,
    /// `SLUICE_MAX_CHANNELS` (default 100000): channels one shard keeps (every pattern
    /// together); a publish or attach that would create one more is refused with
    /// `amqp:resource-limit-exceeded`. Idle, empty channels are forgotten.
    pub max_channels: u32,
    /// `SLUICE_MAX_DURABLE_SUBSCRIPTIONS` (default 100000): durable events-store
    /// subscriptions one shard keeps (attached or not); an attach that would create one
    /// more is refused with `amqp:resource-limit-exceeded`.
    pub max_durable_subscriptions: u32,
    /// `SLUICE_DURABLE_SUBSCRIPTION_EXPIRY_SECONDS` (default 2678400 = 31 days, 0 =
    /// never): a durable events-store subscription that nobody attached for this long
    /// is deleted (its cursor is forgotten, on disk too).
    pub durable_subscription_expiry_seconds: u64,
    /// `SLUICE_AUTH_ENABLED` (default 'false'): Require authentication (SASL PLAIN with a JWT, or EXTERNAL with mTLS) and authorize with casbin.
    pub auth_enabled: bool,
    /// `SLUICE_AUTH_JWT_KEY_FILE` (default ''): JWT key: an HS256 secret or an RS256 public key (PEM).
    pub auth_jwt_key_file: String,
    /// `SLUICE_AUTH_JWT_AUDIENCE` (default ''): Audience a JWT must name.
    pub auth_jwt_audience: String,
    /// `SLUICE_AUTH_CASBIN_MODEL` (default ''): Casbin model file.
    pub auth_casbin_model: String,
    /// `SLUICE_AUTH_CASBIN_POLICY` (default ''): Casbin policy file.
    pub auth_casbin_policy: String,
    /// `SLUICE_TLS_CERT_FILE` (default ''): Server certificate chain for the TLS listener.
    pub tls_cert_file: String,
    /// `SLUICE_TLS_KEY_FILE` (default ''): Server private key for the TLS listener.
    pub tls_key_file: String,
    /// `SLUICE_TLS_CLIENT_CA_FILE` (default ''): CA for client certificates (mTLS; enables SASL EXTERNAL).
    pub tls_client_ca_file: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enable: true,
            port: 5672,
            tls_port: 5671,
            max_frame_size: 131_072,
            max_message_size: 104_857_600,
            session_max: 256,
            max_links_per_session: 256,
            max_connections: 1000,
            idle_timeout_seconds: 120,
            default_pattern: Pattern::Queues,
            get_batch_size: 32,
            max_unsettled_per_link: 1024,
            default_rpc_timeout_seconds: 30,
            rpc_max_pending: 512,
            host: "0.0.0.0".to_owned(),
            admin_addr: "0.0.0.0:8080".to_owned(),
            shards: default_shards(),
            data_dir: PathBuf::from("./data"),
            durability: Durability::Fsync,
            handshake_timeout_seconds: 10,
            write_timeout_seconds: 30,
            log_format: LogFormat::Human,
            events_store_stall: StallPolicy::Detach,
            max_outstanding_messages: 0,
            max_outstanding_bytes: 0,
            events_buffer: 0,
            events_in_flight_bytes: 32 << 20,
            ack_deadline_seconds: 0,
            max_receive_count: 0,
            metrics_channel_cap: 100,
            events_store_retention_seconds: 604_800,
            events_store_retention_bytes: 1 << 30,
            queue_max_messages: 1_000_000,
            queue_max_bytes: 1 << 30,
            max_channels: 100_000,
            max_durable_subscriptions: 100_000,
            durable_subscription_expiry_seconds: 2_678_400,
            auth_enabled: false,
            auth_jwt_key_file: String::new(),
            auth_jwt_audience: String::new(),
            auth_casbin_model: String::new(),
            auth_casbin_policy: String::new(),
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_client_ca_file: String::new(),
        }
    }
}

impl Settings {
    /// The `channel-max` sluice advertises in OPEN: `session_max - 1`, saturating at 0
    /// and at `u16::MAX`.
    pub fn channel_max(&self) -> u16 {
        u16::try_from(self.session_max.saturating_sub(1)).unwrap_or(u16::MAX)
    }

    /// The `handle-max` sluice advertises in BEGIN: `max_links_per_session - 1`,
    /// saturating at 0.
    pub fn handle_max(&self) -> u32 {
        self.max_links_per_session.saturating_sub(1)
    }

    /// The idle timeout in milliseconds (`idle_timeout_seconds * 1000`, saturating);
    /// 0 means idle handling is off. Close a connection after this long without input.
    pub fn idle_timeout_ms(&self) -> u32 {
        self.idle_timeout_seconds.saturating_mul(1000)
    }

    /// The `idle-time-out` sluice advertises in OPEN: half of [`Settings::idle_timeout_ms`],
    /// as the reference does (60000 by default); 0 when idle handling is off.
    pub fn advertised_idle_timeout_ms(&self) -> u32 {
        self.idle_timeout_ms() / 2
    }

    /// `max_unsettled_per_link` as used at runtime: clamped to `[1, 1<<20]`, and 256 when
    /// it is 0 (only possible while AMQP 1.0 is disabled), like the reference's runtime.
    pub fn effective_max_unsettled(&self) -> u32 {
        match self.max_unsettled_per_link {
            0 => MAX_UNSETTLED_FALLBACK,
            n => n.min(MAX_UNSETTLED_CEILING),
        }
    }
}

/// Renders the settings as a TOML file that [`parse`] reads back to the same value
/// (what `check-config` prints).
impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |s: &str| toml::Value::String(s.to_owned()).to_string();
        writeln!(f, "enable = {}", self.enable)?;
        writeln!(f, "port = {}", self.port)?;
        writeln!(f, "tls_port = {}", self.tls_port)?;
        writeln!(f, "max_frame_size = {}", self.max_frame_size)?;
        writeln!(f, "max_message_size = {}", self.max_message_size)?;
        writeln!(f, "session_max = {}", self.session_max)?;
        writeln!(f, "max_links_per_session = {}", self.max_links_per_session)?;
        writeln!(f, "max_connections = {}", self.max_connections)?;
        writeln!(f, "idle_timeout_seconds = {}", self.idle_timeout_seconds)?;
        writeln!(f, "default_pattern = {}", text(self.default_pattern.as_str()))?;
        writeln!(f, "get_batch_size = {}", self.get_batch_size)?;
        writeln!(f, "max_unsettled_per_link = {}", self.max_unsettled_per_link)?;
        writeln!(f, "default_rpc_timeout_seconds = {}", self.default_rpc_timeout_seconds)?;
        writeln!(f, "rpc_max_pending = {}", self.rpc_max_pending)?;
        writeln!(f, "host = {}", text(&self.host))?;
        writeln!(f, "admin_addr = {}", text(&self.admin_addr))?;
        writeln!(f, "shards = {}", self.shards)?;
        writeln!(f, "data_dir = {}", text(&self.data_dir.to_string_lossy()))?;
        writeln!(f, "durability = {}", text(self.durability.as_str()))?;
        writeln!(f, "handshake_timeout_seconds = {}", self.handshake_timeout_seconds)?;
        writeln!(f, "write_timeout_seconds = {}", self.write_timeout_seconds)?;
        writeln!(f, "log_format = {}", text(self.log_format.as_str()))?;
        writeln!(f, "events_store_stall = {}", text(self.events_store_stall.as_str()))?;
        writeln!(f, "max_outstanding_messages = {}", self.max_outstanding_messages)?;
        writeln!(f, "max_outstanding_bytes = {}", self.max_outstanding_bytes)?;
        writeln!(f, "events_buffer = {}", self.events_buffer)?;
        writeln!(f, "events_in_flight_bytes = {}", self.events_in_flight_bytes)?;
        writeln!(f, "ack_deadline_seconds = {}", self.ack_deadline_seconds)?;
        writeln!(f, "max_receive_count = {}", self.max_receive_count)?;
        writeln!(f, "metrics_channel_cap = {}", self.metrics_channel_cap)?;
        writeln!(f, "events_store_retention_seconds = {}", self.events_store_retention_seconds)?;
        writeln!(f, "events_store_retention_bytes = {}", self.events_store_retention_bytes)?;
        writeln!(f, "queue_max_messages = {}", self.queue_max_messages)?;
        writeln!(f, "queue_max_bytes = {}", self.queue_max_bytes)?;
        writeln!(f, "max_channels = {}", self.max_channels)?;
        writeln!(f, "max_durable_subscriptions = {}", self.max_durable_subscriptions)?;
        writeln!(f, "durable_subscription_expiry_seconds = {}", self.durable_subscription_expiry_seconds)?;
        writeln!(f, "auth_enabled = {}", self.auth_enabled)?;
        writeln!(f, "auth_jwt_key_file = {}", text(&self.auth_jwt_key_file))?;
        writeln!(f, "auth_jwt_audience = {}", text(&self.auth_jwt_audience))?;
        writeln!(f, "auth_casbin_model = {}", text(&self.auth_casbin_model))?;
        writeln!(f, "auth_casbin_policy = {}", text(&self.auth_casbin_policy))?;
        writeln!(f, "tls_cert_file = {}", text(&self.tls_cert_file))?;
        writeln!(f, "tls_key_file = {}", text(&self.tls_key_file))?;
        writeln!(f, "tls_client_ca_file = {}", text(&self.tls_client_ca_file))
    }
}

/// A KubeMQ messaging pattern: the backend an address prefix selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    /// `queues`: work queues.
    Queues,
    /// `events`: at-most-once pub/sub.
    Events,
    /// `events-store`: persistent pub/sub with replay.
    EventsStore,
    /// `commands`: RPC without a reply body.
    Commands,
    /// `queries`: RPC with a reply body.
    Queries,
}

impl Pattern {
    /// Every pattern, in the reference's order.
    pub const ALL: [Pattern; 5] =
        [Pattern::Queues, Pattern::Events, Pattern::EventsStore, Pattern::Commands, Pattern::Queries];

    /// The pattern's name as it appears in addresses and settings, e.g. `events-store`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Queues => "queues",
            Pattern::Events => "events",
            Pattern::EventsStore => "events-store",
            Pattern::Commands => "commands",
            Pattern::Queries => "queries",
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses exactly one of `queues`, `events`, `events-store`, `commands`, `queries`
/// (case-sensitive, as the reference).
impl FromStr for Pattern {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Pattern::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| ConfigError(format!("{} is not a pattern: {PATTERN_CHOICES}", shown(s))))
    }
}

const PATTERN_CHOICES: &str = "must be one of queues, events, events-store, commands, queries";

/// How messages of the durable patterns (queues, events-store) are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// `memory`: in RAM only; lost on restart.
    Memory,
    /// `fsync`: written to `data_dir` and synced to disk.
    Fsync,
}

impl Durability {
    /// The setting's spelling: `memory` or `fsync`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Memory => "memory",
            Durability::Fsync => "fsync",
        }
    }
}

/// Parses `memory` or `fsync` (case-sensitive).
impl FromStr for Durability {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "memory" => Ok(Durability::Memory),
            "fsync" => Ok(Durability::Fsync),
            _ => Err(ConfigError(format!("{} is not a durability: must be memory or fsync", shown(s)))),
        }
    }
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// `human`: plain text for a terminal.
    Human,
    /// `json`: one JSON object per line.
    Json,
}

impl LogFormat {
    /// The setting's spelling: `human` or `json`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Human => "human",
            LogFormat::Json => "json",
        }
    }
}

/// Parses `human` or `json` (case-sensitive).
impl FromStr for LogFormat {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "human" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            _ => Err(ConfigError(format!("{} is not a log format: must be human or json", shown(s)))),
        }
    }
}

/// Events-store behaviour when a consume link's window is full at zero credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StallPolicy {
    /// `detach`: the reference's behaviour: detach "credit stalled", the window is lost.
    Detach,
    /// `hold`: lossless: wait for credit; the cursor moves only past what was sent.
    Hold,
}

impl StallPolicy {
    /// The setting's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StallPolicy::Detach => "detach",
            StallPolicy::Hold => "hold",
        }
    }
}

/// Parses `detach` or `hold`.
impl FromStr for StallPolicy {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "detach" => Ok(StallPolicy::Detach),
            "hold" => Ok(StallPolicy::Hold),
            _ => Err(ConfigError(format!("{} is not a stall policy: must be detach or hold", shown(s)))),
        }
    }
}

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run the broker with these settings.
    Run(Settings),
    /// `check-config`: the settings are valid; print them and exit 0.
    CheckConfig(Settings),
    /// `--help` / `-h`: print this text and exit 0.
    Help(String),
    /// `--version` / `-V`: print [`VERSION`] and exit 0.
    Version,
}

/// A configuration error: printed as one clear line; the binary exits with code 2.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Parse `args` (without `argv[0]`) with environment `env` (a lookup function, so tests
/// don't touch the process env) and an optional TOML file named by `--config <path>`
/// (or the `SLUICE_CONFIG` variable).
/// Precedence: flag > environment > file > default.
///
/// `--help` and `--version` answer before any environment variable or file is read.
/// Empty environment variables count as unset. The first problem found is returned.
pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Command, ConfigError> {
    let cli = match parse_args(args)? {
        Parsed::Help => return Ok(Command::Help(help_text())),
        Parsed::Version => return Ok(Command::Version),
        Parsed::Cli(cli) => cli,
    };
    let env = |name: &str| env(name).filter(|v| !v.is_empty());

    let mut raw: [Option<Raw>; KEY_COUNT] = std::array::from_fn(|_| None);
    if let Some(path) = cli.config.or_else(|| env(CONFIG_ENV)) {
        for (key, value) in read_file(&path)? {
            raw[key as usize] = Some(value);
        }
    }
    for key in Key::ALL {
        if let Some(value) = env(key.env()) {
            raw[key as usize] = Some(Raw { value, origin: Origin::Env });
        }
    }
    for (key, value) in cli.flags {
        raw[key as usize] = Some(Raw { value, origin: Origin::Flag });
    }

    let settings = resolve(&raw)?;
    Ok(if cli.check { Command::CheckConfig(settings) } else { Command::Run(settings) })
}

/// The full --help text: every setting with its env var, TOML key, flag, default and
/// valid range.
pub fn help_text() -> String {
    let mut out = format!(
        "sluice {VERSION}: a thread-per-core AMQP 1.0 broker

Usage:
  sluice [OPTIONS]                 run the broker
  sluice check-config [OPTIONS]    validate the configuration, print it as TOML and exit
  sluice --help | --version

Options:
  --config <file>   read settings from a TOML file (env {CONFIG_ENV}); flat snake_case
                    keys as listed below, e.g. `port = 5672`, `default_pattern = \"events\"`
  -h, --help        print this help and exit
  -V, --version     print the version and exit

Every setting is a flag (`--name <value>` or `--name=<value>`), an environment
variable and a key in the TOML file. Precedence: flag > environment > file > default.
Booleans are true, false, 1 or 0 (any case); integers are plain decimal; an empty
environment variable counts as unset. An invalid configuration is reported on one
line and sluice exits with status 2.
"
    );
    for key in Key::ALL {
        if key == Key::Enable {
            out.push_str(
                "\nAMQP 1.0 settings (names, defaults and validation of the KubeMQ AMQP 1.0 \
                 connector;\nwhen enable is false the other settings in this group are \
                 not validated):\n",
            );
        }
        if key == Key::Host {
            out.push_str("\nsluice settings (always validated):\n");
        }
        let spec = key.spec();
        out.push_str(&format!(
            "\n  --{} <{}>\n      {}\n      env {}  |  toml {}  |  default {}  |  valid {}\n",
            key.flag(),
            spec.placeholder,
            spec.about,
            key.env(),
            spec.name,
            spec.default,
            spec.valid,
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------
// The settings table.

/// The environment variable that names the TOML file.
const CONFIG_ENV: &str = "SLUICE_CONFIG";

const KEY_COUNT: usize = 45;

/// One configurable setting; the order is the order of [`Settings`] and of the help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Enable,
    Port,
    TlsPort,
    MaxFrameSize,
    MaxMessageSize,
    SessionMax,
    MaxLinksPerSession,
    MaxConnections,
    IdleTimeoutSeconds,
    DefaultPattern,
    GetBatchSize,
    MaxUnsettledPerLink,
    DefaultRpcTimeoutSeconds,
    RpcMaxPending,
    Host,
    AdminAddr,
    Shards,
    DataDir,
    Durability,
    HandshakeTimeoutSeconds,
    WriteTimeoutSeconds,
    LogFormat,
    EventsStoreStall,
    MaxOutstandingMessages,
    MaxOutstandingBytes,
    EventsBuffer,
    EventsInFlightBytes,
    AckDeadlineSeconds,
    MaxReceiveCount,
    MetricsChannelCap,
    EventsStoreRetentionSeconds,
    EventsStoreRetentionBytes,
    QueueMaxMessages,
    QueueMaxBytes,
    MaxChannels,
    MaxDurableSubscriptions,
    DurableSubscriptionExpirySeconds,
    AuthEnabled,
    AuthJwtKeyFile,
    AuthJwtAudience,
    AuthCasbinModel,
    AuthCasbinPolicy,
    TlsCertFile,
    TlsKeyFile,
    TlsClientCaFile,
}

/// What the help text says about a setting; the name is also the TOML key.
struct Spec {
    name: &'static str,
    placeholder: &'static str,
    default: &'static str,
    valid: &'static str,
    about: &'static str,
}

impl Key {
    const ALL: [Key; KEY_COUNT] = [
        Key::Enable,
        Key::Port,
        Key::TlsPort,
        Key::MaxFrameSize,
        Key::MaxMessageSize,
        Key::SessionMax,
        Key::MaxLinksPerSession,
        Key::MaxConnections,
        Key::IdleTimeoutSeconds,
        Key::DefaultPattern,
        Key::GetBatchSize,
        Key::MaxUnsettledPerLink,
        Key::DefaultRpcTimeoutSeconds,
        Key::RpcMaxPending,
        Key::Host,
        Key::AdminAddr,
        Key::Shards,
        Key::DataDir,
        Key::Durability,
        Key::HandshakeTimeoutSeconds,
        Key::WriteTimeoutSeconds,
        Key::LogFormat,
        Key::EventsStoreStall,
        Key::MaxOutstandingMessages,
        Key::MaxOutstandingBytes,
        Key::EventsBuffer,
        Key::EventsInFlightBytes,
        Key::AckDeadlineSeconds,
        Key::MaxReceiveCount,
        Key::MetricsChannelCap,
        Key::EventsStoreRetentionSeconds,
        Key::EventsStoreRetentionBytes,
        Key::QueueMaxMessages,
        Key::QueueMaxBytes,
        Key::MaxChannels,
        Key::MaxDurableSubscriptions,
        Key::DurableSubscriptionExpirySeconds,
        Key::AuthEnabled,
        Key::AuthJwtKeyFile,
        Key::AuthJwtAudience,
        Key::AuthCasbinModel,
        Key::AuthCasbinPolicy,
        Key::TlsCertFile,
        Key::TlsKeyFile,
        Key::TlsClientCaFile,
    ];

    fn env(self) -> &'static str {
        match self {
            Key::Enable => "CONNECTORS_AMQP10_ENABLE",
            Key::Port => "CONNECTORS_AMQP10_PORT",
            Key::TlsPort => "CONNECTORS_AMQP10_TLS_PORT",
            Key::MaxFrameSize => "CONNECTORS_AMQP10_MAX_FRAME_SIZE",
            Key::MaxMessageSize => "CONNECTORS_AMQP10_MAX_MESSAGE_SIZE",
            Key::SessionMax => "CONNECTORS_AMQP10_SESSION_MAX",
            Key::MaxLinksPerSession => "CONNECTORS_AMQP10_MAX_LINKS_PER_SESSION",
            Key::MaxConnections => "CONNECTORS_AMQP10_MAX_CONNECTIONS",
            Key::IdleTimeoutSeconds => "CONNECTORS_AMQP10_IDLE_TIMEOUT_SECONDS",
            Key::DefaultPattern => "CONNECTORS_AMQP10_DEFAULT_PATTERN",
            Key::GetBatchSize => "CONNECTORS_AMQP10_GET_BATCH_SIZE",
            Key::MaxUnsettledPerLink => "CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK",
            Key::DefaultRpcTimeoutSeconds => "CONNECTORS_AMQP10_DEFAULT_RPC_TIMEOUT_SECONDS",
            Key::RpcMaxPending => "CONNECTORS_AMQP10_RPC_MAX_PENDING",
            Key::Host => "SLUICE_HOST",
            Key::AdminAddr => "SLUICE_ADMIN_ADDR",
            Key::Shards => "SLUICE_SHARDS",
            Key::DataDir => "SLUICE_DATA_DIR",
            Key::Durability => "SLUICE_DURABILITY",
            Key::HandshakeTimeoutSeconds => "SLUICE_HANDSHAKE_TIMEOUT_SECONDS",
            Key::WriteTimeoutSeconds => "SLUICE_WRITE_TIMEOUT_SECONDS",
            Key::LogFormat => "SLUICE_LOG_FORMAT",
            Key::EventsStoreStall => "SLUICE_EVENTS_STORE_STALL",
            Key::MaxOutstandingMessages => "SLUICE_MAX_OUTSTANDING_MESSAGES",
            Key::MaxOutstandingBytes => "SLUICE_MAX_OUTSTANDING_BYTES",
            Key::EventsBuffer => "SLUICE_EVENTS_BUFFER",
            Key::EventsInFlightBytes => "SLUICE_EVENTS_IN_FLIGHT_BYTES",
            Key::AckDeadlineSeconds => "SLUICE_ACK_DEADLINE_SECONDS",
            Key::MaxReceiveCount => "SLUICE_MAX_RECEIVE_COUNT",
            Key::MetricsChannelCap => "SLUICE_METRICS_CHANNEL_CAP",
            Key::EventsStoreRetentionSeconds => "SLUICE_EVENTS_STORE_RETENTION_SECONDS",
            Key::EventsStoreRetentionBytes => "SLUICE_EVENTS_STORE_RETENTION_BYTES",
            Key::QueueMaxMessages => "SLUICE_QUEUE_MAX_MESSAGES",
            Key::QueueMaxBytes => "SLUICE_QUEUE_MAX_BYTES",
            Key::MaxChannels => "SLUICE_MAX_CHANNELS",
            Key::MaxDurableSubscriptions => "SLUICE_MAX_DURABLE_SUBSCRIPTIONS",
            Key::DurableSubscriptionExpirySeconds => "SLUICE_DURABLE_SUBSCRIPTION_EXPIRY_SECONDS",
            Key::AuthEnabled => "SLUICE_AUTH_ENABLED",
            Key::AuthJwtKeyFile => "SLUICE_AUTH_JWT_KEY_FILE",
            Key::AuthJwtAudience => "SLUICE_AUTH_JWT_AUDIENCE",
            Key::AuthCasbinModel => "SLUICE_AUTH_CASBIN_MODEL",
            Key::AuthCasbinPolicy => "SLUICE_AUTH_CASBIN_POLICY",
            Key::TlsCertFile => "SLUICE_TLS_CERT_FILE",
            Key::TlsKeyFile => "SLUICE_TLS_KEY_FILE",
            Key::TlsClientCaFile => "SLUICE_TLS_CLIENT_CA_FILE",
        }
    }

    /// The flag name without `--`: the TOML key in kebab case.
    fn flag(self) -> String {
        self.spec().name.replace('_', "-")
    }

    fn from_flag(flag: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|k| k.flag() == flag)
    }

    fn from_name(name: &str) -> Option<Key> {
        Key::ALL.into_iter().find(|k| k.spec().name == name)
    }

    /// The valid range of an integer setting (when validated), or None for the others.
    fn int_range(self) -> Option<(i128, i128)> {
        let u32_max = i128::from(u32::MAX);
        Some(match self {
            Key::Port | Key::TlsPort => (0, 65_535),
            Key::MaxFrameSize => (512, u32_max),
            // The reference's field is an int64.
            Key::MaxMessageSize => (1, i128::from(i64::MAX)),
            Key::SessionMax => (1, 65_535),
            Key::MaxConnections | Key::IdleTimeoutSeconds | Key::WriteTimeoutSeconds => (0, u32_max),
            Key::GetBatchSize => (1, 1024),
            Key::MaxLinksPerSession
            | Key::MaxUnsettledPerLink
            | Key::DefaultRpcTimeoutSeconds
            | Key::RpcMaxPending
            | Key::HandshakeTimeoutSeconds => (1, u32_max),
            Key::Shards => (1, 256),
            Key::MaxOutstandingMessages | Key::MaxReceiveCount => (0, u32_max),
            Key::MaxOutstandingBytes => (0, i128::from(i64::MAX)),
            Key::EventsBuffer => (0, 1 << 20),
            Key::EventsInFlightBytes => (64 << 10, 1 << 40),
            Key::AckDeadlineSeconds => (0, 7 * 24 * 3600),
            Key::MetricsChannelCap => (0, 100_000),
            Key::EventsStoreRetentionSeconds
            | Key::EventsStoreRetentionBytes
            | Key::DurableSubscriptionExpirySeconds
            | Key::QueueMaxMessages
            | Key::QueueMaxBytes => (0, i128::from(i64::MAX)),
            Key::MaxChannels | Key::MaxDurableSubscriptions => (1, u32_max),
            Key::EventsStoreStall
            | Key::AuthEnabled
            | Key::AuthJwtKeyFile
            | Key::AuthJwtAudience
            | Key::AuthCasbinModel
            | Key::AuthCasbinPolicy
            | Key::TlsCertFile
            | Key::TlsKeyFile
            | Key::TlsClientCaFile
            | Key::Enable
            | Key::DefaultPattern
            | Key::Host
            | Key::AdminAddr
            | Key::DataDir
            | Key::Durability
            | Key::LogFormat => return None,
        })
    }

    fn spec(self) -> Spec {
        let (name, placeholder, default, valid, about) = match self {
            Key::Enable => (
                "enable",
                "bool",
                "true",
                "true | false | 1 | 0",
                "Serve AMQP 1.0. When false no AMQP 1.0 listener binds.",
            ),
            Key::Port => (
                "port",
                "port",
                "5672",
                "0..=65535 (0 disables)",
                "Plain TCP listener (SASL or bare AMQP); 0 disables it (then a TLS certificate is needed). Not the TLS port.",
            ),
            Key::TlsPort => (
                "tls_port",
                "port",
                "5671",
                "0..=65535 (0 disables)",
                "TLS listener; 0 disables it. Not both port and tls_port may be 0.",
            ),
            Key::MaxFrameSize => (
                "max_frame_size",
                "bytes",
                "131072",
                "512..=4294967295",
                "Largest frame, advertised in OPEN (min of client and this).",
            ),
            Key::MaxMessageSize => (
                "max_message_size",
                "bytes",
                "104857600",
                "1..=9223372036854775807",
                "Largest message; one byte over gets amqp:link:message-size-exceeded.",
            ),
            Key::SessionMax => (
                "session_max",
                "count",
                "256",
                "1..=65535",
                "Sessions per connection; channel-max advertised = session_max - 1.",
            ),
            Key::MaxLinksPerSession => (
                "max_links_per_session",
                "count",
                "256",
                "1..=4294967295",
                "Links per session; handle-max advertised = max_links_per_session - 1.",
            ),
            Key::MaxConnections => (
                "max_connections",
                "count",
                "1000",
                "0..=4294967295 (0 = unlimited)",
                "AMQP 1.0 connections on this node; over it gets amqp:resource-limit-exceeded.",
            ),
            Key::IdleTimeoutSeconds => (
                "idle_timeout_seconds",
                "seconds",
                "120",
                "0..=4294967295 (0 disables)",
                "Close a connection idle this long; half of it is advertised in OPEN.",
            ),
            Key::DefaultPattern => (
                "default_pattern",
                "pattern",
                "queues",
                "queues | events | events-store | commands | queries",
                "Backend for bare addresses without a queue/topic hint.",
            ),
            Key::GetBatchSize => {
                ("get_batch_size", "count", "32", "1..=1024", "Most queue messages fetched per long-poll.")
            }
            Key::MaxUnsettledPerLink => (
                "max_unsettled_per_link",
                "count",
                "1024",
                "1..=4294967295 (clamped to 1048576 at use)",
                "Unsettled deliveries and buffered messages per link; the credit granted.",
            ),
            Key::DefaultRpcTimeoutSeconds => (
                "default_rpc_timeout_seconds",
                "seconds",
                "30",
                "1..=4294967295",
                "RPC reply timeout for requests without a ttl.",
            ),
            Key::RpcMaxPending => (
                "rpc_max_pending",
                "count",
                "512",
                "1..=4294967295",
                "Outstanding RPC requests; over it gets amqp:resource-limit-exceeded.",
            ),
            Key::Host => ("host", "ip", "0.0.0.0", "an IPv4 or IPv6 address", "Address the AMQP listeners bind to."),
            Key::AdminAddr => (
                "admin_addr",
                "ip:port",
                "0.0.0.0:8080",
                "a socket address, e.g. 127.0.0.1:8080 or [::1]:8080",
                "HTTP server for /metrics, /api/amqp10/* and /healthz.",
            ),
            Key::Shards => ("shards", "count", "number of CPUs", "1..=256", "Executor threads, one per core."),
            Key::DataDir => ("data_dir", "path", "./data", "a non-empty path", "Directory of the durable store."),
            Key::Durability => (
                "durability",
                "mode",
                "fsync",
                "memory | fsync",
                "How queues and events-store keep messages: in RAM, or on disk with fsync.",
            ),
            Key::HandshakeTimeoutSeconds => (
                "handshake_timeout_seconds",
                "seconds",
                "10",
                "1..=4294967295",
                "Time a new connection has to complete its header, SASL and OPEN.",
            ),
            Key::WriteTimeoutSeconds => (
                "write_timeout_seconds",
                "seconds",
                "30",
                "0..=4294967295 (0 waits for ever)",
                "Drop a connection whose socket takes none of its output this long (the peer stopped reading).",
            ),
            Key::LogFormat => ("log_format", "format", "human", "human | json", "Log line format."),
            Key::EventsStoreStall => (
                "events_store_stall",
                "policy",
                "detach",
                "detach | hold",
                "Events-store window full at zero credit: detach (reference) or hold (lossless).",
            ),
            Key::MaxOutstandingMessages => (
                "max_outstanding_messages",
                "count",
                "0",
                "0..=4294967295 (0 = off)",
                "Default per-link watermark on delivered-but-unsettled messages.",
            ),
            Key::MaxOutstandingBytes => (
                "max_outstanding_bytes",
                "bytes",
                "0",
                "0..=9223372036854775807 (0 = off)",
                "Default per-link watermark on delivered-but-unsettled bytes.",
            ),
            Key::EventsBuffer => (
                "events_buffer",
                "count",
                "0",
                "0..=1048576",
                "Events held per subscriber at zero credit before the oldest are dropped.",
            ),
            Key::EventsInFlightBytes => (
                "events_in_flight_bytes",
                "bytes",
                "33554432",
                "65536..=1099511627776",
                "Events on their way to one subscriber (payload + 64 B each); beyond it they are dropped for it.",
            ),
            Key::AckDeadlineSeconds => (
                "ack_deadline_seconds",
                "seconds",
                "0",
                "0..=604800 (0 = off)",
                "Queue deliveries unsettled this long return to the queue.",
            ),
            Key::MaxReceiveCount => (
                "max_receive_count",
                "count",
                "0",
                "0..=4294967295 (0 = off)",
                "Deliveries before a queue message moves to queues/<channel>.dlq.",
            ),
            Key::MetricsChannelCap => (
                "metrics_channel_cap",
                "count",
                "100",
                "0..=100000",
                "Channels with their own label set on /metrics; the rest as channel=\"_other\".",
            ),
            Key::EventsStoreRetentionSeconds => (
                "events_store_retention_seconds",
                "seconds",
                "604800",
                "0..=9223372036854775807 (0 = no limit)",
                "Events-store events older than this are dropped.",
            ),
            Key::EventsStoreRetentionBytes => (
                "events_store_retention_bytes",
                "bytes",
                "1073741824",
                "0..=9223372036854775807 (0 = no limit)",
                "Per events-store channel: oldest events dropped beyond this size.",
            ),
            Key::QueueMaxMessages => (
                "queue_max_messages",
                "count",
                "1000000",
                "0..=9223372036854775807 (0 = no limit)",
                "Per queue channel: messages stored; a publish beyond it is rejected (queue full).",
            ),
            Key::QueueMaxBytes => (
                "queue_max_bytes",
                "bytes",
                "1073741824",
                "0..=9223372036854775807 (0 = no limit)",
                "Per queue channel: payload bytes stored; a publish that would pass it is rejected (queue full).",
            ),
            Key::MaxChannels => (
                "max_channels",
                "count",
                "100000",
                "1..=4294967295",
                "Channels one shard keeps; a publish or attach that would create one more is refused.",
            ),
            Key::MaxDurableSubscriptions => (
                "max_durable_subscriptions",
                "count",
                "100000",
                "1..=4294967295",
                "Durable events-store subscriptions one shard keeps; an attach that would create one more is refused.",
            ),
            Key::DurableSubscriptionExpirySeconds => (
                "durable_subscription_expiry_seconds",
                "seconds",
                "2678400",
                "0..=9223372036854775807 (0 = never)",
                "A durable events-store subscription nobody attached for this long is deleted.",
            ),
            Key::AuthEnabled => (
                "auth_enabled",
                "bool",
                "false",
                "true | false | 1 | 0",
                "Require authentication (SASL PLAIN with a JWT, or EXTERNAL with mTLS) and authorize with casbin.",
            ),
            Key::AuthJwtKeyFile => (
                "auth_jwt_key_file",
                "path",
                "",
                "a file path (empty: none)",
                "JWT key: an HS256 secret or an RS256 public key (PEM).",
            ),
            Key::AuthJwtAudience => {
                ("auth_jwt_audience", "text", "", "any text (empty: not checked)", "Audience a JWT must name.")
            }
            Key::AuthCasbinModel => {
                ("auth_casbin_model", "path", "", "a file path (empty: no authorization)", "Casbin model file.")
            }
            Key::AuthCasbinPolicy => {
                ("auth_casbin_policy", "path", "", "a file path (empty: no authorization)", "Casbin policy file.")
            }
            Key::TlsCertFile => (
                "tls_cert_file",
                "path",
                "",
                "a PEM file (empty: no TLS listener)",
                "Server certificate chain for the TLS listener.",
            ),
            Key::TlsKeyFile => ("tls_key_file", "path", "", "a PEM file", "Server private key for the TLS listener."),
            Key::TlsClientCaFile => (
                "tls_client_ca_file",
                "path",
                "",
                "a PEM file (empty: no client certificates)",
                "CA for client certificates (mTLS; enables SASL EXTERNAL).",
            ),
        };
        Spec { name, placeholder, default, valid, about }
    }
}

fn default_shards() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 256)
}

// ---------------------------------------------------------------------------------------
// Command line.

enum Parsed {
    Help,
    Version,
    Cli(Cli),
}

struct Cli {
    check: bool,
    config: Option<String>,
    flags: Vec<(Key, String)>,
}

fn parse_args(args: &[String]) -> Result<Parsed, ConfigError> {
    let mut cli = Cli { check: false, config: None, flags: Vec::new() };
    let mut rest = args.iter();
    if args.first().is_some_and(|a| a == "check-config") {
        cli.check = true;
        rest.next();
    }
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "check-config" => return Err(ConfigError("check-config must be the first argument".to_owned())),
            _ => {}
        }
        let Some(body) = arg.strip_prefix("--").filter(|b| !b.is_empty()) else {
            let what = if arg.starts_with('-') { "unknown flag" } else { "unexpected argument" };
            return Err(ConfigError(format!("{what} {} (see --help)", shown(arg))));
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let key = match name {
            "config" => None,
            "help" | "version" => return Err(ConfigError(format!("--{name} does not take a value"))),
            _ => match Key::from_flag(name) {
                Some(key) => Some(key),
                None => return Err(ConfigError(format!("unknown flag --{} (see --help)", shown(name)))),
            },
        };
        let value = match inline {
            Some(value) => Some(value.to_owned()),
            // A following flag is a forgotten value, not the value.
            None => match rest.clone().next() {
                Some(next) if !next.starts_with("--") => rest.next().cloned(),
                _ => None,
            },
        };
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            return Err(ConfigError(format!("--{name} requires a value")));
        };
        match key {
            Some(key) => cli.flags.push((key, value)),
            None => cli.config = Some(value),
        }
    }
    Ok(Parsed::Cli(cli))
}

// ---------------------------------------------------------------------------------------
// TOML file.

/// Reads the file's flat keys as text, so they go through the same parser as flags and
/// environment variables. Errors name the file but never quote its contents.
fn read_file(path: &str) -> Result<Vec<(Key, Raw)>, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", shown(path))))?;
    let table = text.parse::<toml::Table>().map_err(|e| {
        let at = e
            .span()
            .and_then(|span| text.get(..span.start))
            .map(|before| {
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!(" at line {line}, column {column}")
            })
            .unwrap_or_default();
        // The parser's messages name what it expected, never the file's values.
        let why = clipped(&e.message().replace('\n', "; "), 160);
        ConfigError(format!("cannot parse config file {}: invalid TOML{at}: {why}", shown(path)))
    })?;
    let mut out = Vec::with_capacity(table.len());
    for (name, value) in table {
        let Some(key) = Key::from_name(&name) else {
            return Err(ConfigError(format!("config file {}: unknown key {} (see --help)", shown(path), shown(&name))));
        };
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                let expected = match key.int_range() {
                    Some(_) => "an integer",
                    None if key == Key::Enable => "a boolean",
                    None => "a string",
                };
                return Err(ConfigError(format!(
                    "config file {}: {name} must be {expected}, not {}",
                    shown(path),
                    other.type_str()
                )));
            }
        };
        out.push((key, Raw { value: text, origin: Origin::File(path.to_owned()) }));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Resolution and validation.

/// A setting's value as text, with where it came from.
struct Raw {
    value: String,
    origin: Origin,
}

enum Origin {
    File(String),
    Env,
    Flag,
}

impl Raw {
    fn invalid(&self, key: Key, why: &str) -> ConfigError {
        let value = match self.value.as_str() {
            "" => "\"\"".to_owned(),
            v => shown(v),
        };
        ConfigError(match &self.origin {
            Origin::Env => format!("{}={value} is invalid: {why}", key.env()),
            Origin::Flag => format!("--{}={value} is invalid: {why}", key.flag()),
            Origin::File(path) => {
                format!("{} = {value} in config file {} is invalid: {why}", key.spec().name, shown(path))
            }
        })
    }

    fn bool(&self, key: Key) -> Result<bool, ConfigError> {
        match self.value.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(self.invalid(key, "must be true, false, 1 or 0")),
        }
    }

    /// An integer in the key's range. With `validate` false (a reference setting while
    /// AMQP 1.0 is disabled) only what fits the field's type is required.
    fn int<T: TryFrom<i128>>(&self, key: Key, validate: bool) -> Result<T, ConfigError> {
        let (lo, hi) = key.int_range().unwrap_or((0, 0));
        let range = format!("must be between {lo} and {hi}");
        let n: i128 = self.value.parse().map_err(|e: std::num::ParseIntError| {
            use std::num::IntErrorKind::{NegOverflow, PosOverflow};
            match e.kind() {
                PosOverflow | NegOverflow => self.invalid(key, &range),
                _ => self.invalid(key, &format!("must be an integer between {lo} and {hi}")),
            }
        })?;
        if validate && !(lo..=hi).contains(&n) {
            return Err(self.invalid(key, &range));
        }
        T::try_from(n).map_err(|_| self.invalid(key, &range))
    }

    fn choice<T: FromStr>(&self, key: Key, choices: &str) -> Result<T, ConfigError> {
        self.value.parse().map_err(|_| self.invalid(key, choices))
    }
}

fn resolve(raw: &[Option<Raw>; KEY_COUNT]) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    if let Some(r) = &raw[Key::Enable as usize] {
        s.enable = r.bool(Key::Enable)?;
    }
    // The reference: a disabled connector's configuration is always valid.
    let amqp = s.enable;
    for key in Key::ALL {
        let Some(r) = &raw[key as usize] else {
            continue;
        };
        match key {
            Key::Enable => {}
            Key::Port => s.port = r.int(key, amqp)?,
            Key::TlsPort => s.tls_port = r.int(key, amqp)?,
            Key::MaxFrameSize => s.max_frame_size = r.int(key, amqp)?,
            Key::MaxMessageSize => s.max_message_size = r.int(key, amqp)?,
            Key::SessionMax => s.session_max = r.int(key, amqp)?,
            Key::MaxLinksPerSession => s.max_links_per_session = r.int(key, amqp)?,
            Key::MaxConnections => s.max_connections = r.int(key, amqp)?,
            Key::IdleTimeoutSeconds => s.idle_timeout_seconds = r.int(key, amqp)?,
            Key::DefaultPattern => {
                s.default_pattern = match r.choice(key, PATTERN_CHOICES) {
                    Ok(pattern) => pattern,
                    Err(e) if amqp => return Err(e),
                    // What the reference's address resolution falls back to.
                    Err(_) => Pattern::Queues,
                }
            }
            Key::GetBatchSize => s.get_batch_size = r.int(key, amqp)?,
            Key::MaxUnsettledPerLink => s.max_unsettled_per_link = r.int(key, amqp)?,
            Key::DefaultRpcTimeoutSeconds => s.default_rpc_timeout_seconds = r.int(key, amqp)?,
            Key::RpcMaxPending => s.rpc_max_pending = r.int(key, amqp)?,
            Key::Host => {
                r.value.parse::<IpAddr>().map_err(|_| r.invalid(key, "must be an IP address such as 0.0.0.0 or ::"))?;
                s.host = r.value.clone();
            }
            Key::AdminAddr => {
                r.value
                    .parse::<SocketAddr>()
                    .map_err(|_| r.invalid(key, "must be an ip:port socket address such as 0.0.0.0:8080"))?;
                s.admin_addr = r.value.clone();
            }
            Key::Shards => s.shards = r.int(key, true)?,
            Key::DataDir => {
                if r.value.is_empty() {
                    return Err(r.invalid(key, "must not be empty"));
                }
                s.data_dir = PathBuf::from(&r.value);
            }
            Key::Durability => s.durability = r.choice(key, "must be memory or fsync")?,
            Key::HandshakeTimeoutSeconds => s.handshake_timeout_seconds = r.int(key, true)?,
            Key::WriteTimeoutSeconds => s.write_timeout_seconds = r.int(key, true)?,
            Key::LogFormat => s.log_format = r.choice(key, "must be human or json")?,
            Key::EventsStoreStall => s.events_store_stall = r.choice(key, "must be detach or hold")?,
            Key::MaxOutstandingMessages => s.max_outstanding_messages = r.int(key, true)?,
            Key::MaxOutstandingBytes => s.max_outstanding_bytes = r.int(key, true)?,
            Key::EventsBuffer => s.events_buffer = r.int(key, true)?,
            Key::EventsInFlightBytes => s.events_in_flight_bytes = r.int(key, true)?,
            Key::AckDeadlineSeconds => s.ack_deadline_seconds = r.int(key, true)?,
            Key::MaxReceiveCount => s.max_receive_count = r.int(key, true)?,
            Key::MetricsChannelCap => s.metrics_channel_cap = r.int(key, true)?,
            Key::EventsStoreRetentionSeconds => s.events_store_retention_seconds = r.int(key, true)?,
            Key::EventsStoreRetentionBytes => s.events_store_retention_bytes = r.int(key, true)?,
            Key::QueueMaxMessages => s.queue_max_messages = r.int(key, true)?,
            Key::QueueMaxBytes => s.queue_max_bytes = r.int(key, true)?,
            Key::MaxChannels => s.max_channels = r.int(key, true)?,
            Key::MaxDurableSubscriptions => s.max_durable_subscriptions = r.int(key, true)?,
            Key::DurableSubscriptionExpirySeconds => s.durable_subscription_expiry_seconds = r.int(key, true)?,
            Key::AuthEnabled => s.auth_enabled = r.bool(key)?,
            Key::AuthJwtKeyFile => s.auth_jwt_key_file = r.value.clone(),
            Key::AuthJwtAudience => s.auth_jwt_audience = r.value.clone(),
            Key::AuthCasbinModel => s.auth_casbin_model = r.value.clone(),
            Key::AuthCasbinPolicy => s.auth_casbin_policy = r.value.clone(),
            Key::TlsCertFile => s.tls_cert_file = r.value.clone(),
            Key::TlsKeyFile => s.tls_key_file = r.value.clone(),
            Key::TlsClientCaFile => s.tls_client_ca_file = r.value.clone(),
        }
    }
    if amqp && s.port == 0 && s.tls_port == 0 {
        return Err(ConfigError(format!(
            "port and tls_port are both 0: enable a listener ({} or {}) or set {}=false",
            Key::Port.env(),
            Key::TlsPort.env(),
            Key::Enable.env()
        )));
    }
    let tls = !s.tls_cert_file.is_empty() || !s.tls_key_file.is_empty();
    if amqp && s.port == 0 && !tls {
        // The TLS port is bound only with a certificate: nothing would listen.
        return Err(ConfigError(format!(
            "port is 0 and no TLS certificate is set ({}, {}): nothing would listen for AMQP",
            Key::TlsCertFile.env(),
            Key::TlsKeyFile.env()
        )));
    }
    if amqp && tls && s.port != 0 && s.port == s.tls_port {
        // Both listeners share the port (SO_REUSEPORT): the kernel would hand each new
        // connection to either at random.
        return Err(ConfigError(format!(
            "port and tls_port are both {}: give the plain and the TLS listener different ports ({}, {})",
            s.port,
            Key::Port.env(),
            Key::TlsPort.env()
        )));
    }
    Ok(s)
}

/// A value as it may appear in a one-line message: control characters escaped, long
/// values shortened.
fn shown(value: &str) -> String {
    clipped(value, SHOWN_VALUE_MAX_CHARS)
}

fn clipped(value: &str, max_chars: usize) -> String {
    let mut out: String = value.chars().take(max_chars).flat_map(char::escape_debug).collect();
    if value.chars().nth(max_chars).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Command, ConfigError> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let env: HashMap<String, String> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        parse(&args, &|name| env.get(name).cloned())
    }

    fn settings(args: &[&str], env: &[(&str, &str)]) -> Settings {
        match run(args, env) {
            Ok(Command::Run(s)) => s,
            other => panic!("{args:?} {env:?}: expected Run, got {other:?}"),
        }
    }

    fn error(args: &[&str], env: &[(&str, &str)]) -> String {
        match run(args, env) {
            Err(ConfigError(message)) => {
                assert!(!message.contains('\n'), "not one line: {message}");
                message
            }
            other => panic!("{args:?} {env:?}: expected an error, got {other:?}"),
        }
    }

    /// A TOML file under the temp dir, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(contents: &str) -> TempFile {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "sluice-config-test-{}-{}.toml",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            if let Err(e) = std::fs::write(&path, contents) {
                panic!("cannot write {}: {e}", path.display());
            }
            TempFile(path)
        }

        fn path(&self) -> &str {
            match self.0.to_str() {
                Some(p) => p,
                None => panic!("temp dir is not UTF-8"),
            }
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// A TOML line setting `key` to `value`, quoted for the string settings.
    fn toml_line(key: Key, value: &str) -> String {
        if key.int_range().is_some() || key == Key::Enable {
            format!("{} = {value}\n", key.spec().name)
        } else {
            format!("{} = {}\n", key.spec().name, toml::Value::String(value.to_owned()))
        }
    }

    type Override = (Key, &'static str, fn(&mut Settings));

    /// A non-default, valid value for every setting and its effect.
    fn overrides() -> Vec<Override> {
        vec![
            (Key::Enable, "false", |s| s.enable = false),
            (Key::Port, "15672", |s| s.port = 15672),
            (Key::TlsPort, "0", |s| s.tls_port = 0),
            (Key::MaxFrameSize, "512", |s| s.max_frame_size = 512),
            (Key::MaxMessageSize, "9223372036854775807", |s| s.max_message_size = 9_223_372_036_854_775_807),
            (Key::SessionMax, "65535", |s| s.session_max = 65535),
            (Key::MaxLinksPerSession, "1", |s| s.max_links_per_session = 1),
            (Key::MaxConnections, "0", |s| s.max_connections = 0),
            (Key::IdleTimeoutSeconds, "0", |s| s.idle_timeout_seconds = 0),
            (Key::DefaultPattern, "events-store", |s| s.default_pattern = Pattern::EventsStore),
            (Key::GetBatchSize, "1024", |s| s.get_batch_size = 1024),
            (Key::MaxUnsettledPerLink, "10", |s| s.max_unsettled_per_link = 10),
            (Key::DefaultRpcTimeoutSeconds, "1", |s| s.default_rpc_timeout_seconds = 1),
            (Key::RpcMaxPending, "4294967295", |s| s.rpc_max_pending = u32::MAX),
            (Key::Host, "::1", |s| s.host = "::1".to_owned()),
            (Key::AdminAddr, "[::1]:9090", |s| s.admin_addr = "[::1]:9090".to_owned()),
            (Key::Shards, "256", |s| s.shards = 256),
            (Key::DataDir, "/var/lib/sluice dir", |s| s.data_dir = PathBuf::from("/var/lib/sluice dir")),
            (Key::Durability, "memory", |s| s.durability = Durability::Memory),
            (Key::HandshakeTimeoutSeconds, "1", |s| s.handshake_timeout_seconds = 1),
            (Key::WriteTimeoutSeconds, "0", |s| s.write_timeout_seconds = 0),
            (Key::LogFormat, "json", |s| s.log_format = LogFormat::Json),
            (Key::EventsStoreStall, "hold", |s| s.events_store_stall = StallPolicy::Hold),
            (Key::MaxOutstandingMessages, "7", |s| s.max_outstanding_messages = 7),
            (Key::MaxOutstandingBytes, "4096", |s| s.max_outstanding_bytes = 4096),
            (Key::EventsBuffer, "100", |s| s.events_buffer = 100),
            (Key::EventsInFlightBytes, "1048576", |s| s.events_in_flight_bytes = 1 << 20),
            (Key::AckDeadlineSeconds, "30", |s| s.ack_deadline_seconds = 30),
            (Key::MaxReceiveCount, "5", |s| s.max_receive_count = 5),
            (Key::MetricsChannelCap, "3", |s| s.metrics_channel_cap = 3),
            (Key::EventsStoreRetentionSeconds, "60", |s| s.events_store_retention_seconds = 60),
            (Key::EventsStoreRetentionBytes, "4096", |s| s.events_store_retention_bytes = 4096),
            (Key::QueueMaxMessages, "10", |s| s.queue_max_messages = 10),
            (Key::QueueMaxBytes, "4096", |s| s.queue_max_bytes = 4096),
            (Key::MaxChannels, "5", |s| s.max_channels = 5),
            (Key::MaxDurableSubscriptions, "7", |s| s.max_durable_subscriptions = 7),
            (Key::DurableSubscriptionExpirySeconds, "0", |s| s.durable_subscription_expiry_seconds = 0),
            (Key::AuthEnabled, "true", |s| s.auth_enabled = true),
            (Key::AuthJwtKeyFile, "/k", |s| s.auth_jwt_key_file = "/k".to_owned()),
            (Key::AuthJwtAudience, "aud", |s| s.auth_jwt_audience = "aud".to_owned()),
            (Key::AuthCasbinModel, "/m", |s| s.auth_casbin_model = "/m".to_owned()),
            (Key::AuthCasbinPolicy, "/p", |s| s.auth_casbin_policy = "/p".to_owned()),
            (Key::TlsCertFile, "/c", |s| s.tls_cert_file = "/c".to_owned()),
            (Key::TlsKeyFile, "/k", |s| s.tls_key_file = "/k".to_owned()),
            (Key::TlsClientCaFile, "/ca", |s| s.tls_client_ca_file = "/ca".to_owned()),
        ]
    }

    fn expected(change: fn(&mut Settings)) -> Settings {
        let mut s = Settings::default();
        change(&mut s);
        s
    }

    #[test]
    fn defaults_are_the_reference_defaults() {
        let s = settings(&[], &[]);
        assert_eq!(s, Settings::default());
        assert!(s.enable);
        assert_eq!(s.port, 5672);
        assert_eq!(s.tls_port, 5671);
        assert_eq!(s.max_frame_size, 131_072);
        assert_eq!(s.max_message_size, 104_857_600);
        assert_eq!(s.session_max, 256);
        assert_eq!(s.max_links_per_session, 256);
        assert_eq!(s.max_connections, 1000);
        assert_eq!(s.idle_timeout_seconds, 120);
        assert_eq!(s.default_pattern, Pattern::Queues);
        assert_eq!(s.get_batch_size, 32);
        assert_eq!(s.max_unsettled_per_link, 1024);
        assert_eq!(s.default_rpc_timeout_seconds, 30);
        assert_eq!(s.rpc_max_pending, 512);
        assert_eq!(s.host, "0.0.0.0");
        assert_eq!(s.admin_addr, "0.0.0.0:8080");
        assert_eq!(s.shards, default_shards());
        assert!((1..=256).contains(&s.shards));
        assert_eq!(s.data_dir, PathBuf::from("./data"));
        assert_eq!(s.durability, Durability::Fsync);
        assert_eq!(s.handshake_timeout_seconds, 10);
        assert_eq!(s.write_timeout_seconds, 30);
        assert_eq!(s.log_format, LogFormat::Human);
    }

    #[test]
    fn derived_values() {
        let s = Settings::default();
        assert_eq!(s.channel_max(), 255);
        assert_eq!(s.handle_max(), 255);
        assert_eq!(s.idle_timeout_ms(), 120_000);
        assert_eq!(s.advertised_idle_timeout_ms(), 60_000);
        assert_eq!(s.effective_max_unsettled(), 1024);

        let mut s = Settings {
            session_max: 1,
            max_links_per_session: 1,
            idle_timeout_seconds: 0,
            max_unsettled_per_link: 10,
            ..Settings::default()
        };
        assert_eq!(s.channel_max(), 0);
        assert_eq!(s.handle_max(), 0);
        assert_eq!(s.idle_timeout_ms(), 0);
        assert_eq!(s.advertised_idle_timeout_ms(), 0);
        assert_eq!(s.effective_max_unsettled(), 10);

        // Values only reachable while disabled, or at the type's edges: no panics.
        s.session_max = 0;
        s.max_links_per_session = 0;
        s.idle_timeout_seconds = u32::MAX;
        s.max_unsettled_per_link = 0;
        assert_eq!(s.channel_max(), 0);
        assert_eq!(s.handle_max(), 0);
        assert_eq!(s.idle_timeout_ms(), u32::MAX);
        assert_eq!(s.effective_max_unsettled(), 256);
        s.session_max = u32::MAX;
        s.max_unsettled_per_link = u32::MAX;
        assert_eq!(s.channel_max(), u16::MAX);
        assert_eq!(s.effective_max_unsettled(), 1 << 20);
        s.session_max = 65535;
        s.max_unsettled_per_link = 1 << 20;
        assert_eq!(s.channel_max(), 65534);
        assert_eq!(s.effective_max_unsettled(), 1 << 20);
    }

    #[test]
    fn the_override_table_covers_every_setting() {
        let keys: Vec<Key> = overrides().into_iter().map(|(k, _, _)| k).collect();
        assert_eq!(keys, Key::ALL.to_vec());
    }

    #[test]
    fn each_env_var_overrides_its_default() {
        for (key, value, change) in overrides() {
            assert_eq!(settings(&[], &[(key.env(), value)]), expected(change), "{key:?}");
        }
    }

    #[test]
    fn each_flag_overrides_its_default_in_both_forms() {
        for (key, value, change) in overrides() {
            let flag = format!("--{}", key.flag());
            assert_eq!(settings(&[&flag, value], &[]), expected(change), "{key:?}");
            let joined = format!("{flag}={value}");
            assert_eq!(settings(&[&joined], &[]), expected(change), "{key:?}");
        }
    }

    #[test]
    fn each_file_key_overrides_its_default() {
        for (key, value, change) in overrides() {
            let file = TempFile::new(&toml_line(key, value));
            assert_eq!(settings(&["--config", file.path()], &[]), expected(change), "{key:?}");
        }
    }

    #[test]
    fn all_overrides_together() {
        let mut want = Settings::default();
        let mut env = Vec::new();
        let mut text = String::new();
        let mut flags = Vec::new();
        for (key, value, change) in overrides() {
            change(&mut want);
            env.push((key.env(), value));
            text.push_str(&toml_line(key, value));
            flags.push(format!("--{}={value}", key.flag()));
        }
        assert_eq!(settings(&[], &env), want);
        let file = TempFile::new(&text);
        assert_eq!(settings(&["--config", file.path()], &[]), want);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        assert_eq!(settings(&flags, &[]), want);
    }

    #[test]
    fn precedence_is_flag_over_env_over_file_over_default() {
        let file = TempFile::new("port = 1001\nget_batch_size = 11\nhost = \"10.0.0.1\"\n");
        let env = [("CONNECTORS_AMQP10_PORT", "1002"), ("CONNECTORS_AMQP10_GET_BATCH_SIZE", "12")];
        let s = settings(&["--config", file.path(), "--port", "1003"], &env);
        assert_eq!((s.port, s.get_batch_size, s.host.as_str()), (1003, 12, "10.0.0.1"));
        let s = settings(&["--config", file.path()], &env);
        assert_eq!((s.port, s.get_batch_size), (1002, 12));
        let s = settings(&["--config", file.path()], &[]);
        assert_eq!((s.port, s.get_batch_size), (1001, 11));
        assert_eq!(s.tls_port, 5671);
        // An overridden value is never looked at.
        let bad = TempFile::new("get_batch_size = 0\n");
        let s = settings(&["--config", bad.path()], &[("CONNECTORS_AMQP10_GET_BATCH_SIZE", "5")]);
        assert_eq!(s.get_batch_size, 5);
        // The last of repeated flags wins.
        assert_eq!(settings(&["--port", "1", "--port=2"], &[]).port, 2);
    }

    #[test]
    fn the_file_can_come_from_sluice_config() {
        let file = TempFile::new("shards = 3\n");
        assert_eq!(settings(&[], &[("SLUICE_CONFIG", file.path())]).shards, 3);
        // --config wins, and the other file is not read.
        let other = TempFile::new("shards = 4\n");
        let s = settings(&["--config", other.path()], &[("SLUICE_CONFIG", "/nonexistent/sluice.toml")]);
        assert_eq!(s.shards, 4);
        assert_eq!(settings(&[], &[("SLUICE_CONFIG", "")]), Settings::default());
    }

    #[test]
    fn empty_env_vars_count_as_unset() {
        let env: Vec<(&str, &str)> = Key::ALL.iter().map(|k| (k.env(), "")).collect();
        assert_eq!(settings(&[], &env), Settings::default());
    }

    #[test]
    fn numeric_settings_reject_values_out_of_range_or_not_numeric() {
        let u32_max = "4294967295";
        let over_u32 = "4294967296";
        // key, lowest valid, highest valid, below (if any), above
        let cases: [(Key, &str, &str, &str, &str); 14] = [
            (Key::Port, "0", "65535", "-1", "65536"),
            (Key::TlsPort, "0", "65535", "-1", "65536"),
            (Key::MaxFrameSize, "512", u32_max, "511", over_u32),
            (Key::MaxMessageSize, "1", "9223372036854775807", "0", "9223372036854775808"),
            (Key::SessionMax, "1", "65535", "0", "65536"),
            (Key::MaxLinksPerSession, "1", u32_max, "0", over_u32),
            (Key::MaxConnections, "0", u32_max, "-1", over_u32),
            (Key::IdleTimeoutSeconds, "0", u32_max, "-1", over_u32),
            (Key::GetBatchSize, "1", "1024", "0", "1025"),
            (Key::MaxUnsettledPerLink, "1", u32_max, "0", over_u32),
            (Key::DefaultRpcTimeoutSeconds, "1", u32_max, "0", over_u32),
            (Key::RpcMaxPending, "1", u32_max, "0", over_u32),
            (Key::HandshakeTimeoutSeconds, "1", u32_max, "0", over_u32),
            (Key::WriteTimeoutSeconds, "0", u32_max, "-1", over_u32),
        ];
        for (key, lo, hi, below, above) in cases {
            let env = key.env();
            // The extremes are accepted (a port of 0 needs the other port, and a plain
            // port of 0 a TLS certificate).
            for ok in [lo, hi] {
                settings(&[], &[(env, ok), ("SLUICE_TLS_CERT_FILE", "/c"), ("SLUICE_TLS_KEY_FILE", "/k")]);
            }
            for bad in [below, above, "99999999999999999999999999999999999999999"] {
                assert_eq!(error(&[], &[(env, bad)]), format!("{env}={bad} is invalid: must be between {lo} and {hi}"),);
            }
            for bad in ["abc", "12a", " 1", "1 ", "1.0", "0x10", "1_000", "1e3", "+"] {
                assert_eq!(
                    error(&[], &[(env, bad)]),
                    format!("{env}={bad} is invalid: must be an integer between {lo} and {hi}"),
                );
            }
            // The same message names a flag or a file key.
            let flag = format!("--{}", key.flag());
            assert_eq!(
                error(&[&flag, below], &[]),
                format!("{flag}={below} is invalid: must be between {lo} and {hi}"),
            );
            // (TOML itself cannot hold integers above i64::MAX.)
            let file = TempFile::new(&toml_line(key, below));
            assert_eq!(
                error(&["--config", file.path()], &[]),
                format!(
                    "{} = {below} in config file {} is invalid: must be between {lo} and {hi}",
                    key.spec().name,
                    file.path()
                ),
            );
        }
        assert_eq!(error(&[], &[("SLUICE_SHARDS", "0")]), "SLUICE_SHARDS=0 is invalid: must be between 1 and 256");
        assert_eq!(error(&["--shards", "257"], &[]), "--shards=257 is invalid: must be between 1 and 256");
        assert_eq!(
            error(&[], &[("SLUICE_SHARDS", "many")]),
            "SLUICE_SHARDS=many is invalid: must be an integer between 1 and 256"
        );
        // A plus sign is a valid decimal integer.
        assert_eq!(settings(&["--port", "+7"], &[]).port, 7);
    }

    #[test]
    fn the_reference_error_message_shape() {
        assert_eq!(
            error(&[], &[("CONNECTORS_AMQP10_GET_BATCH_SIZE", "0")]),
            "CONNECTORS_AMQP10_GET_BATCH_SIZE=0 is invalid: must be between 1 and 1024"
        );
    }

    #[test]
    fn patterns() {
        for p in Pattern::ALL {
            assert_eq!(p.as_str().parse::<Pattern>(), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
            let s = settings(&["--default-pattern", p.as_str()], &[]);
            assert_eq!(s.default_pattern, p);
        }
        for bad in ["Queues", "topic", "events_store", "responses", " queues"] {
            assert!(bad.parse::<Pattern>().is_err());
            assert_eq!(
                error(&[], &[("CONNECTORS_AMQP10_DEFAULT_PATTERN", bad)]),
                format!(
                    "CONNECTORS_AMQP10_DEFAULT_PATTERN={bad} is invalid: must be one of \
                     queues, events, events-store, commands, queries"
                )
            );
        }
    }

    #[test]
    fn booleans() {
        for (text, value) in [
            ("true", true),
            ("TRUE", true),
            ("True", true),
            ("1", true),
            ("false", false),
            ("FALSE", false),
            ("0", false),
        ] {
            assert_eq!(settings(&[], &[("CONNECTORS_AMQP10_ENABLE", text)]).enable, value);
        }
        for bad in ["yes", "no", "2", "on", "t", " true"] {
            assert_eq!(
                error(&[], &[("CONNECTORS_AMQP10_ENABLE", bad)]),
                format!("CONNECTORS_AMQP10_ENABLE={bad} is invalid: must be true, false, 1 or 0")
            );
        }
        assert_eq!(error(&["--enable=maybe"], &[]), "--enable=maybe is invalid: must be true, false, 1 or 0");
        let file = TempFile::new("enable = false\n");
        assert!(!settings(&["--config", file.path()], &[]).enable);
    }

    #[test]
    fn sluice_settings_are_checked() {
        assert_eq!(
            error(&[], &[("SLUICE_HOST", "localhost")]),
            "SLUICE_HOST=localhost is invalid: must be an IP address such as 0.0.0.0 or ::"
        );
        assert_eq!(
            error(&["--admin-addr", "127.0.0.1"], &[]),
            "--admin-addr=127.0.0.1 is invalid: must be an ip:port socket address such as \
             0.0.0.0:8080"
        );
        assert_eq!(
            error(&[], &[("SLUICE_DURABILITY", "disk")]),
            "SLUICE_DURABILITY=disk is invalid: must be memory or fsync"
        );
        assert_eq!(
            error(&[], &[("SLUICE_LOG_FORMAT", "JSON")]),
            "SLUICE_LOG_FORMAT=JSON is invalid: must be human or json"
        );
        let file = TempFile::new("data_dir = \"\"\n");
        assert_eq!(
            error(&["--config", file.path()], &[]),
            format!("data_dir = \"\" in config file {} is invalid: must not be empty", file.path())
        );
        // Still checked while AMQP 1.0 is disabled: the broker still runs.
        let disabled = ("CONNECTORS_AMQP10_ENABLE", "false");
        assert!(error(&[], &[disabled, ("SLUICE_SHARDS", "0")]).starts_with("SLUICE_SHARDS=0"));
        assert!(error(&[], &[disabled, ("SLUICE_HOST", "x")]).starts_with("SLUICE_HOST=x"));
        for d in [Durability::Memory, Durability::Fsync] {
            assert_eq!(d.as_str().parse::<Durability>(), Ok(d));
        }
        for f in [LogFormat::Human, LogFormat::Json] {
            assert_eq!(f.as_str().parse::<LogFormat>(), Ok(f));
        }
    }

    #[test]
    fn both_ports_zero_is_an_error_only_when_enabled() {
        let both = [("CONNECTORS_AMQP10_PORT", "0"), ("CONNECTORS_AMQP10_TLS_PORT", "0")];
        assert!(error(&[], &both).starts_with("port and tls_port are both 0"));
        assert!(error(&["--port", "0", "--tls-port", "0"], &[]).starts_with("port and tls_port are both 0"));
        // The plain port off needs the TLS listener, which needs a certificate.
        assert!(error(&["--port", "0"], &[]).contains("nothing would listen for AMQP"));
        let tls = [("SLUICE_TLS_CERT_FILE", "/cert.pem"), ("SLUICE_TLS_KEY_FILE", "/key.pem")];
        assert_eq!(settings(&["--port", "0"], &tls).port, 0);
        // Not on the TLS listener's port.
        let same = error(&["--port", "5671"], &tls);
        assert!(same.contains("give the plain and the TLS listener different ports"), "{same}");
        assert_eq!(settings(&["--tls-port", "0"], &[]).tls_port, 0);
        let s = settings(&["--enable", "false"], &both);
        assert_eq!((s.enable, s.port, s.tls_port), (false, 0, 0));
    }

    #[test]
    fn a_disabled_connector_skips_reference_validation() {
        let s = settings(
            &["--enable=0"],
            &[
                ("CONNECTORS_AMQP10_MAX_FRAME_SIZE", "1"),
                ("CONNECTORS_AMQP10_MAX_MESSAGE_SIZE", "0"),
                ("CONNECTORS_AMQP10_SESSION_MAX", "0"),
                ("CONNECTORS_AMQP10_MAX_LINKS_PER_SESSION", "0"),
                ("CONNECTORS_AMQP10_GET_BATCH_SIZE", "5000"),
                ("CONNECTORS_AMQP10_MAX_UNSETTLED_PER_LINK", "0"),
                ("CONNECTORS_AMQP10_DEFAULT_RPC_TIMEOUT_SECONDS", "0"),
                ("CONNECTORS_AMQP10_RPC_MAX_PENDING", "0"),
                ("CONNECTORS_AMQP10_DEFAULT_PATTERN", "nonsense"),
            ],
        );
        assert!(!s.enable);
        assert_eq!(s.max_frame_size, 1);
        assert_eq!(s.max_message_size, 0);
        assert_eq!(s.session_max, 0);
        assert_eq!(s.max_links_per_session, 0);
        assert_eq!(s.get_batch_size, 5000);
        assert_eq!(s.max_unsettled_per_link, 0);
        assert_eq!(s.effective_max_unsettled(), 256);
        assert_eq!(s.default_rpc_timeout_seconds, 0);
        assert_eq!(s.rpc_max_pending, 0);
        assert_eq!(s.default_pattern, Pattern::Queues);
        // What cannot be held by the field's type is still an error.
        let disabled = ("CONNECTORS_AMQP10_ENABLE", "false");
        assert_eq!(
            error(&[], &[disabled, ("CONNECTORS_AMQP10_PORT", "70000")]),
            "CONNECTORS_AMQP10_PORT=70000 is invalid: must be between 0 and 65535"
        );
        assert_eq!(
            error(&[], &[disabled, ("CONNECTORS_AMQP10_MAX_CONNECTIONS", "-1")]),
            "CONNECTORS_AMQP10_MAX_CONNECTIONS=-1 is invalid: must be between 0 and 4294967295"
        );
        assert!(
            error(&[], &[disabled, ("CONNECTORS_AMQP10_PORT", "x")]).starts_with("CONNECTORS_AMQP10_PORT=x is invalid")
        );
    }

    #[test]
    fn command_line_errors() {
        assert_eq!(error(&["--bogus"], &[]), "unknown flag --bogus (see --help)");
        assert_eq!(error(&["--bogus=1"], &[]), "unknown flag --bogus (see --help)");
        assert_eq!(error(&["--max_frame_size", "1"], &[]), "unknown flag --max_frame_size (see --help)");
        assert_eq!(error(&["-p", "1"], &[]), "unknown flag -p (see --help)");
        assert_eq!(error(&["-"], &[]), "unknown flag - (see --help)");
        assert_eq!(error(&["--"], &[]), "unknown flag -- (see --help)");
        assert_eq!(error(&["run"], &[]), "unexpected argument run (see --help)");
        assert_eq!(error(&["--port"], &[]), "--port requires a value");
        assert_eq!(error(&["--port="], &[]), "--port requires a value");
        assert_eq!(error(&["--port", ""], &[]), "--port requires a value");
        assert_eq!(error(&["--port", "--tls-port", "1"], &[]), "--port requires a value");
        assert_eq!(error(&["--config"], &[]), "--config requires a value");
        assert_eq!(error(&["--help=1"], &[]), "--help does not take a value");
        assert_eq!(error(&["--port", "1", "check-config"], &[]), "check-config must be the first argument");
        // A value may start with a single dash.
        assert!(error(&["--port", "-1"], &[]).starts_with("--port=-1 is invalid"));
        // Control characters never break the one-line message.
        assert_eq!(error(&["--port", "1\n2"], &[]), "--port=1\\n2 is invalid: must be an integer between 0 and 65535");
        let long = "9".repeat(100);
        let message = error(&["--host", &long], &[]);
        assert!(message.len() < 200 && message.contains('…'), "{message}");
    }

    #[test]
    fn file_errors_name_the_file_and_never_its_contents() {
        let file = TempFile::new("port = 5672\nbogus_key = \"hunter2\"\n");
        assert_eq!(
            error(&["--config", file.path()], &[]),
            format!("config file {}: unknown key bogus_key (see --help)", file.path())
        );
        let file = TempFile::new("[connectors.amqp10]\nport = 5672\n");
        assert_eq!(
            error(&["--config", file.path()], &[]),
            format!("config file {}: unknown key connectors (see --help)", file.path())
        );
        let file = TempFile::new("port = 56.72\n");
        assert_eq!(
            error(&["--config", file.path()], &[]),
            format!("config file {}: port must be an integer, not float", file.path())
        );
        let file = TempFile::new("host = [\"a\"]\n");
        assert!(error(&["--config", file.path()], &[]).ends_with("must be a string, not array"));
        let file = TempFile::new("enable = 1979-05-27\n");
        assert!(error(&["--config", file.path()], &[]).ends_with("must be a boolean, not datetime"));
        let file = TempFile::new("enable = {}\n");
        assert!(error(&["--config", file.path()], &[]).ends_with("must be a boolean, not table"));

        let file = TempFile::new("port = 5672\npassword = \"hunter2\n");
        let message = error(&["--config", file.path()], &[]);
        assert!(
            message.starts_with(&format!("cannot parse config file {}: invalid TOML at line 2", file.path())),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");

        let missing = std::env::temp_dir().join("sluice-config-test-does-not-exist.toml");
        let missing = missing.to_string_lossy().into_owned();
        let message = error(&["--config", &missing], &[]);
        assert!(message.starts_with(&format!("cannot read config file {missing}: ")), "{message}");
        let dir = std::env::temp_dir().to_string_lossy().into_owned();
        assert!(error(&["--config", &dir], &[]).starts_with("cannot read config file"));

        // Strings are accepted for numbers and booleans, as in the environment.
        let file = TempFile::new("port = \"1234\"\nenable = \"1\"\n");
        let s = settings(&["--config", file.path()], &[]);
        assert_eq!((s.port, s.enable), (1234, true));
        let file = TempFile::new("port = true\n");
        assert!(error(&["--config", file.path()], &[]).starts_with("port = true in config file"));
        let file = TempFile::new("");
        assert_eq!(settings(&["--config", file.path()], &[]), Settings::default());
    }

    #[test]
    fn help_text_documents_every_setting() {
        let help = help_text();
        for key in Key::ALL {
            let spec = key.spec();
            assert!(help.contains(key.env()), "{}", key.env());
            assert!(help.contains(&format!("--{} <", key.flag())), "{}", key.flag());
            assert!(help.contains(&format!("toml {} ", spec.name)), "{}", spec.name);
            assert!(help.contains(&format!("default {} ", spec.default)), "{}", spec.name);
            assert!(help.contains(&format!("valid {}\n", spec.valid)), "{}", spec.name);
        }
        for word in ["--config", "SLUICE_CONFIG", "check-config", "--help", "--version"] {
            assert!(help.contains(word), "{word}");
        }
        for args in [&["--help"][..], &["-h"], &["--port", "1", "-h"], &["check-config", "--help"]] {
            assert_eq!(run(args, &[]), Ok(Command::Help(help.clone())));
        }
        // Help answers before the environment or a file is looked at.
        assert_eq!(
            run(&["--help"], &[("CONNECTORS_AMQP10_PORT", "x"), ("SLUICE_CONFIG", "/nope")]),
            Ok(Command::Help(help))
        );
    }

    #[test]
    fn version() {
        for args in [&["--version"][..], &["-V"], &["check-config", "-V"]] {
            assert_eq!(run(args, &[("CONNECTORS_AMQP10_PORT", "x")]), Ok(Command::Version));
        }
        assert!(!VERSION.is_empty());
    }

    #[test]
    fn check_config_subcommand() {
        match run(&["check-config", "--port", "1"], &[]) {
            Ok(Command::CheckConfig(s)) => assert_eq!(s.port, 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(run(&["check-config"], &[]), Ok(Command::CheckConfig(Settings::default())));
        assert!(error(&["check-config", "--port", "x"], &[]).starts_with("--port=x"));
    }

    #[test]
    fn printed_settings_read_back_the_same() {
        let mut want = Settings::default();
        for (_, _, change) in overrides() {
            change(&mut want);
        }
        want.enable = true;
        want.host = "127.0.0.1".to_owned();
        want.data_dir = PathBuf::from("/tmp/with \"quotes\" and 'ünïcode'\\");
        for s in [Settings::default(), want] {
            let file = TempFile::new(&s.to_string());
            assert_eq!(settings(&["--config", file.path()], &[]), s);
        }
    }

    #[test]
    fn config_error_displays_its_message() {
        let e = ConfigError("one line".to_owned());
        assert_eq!(e.to_string(), "one line");
        let _: &dyn std::error::Error = &e;
    }

    #[test]
    fn no_input_panics() {
        let weird = [
            "",
            "-",
            "--",
            "---",
            "=",
            "--=",
            "--=x",
            "-h=",
            "\0",
            "\u{7f}",
            "é",
            "ß=ß",
            "--port=\u{1F600}",
            "--port==1",
            "18446744073709551616",
            "-9223372036854775809",
            "340282366920938463463374607431768211456",
            "[",
            "]]",
            "\"",
            "'",
            "\\",
            "check-config",
            "0x",
            "1e309",
            "NaN",
            "inf",
            "::",
            "[::]:0",
            "0.0.0.0:99999",
        ];
        let long = "x".repeat(10_000);
        let weird: Vec<&str> = weird.iter().copied().chain([long.as_str()]).collect();
        for w in &weird {
            let _ = run(&[w], &[]);
            let _ = run(&["check-config", w, w], &[]);
            for key in Key::ALL {
                let flag = format!("--{}", key.flag());
                let _ = run(&[&flag, w], &[]);
                let _ = run(&[&format!("{flag}={w}")], &[]);
                let _ = run(&[], &[(key.env(), w)]);
                let _ = run(&[], &[(key.env(), w), ("CONNECTORS_AMQP10_ENABLE", "false")]);
                let file = TempFile::new(&format!("{} = {w}\n", key.spec().name));
                let _ = run(&["--config", file.path()], &[]);
            }
            let file = TempFile::new(w);
            let _ = run(&["--config", file.path()], &[]);
            let _ = run(&["--config", w], &[]);
            let _ = run(&[], &[("SLUICE_CONFIG", w)]);
        }
        // Invalid UTF-8 and multi-byte characters around a syntax error.
        let path = std::env::temp_dir().join(format!("sluice-config-test-{}-bin", std::process::id()));
        if std::fs::write(&path, [0xff, 0xfe, b'=', b'\n']).is_ok() {
            let _ = run(&["--config", &path.to_string_lossy()], &[]);
            let _ = std::fs::remove_file(&path);
        }
        let file = TempFile::new("ünï = \"çødé\"\n€€€ = = =\n");
        assert!(error(&["--config", file.path()], &[]).contains("invalid TOML at line"));
    }
}
