//! Lifecycle of the real binary: SIGTERM (twice), check-config, JSON logs, and the
//! health endpoint's readiness answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{fresh_dir, Broker};
use sluice_perf::client::{Client, WAIT};
use sluice_proto::engine::Event;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
fn two_sigterms_in_a_row_still_exit_zero_and_clients_see_connection_forced() {
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(b.addr(), "term2").unwrap();
    let pid = b.pid().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = b.signal_and_wait("0").expect("the broker exits");
    assert!(status.success(), "{status:?}");
    // Whatever the race between the two signals, the client is not left hanging: it
    // either got CLOSE amqp:connection:forced or saw the socket close.
    if let Ok(Event::Closed { error: Some(err), .. }) = c.wait_for(|e| matches!(e, Event::Closed { .. }), WAIT) {
        assert_eq!(err.condition, "amqp:connection:forced");
    }
}

#[test]
fn check_config_validates_without_starting() {
    let ok = sluice().arg("check-config").env("SLUICE_SHARDS", "1").output().unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("configuration is valid"));
    let bad = sluice().arg("check-config").env("CONNECTORS_AMQP10_GET_BATCH_SIZE", "0").output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("CONNECTORS_AMQP10_GET_BATCH_SIZE=0 is invalid"), "{err}");
    // Flags, env and file, each named in its own error.
    let bad = sluice().args(["check-config", "--shards", "0"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// Configurations that parse but could not serve are refused before a start, with
/// exit code 2 (systemd does not restart it): before, the same ports for the plain and
/// the TLS listener were accepted (the kernel then handed each connection to either at
/// random), the plain port off without a TLS certificate listened on nothing while
/// /healthz said ok, a client CA without a certificate was ignored, and a missing TLS
/// or JWT key file or a JWT secret under 32 bytes passed check-config and then failed
/// the start with exit code 1 (restarted in a loop).
#[test]
fn configurations_that_could_not_serve_are_refused_with_exit_code_2() {
    let dir = fresh_dir("badconf");
    let short = format!("{dir}/short.key");
    std::fs::write(&short, "only-twenty-bytes!!!").unwrap();
    let long = format!("{dir}/long.key");
    std::fs::write(&long, "0123456789abcdef0123456789abcdef").unwrap();
    let missing = format!("{dir}/missing.pem");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("SLUICE_TLS_CERT_FILE", "cert.pem"),
                ("SLUICE_TLS_KEY_FILE", "key.pem"),
                ("CONNECTORS_AMQP10_PORT", "5671"),
            ],
            "give the plain and the TLS listener different ports",
        ),
        (&[("CONNECTORS_AMQP10_PORT", "0")], "nothing would listen for AMQP"),
        (&[("SLUICE_TLS_CLIENT_CA_FILE", "ca.pem")], "client certificates need the TLS listener"),
        (&[("SLUICE_TLS_CERT_FILE", &missing), ("SLUICE_TLS_KEY_FILE", &missing)], "missing.pem"),
        (&[("SLUICE_AUTH_ENABLED", "true"), ("SLUICE_AUTH_JWT_KEY_FILE", &missing)], "missing.pem"),
        (&[("SLUICE_AUTH_ENABLED", "true"), ("SLUICE_AUTH_JWT_KEY_FILE", &short)], "shorter than 32 bytes"),
    ];
    for (env, says) in cases {
        for run in [true, false] {
            let mut cmd = sluice();
            if run {
                cmd.env("SLUICE_DATA_DIR", &dir).env("SLUICE_ADMIN_ADDR", "127.0.0.1:0");
            } else {
                cmd.arg("check-config");
            }
            let out = cmd.envs(env.iter().copied()).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{env:?} (start: {run}): {err}");
            assert!(err.contains(says), "{env:?} (start: {run}): {err}");
        }
    }
    let ok = sluice()
        .arg("check-config")
        .envs([("SLUICE_AUTH_ENABLED", "true"), ("SLUICE_AUTH_JWT_KEY_FILE", long.as_str())])
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
}

