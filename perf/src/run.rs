//! Runs a scenario: starts the workers, waits until every link is attached, lets the
//! producers go, watches the shared counters (progress line, end conditions), and
//! turns the workers' measurements into one report (text or JSON).

use crate::body::now_ns;
use crate::client::{sasl_plain, Client};
use crate::frames::{FrameCounts, Kind};
use crate::opts::{Opts, Sasl, Scenario};
use crate::sys;
use crate::worker::{self, new_histogram, LinkSpec, Shared, WorkerReport};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use sluice_proto::engine::{ClientSasl, Config};
use std::io::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Seconds without any progress (sent, received, settled) that fail a run.
const STALL_S: f64 = 30.0;

/// The outcome of a run, ready to print.
#[derive(Debug)]
pub struct Report {
    /// The report as JSON.
    pub json: Value,
    /// The report as text.
    pub text: String,
    /// False when a worker failed or the run stalled.
    pub ok: bool,
}

/// Run the scenario in `opts`.
pub fn run(opts: Opts) -> Report {
    if opts.scenario == Scenario::Idle {
        return idle(&opts);
    }
    if opts.scenario == Scenario::Flow {
        return flow_api(&opts);
    }
    let opts = Arc::new(opts);
    let plan = worker::plan(&opts);
    let producers = worker::producer_count(&plan);
    let consumer_links: Vec<usize> = plan
        .iter()
        .flat_map(|(_, l)| l)
        .filter(|l| matches!(l, LinkSpec::Consumer { .. } | LinkSpec::Responder { .. }))
        .enumerate()
        .map(|(k, _)| k % opts.channels)
        .collect();
    let shared = Arc::new(Shared::new(plan.len(), opts.channels));
    let mut handles = Vec::new();
    for (name, links) in plan {
        let (o, s) = (opts.clone(), shared.clone());
        let spawned = thread::Builder::new().name(name.clone()).spawn(move || worker::run(name, o, s, links));
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                eprintln!("sluice-perf: cannot start a thread: {e}");
                std::process::exit(1);
            }
        }
    }
    shared.ready.wait();
    // Give the broker a moment to act on the consumers' credit before the first send.
    thread::sleep(Duration::from_millis(50));
    let cpu0 = sys::process_cpu_s();
    let bcpu0 = opts.broker_pid.and_then(sys::proc_cpu_s);
    let t0 = now_ns();
    shared.t0.store(t0, Relaxed);
    shared.go.store(true, Relaxed);
    let outcome = watch(&opts, &shared, producers, &consumer_links, t0);
    let t_stop = now_ns();
    let bcpu1 = opts.broker_pid.and_then(sys::proc_cpu_s);
    shared.stop.store(true, Relaxed);
    let reports: Vec<WorkerReport> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
    let cpu1 = sys::process_cpu_s();
    let broker_cpu = match (bcpu0, bcpu1) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let errors = shared.errors.lock().map(|v| v.clone()).unwrap_or_default();
    summarize(&opts, &reports, &shared, t0, t_stop, cpu1 - cpu0, broker_cpu, outcome, errors, &consumer_links)
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Every expected delivery arrived.
    Complete,
    /// Producers finished; deliveries stopped arriving before all came.
    Incomplete,
    /// A worker failed.
    Failed,
    /// No progress for [`STALL_S`].
    Stalled,
    /// `--timeout` passed first.
    Timeout,
}

fn expected(opts: &Opts, shared: &Shared, consumer_links: &[usize]) -> u64 {
    let sent: Vec<u64> = shared.sent_per_channel.iter().map(|c| c.load(Relaxed)).collect();
    let competing = matches!(opts.scenario, Scenario::Queues | Scenario::Rpc);
    if competing {
        // Each message goes to one consumer of its channel (rpc: one response each).
        (0..opts.channels).filter(|c| consumer_links.contains(c)).map(|c| sent[c]).sum()
    } else {
        consumer_links.iter().map(|c| sent[*c]).sum()
    }
}

