//! Start the real broker binary on free loopback ports for a test.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Broker {
    child: Child,
    pub port: u16,
    pub admin: u16,
}

/// A port that is free now, below the kernel's ephemeral range (32768 and up), so the
/// clients' own connections, whose local ports come from that range, cannot take it
/// between this check and the broker's bind.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()) << 20;
    for i in 0..10_000u64 {
        let x = (seed ^ NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(i);
        let port = 10_000 + (x % 22_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

impl Broker {
    /// Start with 2 shards and the given extra environment (a fresh data directory
    /// unless SLUICE_DATA_DIR is given).
    pub fn start(env: &[(&str, &str)]) -> Broker {
        Self::try_start(env).expect("broker did not become ready")
    }

    /// Start; None if the broker exited or did not become ready. A broker that exits
    /// at once because another test's process took one of its ports in the meantime
    /// is started again on other ports.
    pub fn try_start(env: &[(&str, &str)]) -> Option<Broker> {
        Self::try_start_with(env, None, None)
    }

    /// Start with the open-files limit (soft, hard) set for the broker process.
    pub fn start_with_open_files(env: &[(&str, &str)], soft: u64, hard: u64) -> Broker {
        Self::try_start_with(env, Some((soft, hard)), None).expect("broker did not become ready")
    }

    /// Start with the broker process's CPU affinity mask set to these CPUs (as `taskset`
    /// does).
    pub fn start_on_cpus(env: &[(&str, &str)], cpus: &[usize]) -> Broker {
        Self::try_start_with(env, None, Some(cpus)).expect("broker did not become ready")
    }

    fn try_start_with(env: &[(&str, &str)], open_files: Option<(u64, u64)>, cpus: Option<&[usize]>) -> Option<Broker> {
        for _ in 0..4 {
            let started = Instant::now();
            match Self::try_start_once(env, open_files, cpus) {
                Ok(b) => return Some(b),
                Err(exited) if exited && started.elapsed() < Duration::from_secs(5) => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// Err(true): the broker exited; Err(false): it did not become ready in time.
    fn try_start_once(
        env: &[(&str, &str)],
        open_files: Option<(u64, u64)>,
        cpus: Option<&[usize]>,
    ) -> Result<Broker, bool> {
        let port = free_port();
        let mut admin = free_port();
        // Two picks may be the same port (the broker would fail to bind the second).
        while admin == port {
            admin = free_port();
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.env("CONNECTORS_AMQP10_PORT", port.to_string())
            .env("SLUICE_ADMIN_ADDR", format!("127.0.0.1:{admin}"))
            .env("SLUICE_HOST", "127.0.0.1")
            .env("SLUICE_SHARDS", "2")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if !env.iter().any(|(k, _)| *k == "SLUICE_DATA_DIR") {
            cmd.env("SLUICE_DATA_DIR", fresh_dir("data"));
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some((soft, hard)) = open_files {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe and touches only this struct.
            #[allow(unsafe_code)]
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        if let Some(cpus) = cpus {
            use std::os::unix::process::CommandExt;
            let cpus = cpus.to_vec();
            // SAFETY: sched_setaffinity is a plain system call on a set built here.
            #[allow(unsafe_code)]
            unsafe {
                cmd.pre_exec(move || {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    for &c in &cpus {
                        libc::CPU_SET(c, &mut set);
                    }
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd.spawn().expect("spawn sluice");
        let mut b = Broker { child, port, admin };
        let deadline = Instant::now() + Duration::from_secs(20);
        while b.http("/healthz").map(|(s, _)| s) != Some(200) {
            if matches!(b.child.try_wait(), Ok(Some(_))) {
                return Err(true);
            }
            if Instant::now() > deadline {
                return Err(false);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(b)
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// GET a path on the admin port: (status, body).
    pub fn http(&self, path: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.admin)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let status = out.split_whitespace().nth(1)?.parse().ok()?;
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        Some((status, body))
    }

    /// The shard serving each listed connection, by container-id.
    pub fn connection_shards(&self) -> std::collections::BTreeMap<String, u64> {
        let (status, body) = self.http("/api/amqp10/connections").unwrap();
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["connections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["container_id"].as_str().unwrap().to_owned(), c["shard"].as_u64().unwrap()))
            .collect()
    }

    /// The value of one metric sample line (exact name with labels).
    pub fn metric(&self, sample: &str) -> Option<f64> {
        let (_, body) = self.http("/metrics")?;
        body.lines().find_map(|l| l.strip_prefix(sample).and_then(|v| v.trim().parse().ok()))
    }

    /// Every sample of a family: (its labels as rendered, value).
    pub fn samples(&self, family: &str) -> Vec<(String, f64)> {
        let Some((_, body)) = self.http("/metrics") else { return Vec::new() };
        body.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix(family)?.strip_prefix('{')?;
                let (labels, value) = rest.rsplit_once("} ")?;
                Some((labels.to_owned(), value.trim().parse().ok()?))
            })
            .collect()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then block until the process has exited (no polling delay).
    pub fn term_and_wait_exit(&mut self) -> std::process::ExitStatus {
        Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill");
        self.child.wait().expect("wait")
    }

    /// Send a signal and wait for the exit status (bounded).
    pub fn signal_and_wait(&mut self, sig: &str) -> Option<std::process::ExitStatus> {
        Command::new("kill").args([&format!("-{sig}"), &self.child.id().to_string()]).status().ok()?;
        let deadline = Instant::now() + Duration::from_secs(8);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A new empty directory under the system temp directory.
pub fn fresh_dir(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "sluice-test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d.to_string_lossy().into_owned()
}

/// The CPUs each thread of a process may run on: (thread name, Cpus_allowed_list).
pub fn thread_cpus(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).expect("task dir").flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default().trim().to_string();
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        if let Some(l) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
            out.push((name, l.trim().to_string()));
        }
    }
    out
}

/// The resident set size of a process in KiB (0 when it cannot be read).
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The peak resident set size of a process in KiB (0 when it cannot be read).
pub fn hwm_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// A KiB field of /proc/<pid>/status.
fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A receiver asks for a drain and, in the same write, for `credit` without one: the
/// second FLOW takes the drain back, so `credit` is what the link has to spend.
pub fn drain_taken_back(c: &mut sluice_perf::client::Client, r: sluice_proto::engine::LinkId, credit: u32) {
    c.engine().grant_credit(r, 0, true).unwrap();
    c.engine().grant_credit(r, credit, false).unwrap();
    c.flush().unwrap();
}