/// With the AMQP listener off the broker serves its admin endpoint only: /healthz is
/// ok and the APIs answer with nothing. Before, /healthz answered 503 for ever (it
/// waited for shards that never run), so an orchestrator restarted it in a loop.
#[test]
fn with_the_amqp_listener_off_the_admin_endpoint_is_healthy() {
    let b = Broker::start(&[("CONNECTORS_AMQP10_ENABLE", "false")]);
    assert_eq!(b.http("/healthz").map(|(s, _)| s), Some(200));
    for path in ["/api/channels", "/api/amqp10/connections", "/api/amqp10/links"] {
        let (status, body) = b.http(path).unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.contains(r#""total":0"#), "{path}: {body}");
    }
    let (status, body) = b.http("/metrics").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(std::net::TcpStream::connect(b.addr()).is_err(), "an AMQP listener is up");
}

/// Shards are pinned inside the CPUs the broker was given (taskset, a cpuset), not to
/// CPUs 0..n (a broker given the last CPU had its shard pinned to CPU 0).
#[test]
fn shards_run_on_the_cpus_the_process_was_given() {
    let allowed = sluice::shard::allowed_cpus();
    let cpu = *allowed.last().expect("the test's own affinity mask");
    assert_ne!(cpu, 0, "this test needs a CPU other than 0 to run on (allowed: {allowed:?})");
    let shard_cpus = |b: &Broker| {
        let threads = common::thread_cpus(b.pid());
        let shards: Vec<_> = threads.into_iter().filter(|(name, _)| name.starts_with("sluice-shard")).collect();
        assert!(!shards.is_empty(), "no shard threads");
        shards
    };
    // One shard on the one CPU given: pinned to it.
    let b = Broker::start_on_cpus(&[("SLUICE_SHARDS", "1")], &[cpu]);
    for (name, cpus) in shard_cpus(&b) {
        assert_eq!(cpus, cpu.to_string(), "{name} runs on {cpus}, the broker was given CPU {cpu}");
    }
    let mut c = Client::connect(b.addr(), "pinned").unwrap();
    c.begin().unwrap();
    drop(b);
    // More shards than CPUs given: not pinned, so within the process's mask.
    let b = Broker::start_on_cpus(&[("SLUICE_SHARDS", "2"), ("SLUICE_DATA_DIR", &fresh_dir("pin2"))], &[cpu]);
    for (name, cpus) in shard_cpus(&b) {
        assert_eq!(cpus, cpu.to_string(), "{name} runs on {cpus}, the broker was given CPU {cpu}");
    }
}

#[test]
fn logs_are_json_lines_when_asked() {
    let dir = fresh_dir("jsonlog");
    let port = common::free_port();
    let admin = common::free_port();
    let child = sluice()
        .env("SLUICE_LOG_FORMAT", "json")
        .env("SLUICE_DATA_DIR", &dir)
        .env("SLUICE_SHARDS", "1")
        .env("SLUICE_HOST", "127.0.0.1")
        .env("CONNECTORS_AMQP10_PORT", port.to_string())
        .env("SLUICE_ADMIN_ADDR", format!("127.0.0.1:{admin}"))
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "broker did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "{text}");
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v.get("level").is_some() && v.get("fields").is_some(), "{l}");
    }
    assert!(text.contains("sluice starting") && text.contains("sluice stopped"));
}

#[test]
fn healthz_is_not_ready_until_every_shard_listens_and_during_shutdown() {
    // The real admin server over a real socket, with the readiness state driven by hand.
    // A free port can be taken by a parallel test before we bind it: try a few.
    let (admin, global) = (0..5)
        .find_map(|_| {
            let admin = common::free_port();
            let settings = sluice::config::Settings {
                shards: 2,
                admin_addr: format!("127.0.0.1:{admin}"),
                durability: sluice::config::Durability::Memory,
                ..Default::default()
            };
            let global = sluice::server::global(settings).ok()?;
            sluice::admin::start(global.clone()).ok()?;
            Some((admin, global))
        })
        .expect("admin server");
    let get = || -> u16 {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", admin)).unwrap();
        write!(s, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    // Recovery and start-up: no shard has bound its listener yet.
    assert_eq!(get(), 503);
    global.ready.store(1, Ordering::SeqCst);
    assert_eq!(get(), 503);
    global.ready.store(2, Ordering::SeqCst);
    assert_eq!(get(), 200);
    // Shutdown.
    global.shutting_down.store(true, Ordering::SeqCst);
    assert_eq!(get(), 503);
}

/// After a SIGTERM exit nothing listens on the AMQP port any more: the listener is
/// shut down before the process ends. (A listener whose accept was still pending in
/// io_uring used to outlive the process for a moment, so a broker restarted on the
/// same port saw some of its first clients reset by the dead one's socket.)
#[test]
fn after_sigterm_the_port_is_free_at_once() {
    for round in 0..8 {
        let mut b = Broker::start(&[]);
        // Traffic first, so the accept loops have been through a few accepts.
        for i in 0..3 {
            let c = Client::connect(b.addr(), &format!("free-{round}-{i}")).unwrap();
            drop(c);
        }
        let status = b.term_and_wait_exit();
        assert!(status.success(), "{status:?}");
        let connected = std::net::TcpStream::connect_timeout(&b.addr().parse().unwrap(), Duration::from_millis(500));
        assert!(connected.is_err(), "round {round}: something still accepted on {} after the broker exited", b.addr());
    }
}