fn watch(opts: &Opts, shared: &Shared, producers: usize, consumer_links: &[usize], t0: u64) -> End {
    let start = Instant::now();
    let tty = is_tty();
    let mut last_progress = start;
    let mut last_change = start;
    let mut last_seen = (0, 0, 0);
    let mut last_line = (0u64, 0u64, start);
    let mut done_at: Option<Instant> = None;
    let end = loop {
        thread::sleep(Duration::from_millis(2));
        let now = Instant::now();
        if shared.failed.load(Relaxed) {
            break End::Failed;
        }
        let elapsed = now.duration_since(start).as_secs_f64();
        if opts.timeout.is_some_and(|t| elapsed >= t) {
            break End::Timeout;
        }
        if let Some(d) = opts.duration {
            if elapsed >= d {
                shared.stop_sending.store(true, Relaxed);
            }
        }
        let seen = (shared.sent.load(Relaxed), shared.received.load(Relaxed), shared.settled.load(Relaxed));
        if seen != last_seen {
            last_seen = seen;
            last_change = now;
        } else if now.duration_since(last_change).as_secs_f64() > STALL_S {
            break End::Stalled;
        }
        if opts.progress && now.duration_since(last_progress) >= Duration::from_secs(1) {
            last_progress = now;
            let dt = now.duration_since(last_line.2).as_secs_f64().max(1e-9);
            let line = format!(
                "[{:6.1} s] sent {:>9} ({:>9}/s)  received {:>9} ({:>9}/s)  settled {:>9}",
                elapsed,
                si(seen.0 as f64),
                si((seen.0 - last_line.0) as f64 / dt),
                si(seen.1 as f64),
                si((seen.1 - last_line.1) as f64 / dt),
                si(seen.2 as f64),
            );
            last_line = (seen.0, seen.1, now);
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
        }
        if shared.producers_done.load(Relaxed) >= producers {
            let done = *done_at.get_or_insert(now);
            if seen.1 >= expected(opts, shared, consumer_links) {
                break End::Complete;
            }
            let quiet_since = done.max(last_change);
            if now.duration_since(quiet_since).as_secs_f64() > opts.idle_end {
                break End::Incomplete;
            }
        }
    };
    if opts.progress && tty {
        eprintln!();
    }
    let _ = t0;
    end
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    opts: &Opts,
    reports: &[WorkerReport],
    shared: &Shared,
    t0: u64,
    t_stop: u64,
    cpu: f64,
    broker_cpu: Option<f64>,
    end: End,
    errors: Vec<String>,
    consumer_links: &[usize],
) -> Report {
    let mut latency: Histogram<u64> = new_histogram();
    let mut accept_latency: Histogram<u64> = new_histogram();
    let (mut frames_in, mut frames_out) = (FrameCounts::default(), FrameCounts::default());
    let (mut sent, mut accepted, mut refused, mut received) = (0u64, 0u64, 0u64, 0u64);
    let (mut bytes_in, mut bytes_out, mut writes, mut reads) = (0u64, 0u64, 0u64, 0u64);
    let (mut last_send, mut last_settle, mut last_recv) = (t0, t0, t0);
    let (mut cpu_producers, mut cpu_consumers) = (0.0, 0.0);
    let mut refusal = None;
    for r in reports {
        let _ = latency.add(&r.latency);
        let _ = accept_latency.add(&r.accept_latency);
        frames_in.add(&r.frames_in);
        frames_out.add(&r.frames_out);
        let producer = r.name.starts_with('p');
        if producer {
            sent += r.sent;
            cpu_producers += r.cpu_s;
        } else {
            cpu_consumers += r.cpu_s;
        }
        accepted += r.accepted;
        refused += r.refused;
        bytes_in += r.bytes_in;
        bytes_out += r.bytes_out;
        writes += r.writes;
        reads += r.reads;
        last_send = last_send.max(r.last_send_ns);
        last_settle = last_settle.max(r.last_settle_ns);
        // Deliveries are counted at consumers; for rpc, responses at requesters.
        if producer == (opts.scenario == Scenario::Rpc) {
            received += r.received;
            last_recv = last_recv.max(r.last_recv_ns);
        }
        if refusal.is_none() {
            refusal = r.refusal.clone();
        }
    }
    let secs = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
    let expected = expected(opts, shared, consumer_links);
    let has_consumers = !consumer_links.is_empty();
    let t_end = last_send.max(last_settle).max(last_recv);
    let elapsed = secs(t_end).max(1e-9);
    let rate = |n: u64, t: u64| if n == 0 { 0.0 } else { n as f64 / secs(t).max(1e-9) };
    let (msgs, msgs_rate, what) = if has_consumers {
        (received, rate(received, last_recv), if opts.scenario == Scenario::Rpc { "responses" } else { "received" })
    } else if accepted + refused > 0 {
        (accepted, rate(accepted, last_settle), "accepted")
    } else {
        (sent, rate(sent, last_send), "sent")
    };
    let frames_total = frames_in.total() + frames_out.total();
    let frames_rate = frames_total as f64 / elapsed;
    let wall = secs(t_stop).max(1e-9);
    let q = |p: f64| latency.value_at_quantile(p) as f64 / 1000.0;
    let lat = if latency.is_empty() {
        Value::Null
    } else {
        json!({
            "count": latency.len(),
            "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99), "p999_us": q(0.999),
            "max_us": latency.max() as f64 / 1000.0, "mean_us": latency.mean() / 1000.0,
        })
    };
    let frames_json = |f: &FrameCounts| {
        json!({
            "transfer": f.get(Kind::Transfer), "flow": f.get(Kind::Flow),
            "disposition": f.get(Kind::Disposition), "empty": f.get(Kind::Empty), "other": f.get(Kind::Other),
            "total": f.total(),
        })
    };
    let ok = matches!(end, End::Complete | End::Incomplete | End::Timeout) && errors.is_empty();
    let end_name = match end {
        End::Complete => "complete",
        End::Incomplete => "incomplete",
        End::Failed => "failed",
        End::Stalled => "stalled",
        End::Timeout => "timeout",
    };
    let json = json!({
        "scenario": opts.scenario.name(),
        "label": opts.label,
        "url": opts.url.to_string(),
        "address": opts.address,
        "address2": opts.address2,
        "size": opts.size,
        "credit": opts.credit,
        "connections": opts.connections,
        "links": opts.links,
        "subscribers": opts.subscribers,
        "sub_links": opts.sub_links,
        "channels": opts.channels,
        "count": opts.count,
        "duration": opts.duration,
        "rate_limit": opts.rate,
        "settle": opts.settle.name(),
        "recv_settle": opts.recv_settle.name(),
        "end": end_name,
        "errors": errors,
        "sent": sent,
        "accepted": accepted,
        "refused": refused,
        "first_refusal": refusal,
        "received": received,
        "expected": if has_consumers { Some(expected) } else { None },
        "missing": if has_consumers { Some(expected.saturating_sub(received)) } else { None },
        "elapsed_s": elapsed,
        "msgs": msgs,
        "msgs_what": what,
        "msgs_per_s": msgs_rate,
        "send_msgs_per_s": rate(sent, last_send),
        "frames_per_s": frames_rate,
        "frames_out": frames_json(&frames_out),
        "frames_in": frames_json(&frames_in),
        "bytes_out": bytes_out,
        "bytes_in": bytes_in,
        "writes": writes,
        "reads": reads,
        "latency": lat,
        "cpu": {
            "generator_s": cpu,
            "generator_producers_s": cpu_producers,
            "generator_consumers_s": cpu_consumers,
            "broker_s": broker_cpu,
            "wall_s": wall,
        },
        "command": opts.command,
    });
    let mut t = String::new();
    let label = opts.label.as_deref().map(|l| format!(" [{l}]")).unwrap_or_default();
    t += &format!("sluice-perf {}{} against {} ({})\n", opts.scenario.name(), label, opts.url, end_name);
    t += &format!(
        "  {} -> {}  size {} B  credit {}  producers {}x{}  consumers {}x{}  settle {}/{}\n",
        opts.address,
        opts.address2,
        opts.size,
        opts.credit,
        opts.connections,
        opts.links,
        opts.subscribers,
        opts.sub_links,
        opts.settle.name(),
        opts.recv_settle.name()
    );
    t += &format!(
        "  sent {}  accepted {}  refused {}  {} {}{}  in {:.3} s\n",
        sent,
        accepted,
        refused,
        if opts.scenario == Scenario::Rpc { "responses" } else { "received" },
        received,
        if has_consumers && expected > received {
            format!(" (missing {} of {expected})", expected - received)
        } else {
            String::new()
        },
        elapsed
    );
    t += &format!("  throughput   {}/s {what} ({}/s sent)\n", si(msgs_rate), si(rate(sent, last_send)));
    t += &format!(
        "  frames       {}/s  (out: {} transfer, {} flow, {} disposition, {} other; in: {} transfer, {} flow, {} disposition, {} other)\n",
        si(frames_rate),
        frames_out.get(Kind::Transfer),
        frames_out.get(Kind::Flow),
        frames_out.get(Kind::Disposition),
        frames_out.get(Kind::Other) + frames_out.get(Kind::Empty),
        frames_in.get(Kind::Transfer),
        frames_in.get(Kind::Flow),
        frames_in.get(Kind::Disposition),
        frames_in.get(Kind::Other) + frames_in.get(Kind::Empty),
    );
    t += &latency_line("latency     ", &latency);
    t += &latency_line("to accepted ", &accept_latency);
    t += &format!(
        "  cpu          generator {:.2} s ({:.0}% of one core; producers {:.2} s, consumers {:.2} s)",
        cpu,
        cpu / wall * 100.0,
        cpu_producers,
        cpu_consumers
    );
    if let Some(b) = broker_cpu {
        t += &format!("  broker {:.2} s ({:.0}%)", b, b / wall * 100.0);
    }
    t += "\n";
    t += &format!("  syscalls     {writes} writes, {reads} reads; {} out, {} in\n", bytes(bytes_out), bytes(bytes_in));
    if let Some(r) = &refusal {
        t += &format!("  first refusal: {r}\n");
    }
    for e in &errors {
        t += &format!("  error: {e}\n");
    }
    Report { json, text: t, ok }
}

