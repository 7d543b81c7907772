//! Command line of `sluice-perf` (hand-parsed: `--name value` pairs and flags).

use std::fmt;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Pre-settled publishers -> subscribers (1->1, or 1->N with --subscribers).
    Events,
    /// At-least-once: unsettled publishes waiting for `accepted`; consumers accept.
    Queues,
    /// Unsettled publishes to a persisted stream; subscribers replay from new-only.
    EventsStore,
    /// Requests with a dynamic reply node, answered by a responder.
    Rpc,
    /// Tiny pre-settled transfers, counting FLOW/TRANSFER frames both ways.
    Frames,
    /// Many idle connections; the broker's resident memory before and after.
    Idle,
    /// At-least-once through the flow-controlled client API (`sluice_perf::flow`): a
    /// `Publisher` within its publisher limits, a `Subscriber` with a worker pool
    /// within its outstanding-message and byte limits.
    Flow,
}

impl Scenario {
    fn parse(s: &str) -> Result<Scenario, String> {
        Ok(match s {
            "events" => Scenario::Events,
            "queues" => Scenario::Queues,
            "events-store" => Scenario::EventsStore,
            "rpc" | "commands" => Scenario::Rpc,
            "frames" => Scenario::Frames,
            "idle" => Scenario::Idle,
            "flow" => Scenario::Flow,
            _ => return Err(format!("unknown scenario `{s}`")),
        })
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Events => "events",
            Scenario::Queues => "queues",
            Scenario::EventsStore => "events-store",
            Scenario::Rpc => "rpc",
            Scenario::Frames => "frames",
            Scenario::Idle => "idle",
            Scenario::Flow => "flow",
        }
    }
}

/// SASL mechanism the client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sasl {
    /// No SASL layer: the AMQP header straight away.
    None,
    /// ANONYMOUS.
    Anonymous,
    /// PLAIN with user and password.
    Plain,
}

/// Settlement mode of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Pre-settled (at-most-once).
    Presettled,
    /// Unsettled: the peer answers each delivery with an outcome.
    Unsettled,
}

impl Settle {
    fn parse(s: &str) -> Result<Settle, String> {
        match s {
            "presettled" | "settled" => Ok(Settle::Presettled),
            "unsettled" => Ok(Settle::Unsettled),
            _ => Err(format!("settle mode must be presettled or unsettled, not `{s}`")),
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Settle::Presettled => "presettled",
            Settle::Unsettled => "unsettled",
        }
    }
}

/// `amqp://[user[:password]@]host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// User from the URL.
    pub user: Option<String>,
    /// Password from the URL.
    pub password: Option<String>,
}

impl Url {
    /// Parse an `amqp://` URL.
    pub fn parse(s: &str) -> Result<Url, String> {
        let rest = s.strip_prefix("amqp://").ok_or_else(|| format!("url must start with amqp://: `{s}`"))?;
        let rest = rest.split('/').next().unwrap_or_default();
        let (auth, hostport) = match rest.rsplit_once('@') {
            Some((a, h)) => (Some(a), h),
            None => (None, rest),
        };
        let (user, password) = match auth {
            Some(a) => match a.split_once(':') {
                Some((u, p)) => (Some(u.to_owned()), Some(p.to_owned())),
                None => (Some(a.to_owned()), None),
            },
            None => (None, None),
        };
        let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
            let (h, p) = h.split_once(']').ok_or("bad IPv6 host")?;
            (h.to_owned(), p.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (hostport.to_owned(), None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| format!("bad port `{p}`"))?,
            None => 5672,
        };
        if host.is_empty() {
            return Err("url has no host".into());
        }
        Ok(Url { host, port, user, password })
    }

    /// `host:port` for connecting.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "amqp://{}", self.addr())
    }
}

