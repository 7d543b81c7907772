//! deploy/: the systemd unit, its environment file and the container image, checked
//! against the broker's own settings table (`sluice::config`). The Kubernetes manifests,
//! the Prometheus rules and the Grafana dashboard are checked by
//! tests/python/test_deploy.py (YAML, promtool, and a running broker's /metrics).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice::config::{self, Command, Settings};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command as Process;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `(env, default)` of every setting, in order, read from the help text (which is
/// generated from the settings table and tested against it in src/config.rs).
fn settings_table() -> Vec<(String, String)> {
    let help = config::help_text();
    let table: Vec<_> = help
        .lines()
        .filter_map(|l| l.trim().strip_prefix("env "))
        .map(|l| {
            let fields: Vec<&str> = l.split("  |  ").collect();
            let env = fields[0].trim().to_owned();
            let default = fields.iter().find_map(|f| f.strip_prefix("default ")).expect("default").trim().to_owned();
            (env, default)
        })
        .collect();
    assert!(table.len() >= 28, "help text lists {} settings", table.len());
    table
}

/// The commented-out assignments `#NAME=value` of an env file, in order.
fn commented_assignments(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn env_example_lists_every_setting_with_its_default() {
    let text = read("deploy/systemd/sluice.env.example");
    let listed = commented_assignments(&text);
    let mut seen = BTreeMap::new();
    for (k, v) in &listed {
        assert!(seen.insert(k.clone(), v.clone()).is_none(), "{k} is listed twice");
    }
    // Nothing is set by default: every line is commented out.
    for line in text.lines() {
        let line = line.trim();
        assert!(line.is_empty() || line.starts_with('#'), "uncommented line: {line}");
    }
    let table = settings_table();
    for (env, default) in &table {
        let value = seen.get(env).unwrap_or_else(|| panic!("{env} missing from sluice.env.example"));
        if env == "SLUICE_SHARDS" {
            // "number of CPUs": left empty, which counts as unset.
            assert_eq!(value, "", "{env}");
            assert_eq!(default, "number of CPUs");
        } else {
            assert_eq!(value, default, "{env}: the example's value is not the default");
        }
    }
    let known: Vec<&str> = table.iter().map(|(e, _)| e.as_str()).chain(["SLUICE_CONFIG", "RUST_LOG"]).collect();
    for k in seen.keys() {
        assert!(known.contains(&k.as_str()), "{k} in sluice.env.example is not a setting");
    }
    // Uncommented as a whole, the file configures exactly the defaults.
    let env: BTreeMap<String, String> = seen.into_iter().collect();
    match config::parse(&[], &|k| env.get(k).cloned()) {
        Ok(Command::Run(s)) => assert_eq!(s, Settings::default()),
        other => panic!("the uncommented example does not parse to the defaults: {other:?}"),
    }
}

/// `Key=value` lines of a unit file (the last one wins for single-valued keys; this
/// returns all of them).
fn directives(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with(';') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[test]
fn systemd_unit_has_the_required_settings() {
    let unit = read("deploy/systemd/sluice.service");
    for section in ["[Unit]", "[Service]", "[Install]"] {
        assert!(unit.lines().any(|l| l.trim() == section), "{section} missing");
    }
    let d = directives(&unit);
    let get = |k: &str| -> Vec<&str> { d.iter().filter(|(key, _)| key == k).map(|(_, v)| v.as_str()).collect() };
    for (key, want) in [
        ("User", "sluice"),
        ("Group", "sluice"),
        ("ExecStart", "/usr/local/bin/sluice"),
        ("LimitMEMLOCK", "infinity"),
        ("LimitNOFILE", "1048576"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ReadWritePaths", "/var/lib/sluice"),
        ("StateDirectory", "sluice"),
        ("Restart", "on-failure"),
        ("KillSignal", "SIGTERM"),
        ("TimeoutStopSec", "10"),
        ("EnvironmentFile", "-/etc/sluice/sluice.env"),
        ("Environment", "SLUICE_DATA_DIR=/var/lib/sluice"),
        ("WantedBy", "multi-user.target"),
    ] {
        assert_eq!(get(key), vec![want], "{key}");
    }
    // An invalid configuration exits 2: restarting would not help.
    assert_eq!(get("RestartPreventExitStatus"), vec!["2"]);
    // The sysusers.d file creates the user the unit runs as.
    let sysusers = read("deploy/systemd/sluice.sysusers");
    assert!(sysusers.lines().any(|l| l.starts_with("u sluice ")), "{sysusers}");
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let Ok(out) = Process::new("systemd-analyze").arg("--version").output() else {
        println!("systemd-analyze not installed: skipping `systemd-analyze verify` (structure is checked above)");
        return;
    };
    assert!(out.status.success());
    // verify insists that ExecStart= exists: point it at the binary cargo just built.
    let bin = env!("CARGO_BIN_EXE_sluice");
    let dir = std::env::temp_dir().join(format!("sluice-deploy-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let unit_path = dir.join("sluice.service");
    let unit = read("deploy/systemd/sluice.service").replace("/usr/local/bin/sluice", bin);
    std::fs::write(&unit_path, unit).unwrap();
    let out = Process::new("systemd-analyze").arg("verify").arg(&unit_path).current_dir(&dir).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify failed:\n{stderr}");
    // verify only warns about unknown keys and unparsable values: treat any remark on
    // our unit as a failure.
    let remarks: Vec<&str> = stderr.lines().filter(|l| l.contains("sluice.service")).collect();
    assert!(remarks.is_empty(), "systemd-analyze verify:\n{stderr}");
    // check-config (documented in the unit for checking the env file) accepts the defaults.
    let out = Process::new(bin).arg("check-config").env_clear().output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Stages of a Dockerfile: (FROM line, instructions), continuation lines joined.
fn stages(dockerfile: &str) -> Vec<(String, Vec<String>)> {
    let mut logical = Vec::new();
    let mut cur = String::new();
    for line in dockerfile.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(part) = t.strip_suffix('\\') {
            cur.push_str(part);
            cur.push(' ');
        } else if !t.starts_with('#') {
            cur.push_str(t);
            logical.push(std::mem::take(&mut cur));
        }
    }
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for l in logical {
        if l.to_ascii_uppercase().starts_with("FROM ") {
            out.push((l, Vec::new()));
        } else if let Some(last) = out.last_mut() {
            last.1.push(l);
        }
    }
    out
}

#[test]
fn dockerfile_is_multi_stage_non_root_and_exposes_the_ports() {
    let text = read("deploy/container/Dockerfile");
    let st = stages(&text);
    assert_eq!(st.len(), 2, "{st:?}");
    let (builder_from, builder) = &st[0];
    let (runtime_from, runtime) = &st[1];
    assert!(builder_from.starts_with("FROM rust:1-bookworm AS builder"), "{builder_from}");
    assert!(runtime_from.starts_with("FROM debian:bookworm-slim"), "{runtime_from}");
    assert!(
        builder.iter().any(|i| i.starts_with("RUN ")
            && i.contains("cargo build")
            && i.contains("--release")
            && i.contains("--bin sluice")),
        "{builder:?}"
    );
    assert!(runtime.iter().any(|i| i.starts_with("COPY --from=builder ")), "{runtime:?}");
    let users: Vec<&String> = runtime.iter().filter(|i| i.starts_with("USER ")).collect();
    assert_eq!(users.len(), 1, "{runtime:?}");
    let user = users[0].trim_start_matches("USER ").split(':').next().unwrap().trim();
    assert!(!["root", "0", ""].contains(&user), "runs as {user}");
    // After USER nothing switches back.
    let exposed: Vec<&str> = runtime
        .iter()
        .filter_map(|i| i.strip_prefix("EXPOSE "))
        .flat_map(str::split_whitespace)
        .map(|p| p.trim_end_matches("/tcp"))
        .collect();
    for port in ["5672", "5671", "8080"] {
        assert!(exposed.contains(&port), "EXPOSE {port} missing: {exposed:?}");
    }
    assert!(runtime.iter().any(|i| i.starts_with("ENTRYPOINT ") && i.contains("/usr/local/bin/sluice")));
    assert!(runtime.iter().any(|i| i.starts_with("ENV ") && i.contains("SLUICE_DATA_DIR=")));
    // memlock is documented where people look.
    assert!(text.contains("--ulimit memlock=-1:-1"));
    // The build context must not ship target/ or the venv into the builder.
    let ignore = read("deploy/container/Dockerfile.dockerignore");
    for p in ["target", ".venv", ".git"] {
        assert!(ignore.lines().any(|l| l.trim().trim_start_matches('/').trim_end_matches('/') == p), "{p}");
    }
    // Every workspace member the build needs is in the context.
    for p in ["Cargo.toml", "Cargo.lock", "src", "proto", "perf", "benches"] {
        assert!(Path::new(&root().join(p)).exists(), "{p}");
        assert!(!ignore.lines().any(|l| l.trim().trim_start_matches('/').trim_end_matches('/') == p), "{p} ignored");
    }
}