/// Open `--connections` idle connections and report the broker's RSS growth.
fn idle(opts: &Opts) -> Report {
    let nofile = sys::raise_nofile();
    let pid = opts.broker_pid;
    let rss0 = pid.and_then(sys::proc_rss_kib);
    let cpu0 = sys::process_cpu_s();
    let start = Instant::now();
    let mut conns = Vec::with_capacity(opts.connections);
    let mut error = None;
    for i in 0..opts.connections {
        match connect(opts, &format!("sluice-perf-idle-{i}")) {
            Ok(c) => {
                let (conn, sock, _, _) = c.into_parts();
                conns.push((conn, sock));
            }
            Err(e) => {
                error = Some(format!("connection {i}: {e}"));
                break;
            }
        }
        if opts.progress && (i + 1) % 1000 == 0 {
            eprintln!("[{:6.1} s] {} connections open", start.elapsed().as_secs_f64(), i + 1);
        }
    }
    let open_s = start.elapsed().as_secs_f64();
    thread::sleep(Duration::from_secs_f64(opts.duration.unwrap_or(2.0)));
    let rss1 = pid.and_then(sys::proc_rss_kib);
    let cpu = sys::process_cpu_s() - cpu0;
    let n = conns.len();
    drop(conns);
    let per = match (rss0, rss1) {
        (Some(a), Some(b)) if n > 0 => Some((b as f64 - a as f64) / n as f64),
        _ => None,
    };
    let json = json!({
        "scenario": "idle",
        "label": opts.label,
        "url": opts.url.to_string(),
        "connections": opts.connections,
        "opened": n,
        "open_s": open_s,
        "nofile_limit": nofile,
        "broker_rss_before_kib": rss0,
        "broker_rss_after_kib": rss1,
        "broker_rss_per_connection_kib": per,
        "cpu": { "generator_s": cpu },
        "errors": error.iter().collect::<Vec<_>>(),
        "command": opts.command,
    });
    let mut t = format!("sluice-perf idle against {}\n", opts.url);
    t += &format!("  opened {n} of {} connections in {open_s:.2} s (open-files limit {nofile})\n", opts.connections);
    if let (Some(a), Some(b)) = (rss0, rss1) {
        t += &format!(
            "  broker RSS {} -> {} ({:.1} KiB per connection)\n",
            bytes(a * 1024),
            bytes(b * 1024),
            per.unwrap_or(0.0)
        );
    }
    if let Some(e) = &error {
        t += &format!("  error: {e}\n");
    }
    Report { json, text: t, ok: error.is_none() }
}