/// Everything the command line sets.
#[derive(Debug, Clone)]
pub struct Opts {
    /// The scenario.
    pub scenario: Scenario,
    /// The broker.
    pub url: Url,
    /// SASL mechanism.
    pub sasl: Sasl,
    /// User for PLAIN.
    pub user: String,
    /// Password for PLAIN.
    pub password: String,
    /// Address producers (requesters) send to.
    pub address: String,
    /// Address consumers (responders) receive from.
    pub address2: String,
    /// Body bytes per message.
    pub size: usize,
    /// Credit window each receiving link keeps granting.
    pub credit: u32,
    /// Producer (requester) connections; for `idle`, connections to open.
    pub connections: usize,
    /// Producer links per connection (each on its own session).
    pub links: usize,
    /// Consumer (responder) connections.
    pub subscribers: usize,
    /// Consumer links per consumer connection.
    pub sub_links: usize,
    /// Channels the links are spread over (`<address>-c<i>` when more than one).
    pub channels: usize,
    /// Messages to send in total (None: run for `duration`).
    pub count: Option<u64>,
    /// Seconds to send for.
    pub duration: Option<f64>,
    /// Total send rate limit, messages per second.
    pub rate: Option<f64>,
    /// Producer settle mode.
    pub settle: Settle,
    /// Settle mode consumers ask the broker for.
    pub recv_settle: Settle,
    /// Unsettled messages (or pending requests) per producer link, at most.
    pub inflight: u64,
    /// With --rate: send in batches of at least this many microseconds' worth.
    pub tick_us: f64,
    /// Messages encoded per write, at most.
    pub batch: usize,
    /// Our session incoming window (transfer frames).
    pub session_window: u32,
    /// Our max-frame-size.
    pub max_frame: u32,
    /// rpc: requesters receive replies from `<reply_to>-<worker>-<link>` instead of a
    /// dynamic node (for brokers without dynamic nodes).
    pub reply_to: Option<String>,
    /// `x-opt-kubemq-start` for events-store subscribers (None: not sent).
    pub start: Option<String>,
    /// A selector for every consumer link (source filter
    /// `apache.org:selector-filter:string`; None: no filter).
    pub selector: Option<String>,
    /// Application properties every produced message carries (`--property k=v`).
    pub properties: Vec<(String, String)>,
    /// Seconds after which the run ends wherever it is (rates cover what was done).
    pub timeout: Option<f64>,
    /// Seconds without a delivery, after the producers finished, that end the run.
    pub idle_end: f64,
    /// Print a JSON report instead of text.
    pub json: bool,
    /// Print a progress line on stderr every second.
    pub progress: bool,
    /// The broker's process id, for its CPU seconds (and RSS in `idle`).
    pub broker_pid: Option<u32>,
    /// A label for the report (e.g. the broker's name).
    pub label: Option<String>,
    /// Messages carry a header with durable=true (persistent on every broker).
    pub durable: bool,
    /// flow: the subscriber's worker threads.
    pub workers: usize,
    /// flow: the subscriber's max outstanding messages (the publisher's max
    /// outstanding publishes is `--inflight`).
    pub max_outstanding_messages: usize,
    /// flow: the subscriber's max outstanding bytes.
    pub max_outstanding_bytes: usize,
    /// The command line, as given.
    pub command: String,
}

/// Usage text.
pub const USAGE: &str = "\
usage: sluice-perf <scenario> [options]

scenarios:
  events        pre-settled publishers -> subscribers (1->1; --subscribers N: 1->N fan-out)
  queues        at-least-once: unsettled publishes wait for `accepted`, consumers accept
  events-store  unsettled publishes to a persisted stream, subscribers from new-only
  rpc           requests (reply-to = a dynamic node) answered by responders
  frames        tiny pre-settled transfers; counts FLOW/TRANSFER frames both ways
  idle          open --connections idle connections; broker RSS (needs --broker-pid)
  flow          at-least-once through the flow-controlled client API (sluice_perf::flow):
                a Publisher (--inflight outstanding publishes), a Subscriber with --workers
                and --max-outstanding-messages / --max-outstanding-bytes (Block)

options:
  --url amqp://[user:pass@]host:port   broker (default amqp://127.0.0.1:5672)
  --sasl anonymous|plain|none          default: plain when the URL has a user, else anonymous
  --user U --password P                PLAIN credentials (default: from the URL, else guest/guest)
  --address A                          where producers send (default <pattern>/perf-{run});
                                       `{run}` is replaced by a random id per run
  --address2 A                         where consumers receive from (default: --address)
  --size BYTES                         body size (default 100; frames: 8); >= 12 carries a timestamp
  --credit N                           credit window of each receiving link
  --connections N                      producer connections (default 1)
  --links N                            producer links per connection (default 1)
  --subscribers N                      consumer connections (default 1; 0: produce only)
  --sub-links N                        consumer links per consumer connection (default 1)
  --channels N                         spread links over N channels <address>-c<i> (default 1)
  --count N | --duration SECS          total messages (k/M/G suffixes) or seconds of sending
  --rate MSGS_PER_S                    total send rate limit (for latency at a fixed load)
  --settle presettled|unsettled        producer settle mode
  --recv-settle presettled|unsettled   settle mode consumers request
  --inflight N                         unsettled publishes / pending requests per link
  --durable                            messages carry header durable=true (persistent)
  --workers N                          flow: subscriber worker threads (default 4)
  --max-outstanding-messages N         flow: subscriber limit (default 1000)
  --max-outstanding-bytes N            flow: subscriber limit (default 104857600)
  --tick-us US                         with --rate: batches of at least US microseconds' worth (default 50)
  --batch N                            messages encoded per write (default 4096)
  --session-window N                   our session incoming window (default 262144)
  --max-frame BYTES                    our max-frame-size (default 65536)
  --reply-to A                         rpc: reply to a fixed node A-<worker>-<link> instead of a
                                       dynamic one (RabbitMQ 3.x has no dynamic nodes)
  --start POS                          events-store x-opt-kubemq-start (first, new-only, ...)
  --selector TEXT                      consumers attach with this selector (source filter)
  --property KEY=VALUE                 produced messages carry this string application property
                                       (repeatable)
  --timeout SECS                       end the run after SECS wherever it is (rates cover what was done)
  --idle-end SECS                      end this long after the last delivery once producers finished (default 2)
  --broker-pid PID                     report the broker's CPU seconds (and RSS for idle)
  --label TEXT                         a name for the report
  --json                               JSON report on stdout
  --progress                           live progress line on stderr
";