/// A client connection as the options say (URL, SASL), container `name`.
fn connect(opts: &Opts, name: &str) -> std::io::Result<Client> {
    let mut cfg = Config::client(&format!("{name}-{}", std::process::id()));
    cfg.hostname = Some(opts.url.host.clone());
    cfg.client_sasl = match opts.sasl {
        Sasl::None => None,
        Sasl::Anonymous => Some(ClientSasl { mechanism: "ANONYMOUS".into(), initial_response: None }),
        Sasl::Plain => Some(sasl_plain(&opts.user, &opts.password)),
    };
    Client::connect_with(opts.url.addr(), cfg)
}

/// The flow-controlled client API end to end (`sluice_perf::flow`): one `Publisher`
/// with at most `--inflight` publishes outstanding (Block), one `Subscriber` with
/// `--workers` workers within `--max-outstanding-messages` and
/// `--max-outstanding-bytes` (Block) accepting each message; `--count` messages of
/// `--size` bytes from `--address` to `--address2`. Reports the rate and the most the
/// subscriber's link held unsettled, against its limits.
fn flow_api(opts: &Opts) -> Report {
    use crate::flow::{
        FlowControlSettings, LimitExceededBehavior, Outcome, PublishFlowControlSettings, Publisher, Subscriber,
        SubscriberOptions,
    };
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;
    let count = opts.count.unwrap_or(100_000);
    let settings = FlowControlSettings {
        max_outstanding_messages: opts.max_outstanding_messages,
        max_outstanding_bytes: opts.max_outstanding_bytes,
        limit_exceeded_behavior: LimitExceededBehavior::Block,
    };
    let publish_settings =
        PublishFlowControlSettings { max_outstanding_publishes: (opts.inflight as usize).max(1), ..Default::default() };
    let handled = Arc::new(AtomicU64::new(0));
    let cpu0 = sys::process_cpu_s();
    let bcpu0 = opts.broker_pid.and_then(sys::proc_cpu_s);
    let t0 = Instant::now();
    let mut errors = Vec::new();
    let (mut sent, mut accepted) = (0u64, 0u64);
    let started = (|| -> std::io::Result<(Subscriber, Publisher)> {
        let h = handled.clone();
        let options = SubscriberOptions { flow_control: settings, workers: opts.workers, ..Default::default() };
        let sub = Subscriber::start_on(connect(opts, "sluice-perf-flow-sub")?, &opts.address2, options, move |_| {
            h.fetch_add(1, Relaxed);
            Outcome::Accept
        })?;
        let publisher = Publisher::start_on(connect(opts, "sluice-perf-flow-pub")?, &opts.address, publish_settings)?;
        Ok((sub, publisher))
    })();
    let (sub_stats, pub_stats) = match started {
        Err(e) => {
            errors.push(format!("start: {e}"));
            (None, None)
        }
        Ok((sub, publisher)) => {
            let body = crate::client::data_message(&vec![0x2e; opts.size]);
            let mut waiting = VecDeque::new();
            let deadline = opts.timeout.map(|t| t0 + Duration::from_secs_f64(t));
            let late = || deadline.is_some_and(|d| Instant::now() >= d);
            while sent < count && !late() {
                match publisher.publish(body.clone()) {
                    Ok(h) => waiting.push_back(h),
                    Err(e) => {
                        errors.push(format!("publish: {e}"));
                        break;
                    }
                }
                sent += 1;
                // Block keeps at most --inflight outstanding; the handles of those
                // settled are collected as we go.
                while waiting.len() > publish_settings.max_outstanding_publishes {
                    if let Some(h) = waiting.pop_front() {
                        accepted +=
                            u64::from(matches!(h.wait(), Ok(Some(sluice_proto::types::DeliveryState::Accepted))));
                    }
                }
            }
            for h in waiting {
                accepted += u64::from(matches!(h.wait(), Ok(Some(sluice_proto::types::DeliveryState::Accepted))));
            }
            while handled.load(Relaxed) < accepted && !late() && sub.is_running() {
                thread::sleep(Duration::from_millis(1));
            }
            let sub_stats = sub.stop().map_err(|e| errors.push(format!("subscriber: {e}"))).ok();
            let pub_stats = publisher.close().map_err(|e| errors.push(format!("publisher: {e}"))).ok();
            (sub_stats, pub_stats)
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    let bcpu1 = opts.broker_pid.and_then(sys::proc_cpu_s);
    let cpu = sys::process_cpu_s() - cpu0;
    let got = handled.load(Relaxed);
    let rate = if secs > 0.0 { got as f64 / secs } else { 0.0 };
    let (peak_m, peak_b) = sub_stats.as_ref().map_or((0, 0), |s| (s.peak_unsettled_messages, s.peak_unsettled_bytes));
    let complete = errors.is_empty() && got == count && accepted == count;
    let json = json!({
        "scenario": "flow",
        "label": opts.label,
        "url": opts.url.to_string(),
        "end": if complete { "complete" } else { "incomplete" },
        "sent": sent,
        "accepted": accepted,
        "delivered": got,
        "seconds": secs,
        "msgs_per_s": rate,
        "limits": {
            "max_outstanding_messages": opts.max_outstanding_messages,
            "max_outstanding_bytes": opts.max_outstanding_bytes,
            "max_outstanding_publishes": publish_settings.max_outstanding_publishes,
            "workers": opts.workers,
        },
        "subscriber": {
            "peak_unsettled_messages": peak_m,
            "peak_unsettled_bytes": peak_b,
            "released_by_flow_control": sub_stats.as_ref().map(|s| s.released_by_flow_control),
            "credit_grants": sub_stats.as_ref().map(|s| s.credit_grants),
        },
        "publisher": {
            "peak_outstanding_publishes": pub_stats.as_ref().map(|s| s.peak_outstanding_publishes),
            "peak_outstanding_bytes": pub_stats.as_ref().map(|s| s.peak_outstanding_bytes),
        },
        "cpu": { "generator_s": cpu, "broker_s": bcpu0.zip(bcpu1).map(|(a, b)| b - a) },
        "errors": errors,
        "command": opts.command,
    });
    let mut t = format!("sluice-perf flow against {}\n", opts.url);
    t += &format!("  throughput   {}/s delivered ({got} of {count} in {secs:.2} s)\n", si(rate));
    t += &format!(
        "  subscriber   at most {peak_m} messages / {} unsettled (limits {} / {}), {} workers\n",
        bytes(peak_b as u64),
        opts.max_outstanding_messages,
        bytes(opts.max_outstanding_bytes as u64),
        opts.workers
    );
    if let Some(p) = &pub_stats {
        t += &format!(
            "  publisher    at most {} publishes outstanding (limit {})\n",
            p.peak_outstanding_publishes, publish_settings.max_outstanding_publishes
        );
    }
    for e in &errors {
        t += &format!("  error: {e}\n");
    }
    Report { json, text: t, ok: complete }
}

/// 1234567 -> "1.23M".
pub fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b} B")
    }
}

#[allow(unsafe_code)]
fn is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(2) == 1 }
}

/// Print a report; returns the process exit code.
pub fn print(report: &Report, as_json: bool) -> i32 {
    let mut out = std::io::stdout().lock();
    let _ = if as_json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report.json).unwrap_or_default())
    } else {
        write!(out, "{}", report.text)
    };
    if report.ok {
        0
    } else {
        1
    }
}

/// One text-report line of a latency histogram in microseconds (empty when no samples).
fn latency_line(label: &str, h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return String::new();
    }
    let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
    format!(
        "  {label} p50 {:.1} us  p99 {:.1} us  p999 {:.1} us  max {:.1} us  ({} samples)\n",
        q(0.5),
        q(0.99),
        q(0.999),
        h.max() as f64 / 1000.0,
        h.len()
    )
}