impl Opts {
    /// Parse `args` (without the program name).
    pub fn parse(args: &[String]) -> Result<Opts, String> {
        let mut it = args.iter();
        let first = it.next().ok_or("missing scenario")?;
        if first == "-h" || first == "--help" {
            return Err(String::new());
        }
        let scenario = Scenario::parse(first)?;
        let mut url = None;
        let mut sasl = None;
        let mut user = None;
        let mut password = None;
        let mut address = None;
        let mut address2 = None;
        let mut size = None;
        let mut credit = None;
        let mut settle = None;
        let mut recv_settle = None;
        let mut inflight = None;
        let mut o = Opts {
            scenario,
            url: Url::parse("amqp://127.0.0.1:5672")?,
            sasl: Sasl::Anonymous,
            user: String::new(),
            password: String::new(),
            address: String::new(),
            address2: String::new(),
            size: 0,
            credit: 0,
            connections: 1,
            links: 1,
            subscribers: 1,
            sub_links: 1,
            channels: 1,
            count: None,
            duration: None,
            rate: None,
            settle: Settle::Presettled,
            recv_settle: Settle::Presettled,
            inflight: 0,
            tick_us: 50.0,
            batch: 4096,
            session_window: 262_144,
            max_frame: 65_536,
            start: None,
            selector: None,
            properties: Vec::new(),
            reply_to: None,
            timeout: None,
            idle_end: 2.0,
            json: false,
            progress: false,
            broker_pid: None,
            label: None,
            durable: false,
            workers: 4,
            max_outstanding_messages: 1000,
            max_outstanding_bytes: 100 << 20,
            command: std::iter::once("sluice-perf".to_owned())
                .chain(args.iter().cloned())
                .collect::<Vec<_>>()
                .join(" "),
        };
        while let Some(a) = it.next() {
            let mut val = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
            match a.as_str() {
                "--url" => url = Some(Url::parse(&val()?)?),
                "--sasl" => {
                    sasl = Some(match val()?.as_str() {
                        "none" => Sasl::None,
                        "anonymous" => Sasl::Anonymous,
                        "plain" => Sasl::Plain,
                        s => return Err(format!("--sasl must be anonymous, plain or none, not `{s}`")),
                    })
                }
                "--user" => user = Some(val()?),
                "--password" => password = Some(val()?),
                "--address" => address = Some(val()?),
                "--address2" => address2 = Some(val()?),
                "--size" => size = Some(count(&val()?)? as usize),
                "--credit" => credit = Some(u32::try_from(count(&val()?)?).map_err(|_| "--credit too large")?),
                "--connections" => o.connections = count(&val()?)? as usize,
                "--links" => o.links = count(&val()?)?.max(1) as usize,
                "--subscribers" => o.subscribers = count(&val()?)? as usize,
                "--sub-links" => o.sub_links = count(&val()?)?.max(1) as usize,
                "--channels" => o.channels = count(&val()?)?.max(1) as usize,
                "--count" => o.count = Some(count(&val()?)?),
                "--duration" => o.duration = Some(float(&val()?)?),
                "--rate" => o.rate = Some(float(&val()?)?).filter(|r| *r > 0.0),
                "--settle" => settle = Some(Settle::parse(&val()?)?),
                "--recv-settle" => recv_settle = Some(Settle::parse(&val()?)?),
                "--inflight" => inflight = Some(count(&val()?)?.max(1)),
                "--tick-us" => o.tick_us = float(&val()?)?.max(0.0),
                "--batch" => o.batch = count(&val()?)?.max(1) as usize,
                "--session-window" => o.session_window = count(&val()?)?.clamp(1, u32::MAX as u64) as u32,
                "--max-frame" => o.max_frame = count(&val()?)?.clamp(512, u32::MAX as u64) as u32,
                "--start" => o.start = Some(val()?),
                "--selector" => o.selector = Some(val()?),
                "--property" => {
                    let v = val()?;
                    let (k, v) = v.split_once('=').ok_or("--property takes key=value")?;
                    o.properties.push((k.to_owned(), v.to_owned()));
                }
                "--reply-to" => o.reply_to = Some(val()?),
                "--idle-end" => o.idle_end = float(&val()?)?,
                "--timeout" => o.timeout = Some(float(&val()?)?),
                "--broker-pid" => o.broker_pid = Some(val()?.parse().map_err(|_| "--broker-pid must be a number")?),
                "--label" => o.label = Some(val()?),
                "--durable" => o.durable = true,
                "--workers" => o.workers = count(&val()?)?.max(1) as usize,
                "--max-outstanding-messages" => o.max_outstanding_messages = count(&val()?)?.max(1) as usize,
                "--max-outstanding-bytes" => o.max_outstanding_bytes = count(&val()?)? as usize,
                "--json" => o.json = true,
                "--progress" => o.progress = true,
                "-h" | "--help" => return Err(String::new()),
                _ => return Err(format!("unknown option `{a}`")),
            }
        }
        if let Some(u) = url {
            o.url = u;
        }
        o.sasl = sasl.unwrap_or(if o.url.user.is_some() { Sasl::Plain } else { Sasl::Anonymous });
        o.user = user.or(o.url.user.clone()).unwrap_or_else(|| "guest".into());
        o.password = password.or(o.url.password.clone()).unwrap_or_else(|| "guest".into());
        let (addr, sz, cr, st, rst, inf) = match scenario {
            Scenario::Events => ("events/perf-{run}", 100, 65_536, Settle::Presettled, Settle::Presettled, 10_000),
            Scenario::Frames => ("events/frames-{run}", 8, 1 << 20, Settle::Presettled, Settle::Presettled, 10_000),
            Scenario::Queues => ("queues/perf-{run}", 100, 4096, Settle::Unsettled, Settle::Unsettled, 10_000),
            Scenario::EventsStore => {
                ("events-store/perf-{run}", 100, 65_536, Settle::Unsettled, Settle::Presettled, 10_000)
            }
            Scenario::Rpc => ("commands/perf-{run}", 100, 1024, Settle::Unsettled, Settle::Unsettled, 256),
            Scenario::Idle => ("", 0, 0, Settle::Presettled, Settle::Presettled, 1),
            Scenario::Flow => ("queues/flow-{run}", 100, 0, Settle::Unsettled, Settle::Unsettled, 1000),
        };
        let run = run_id();
        o.address = address.unwrap_or_else(|| addr.to_owned()).replace("{run}", &run);
        o.reply_to = o.reply_to.take().map(|a| a.replace("{run}", &run));
        o.address2 = address2.map(|a| a.replace("{run}", &run)).unwrap_or_else(|| o.address.clone());
        o.size = size.unwrap_or(sz);
        o.credit = credit.unwrap_or(cr).max(1);
        o.settle = settle.unwrap_or(st);
        o.recv_settle = recv_settle.unwrap_or(rst);
        o.inflight = inflight.unwrap_or(inf);
        if scenario == Scenario::Idle {
            if o.connections == 0 {
                return Err("idle needs --connections N".into());
            }
        } else if o.count.is_none() && o.duration.is_none() {
            o.count = Some(1_000_000);
        }
        if o.count.is_some() && o.duration.is_some() {
            return Err("give --count or --duration, not both".into());
        }
        if o.connections == 0 && scenario != Scenario::Idle {
            return Err("--connections must be at least 1".into());
        }
        Ok(o)
    }

    /// Address of channel `i` of `base` (the base itself with a single channel).
    pub fn channel_address(&self, base: &str, i: usize) -> String {
        if self.channels <= 1 {
            base.to_owned()
        } else {
            format!("{base}-c{i}")
        }
    }
}

/// A count with an optional k/M/G suffix (1000-based) and `_` separators.
fn count(s: &str) -> Result<u64, String> {
    let t: String = s.chars().filter(|c| *c != '_').collect();
    let (num, mul) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1_000),
        Some('m' | 'M') => (&t[..t.len() - 1], 1_000_000),
        Some('g' | 'G') => (&t[..t.len() - 1], 1_000_000_000),
        _ => (&t[..], 1),
    };
    let v: f64 = num.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if v < 0.0 {
        return Err(format!("`{s}` is negative"));
    }
    Ok((v * mul as f64).round() as u64)
}

fn float(s: &str) -> Result<f64, String> {
    s.parse::<f64>().or_else(|_| count(s).map(|v| v as f64))
}

/// A short random id (time and pid based) for `{run}` in addresses.
fn run_id() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let x = (t as u64) ^ ((std::process::id() as u64) << 32);
    format!("{:08x}", (x ^ (x >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn urls() {
        let u = Url::parse("amqp://guest:secret@127.0.0.1:5673").unwrap();
        assert_eq!(u.addr(), "127.0.0.1:5673");
        assert_eq!(u.user.as_deref(), Some("guest"));
        assert_eq!(u.password.as_deref(), Some("secret"));
        assert_eq!(Url::parse("amqp://localhost").unwrap().port, 5672);
        assert_eq!(Url::parse("amqp://[::1]:1").unwrap().addr(), "[::1]:1");
        assert!(Url::parse("amqps://x").is_err());
    }

    #[test]
    fn defaults_and_overrides() {
        let o = Opts::parse(&args("queues --url amqp://guest:guest@h:1 --count 2M --size 1k")).unwrap();
        assert_eq!(o.sasl, Sasl::Plain);
        assert_eq!(o.count, Some(2_000_000));
        assert_eq!(o.size, 1000);
        assert_eq!(o.settle, Settle::Unsettled);
        assert!(o.address.starts_with("queues/perf-") && !o.address.contains('{'));
        assert_eq!(o.address, o.address2);
        let o = Opts::parse(&args("events --duration 2.5 --rate 100k")).unwrap();
        assert_eq!(o.duration, Some(2.5));
        assert_eq!(o.rate, Some(100_000.0));
        assert_eq!(o.count, None);
        assert!(Opts::parse(&args("events --count 1 --duration 1")).is_err());
        assert!(Opts::parse(&args("nope")).is_err());
    }
}
