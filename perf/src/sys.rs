//! The few operating-system facts the load generator needs: CPU time (its own, per
//! thread, and another process's from /proc), resident memory, waiting on a socket
//! with microsecond timeouts, and the open-files limit.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

fn rusage(who: libc::c_int) -> f64 {
    let mut u = libc::rusage {
        ru_utime: libc::timeval { tv_sec: 0, tv_usec: 0 },
        ru_stime: libc::timeval { tv_sec: 0, tv_usec: 0 },
        ru_maxrss: 0,
        ru_ixrss: 0,
        ru_idrss: 0,
        ru_isrss: 0,
        ru_minflt: 0,
        ru_majflt: 0,
        ru_nswap: 0,
        ru_inblock: 0,
        ru_oublock: 0,
        ru_msgsnd: 0,
        ru_msgrcv: 0,
        ru_nsignals: 0,
        ru_nvcsw: 0,
        ru_nivcsw: 0,
    };
    if getrusage(who, &mut u) != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

#[allow(unsafe_code)]
fn getrusage(who: libc::c_int, u: &mut libc::rusage) -> libc::c_int {
    // SAFETY: `u` is a valid, exclusively borrowed rusage.
    unsafe { libc::getrusage(who, u) }
}

/// CPU seconds (user + system) used by this process so far.
pub fn process_cpu_s() -> f64 {
    rusage(libc::RUSAGE_SELF)
}

/// CPU seconds (user + system) used by the calling thread so far.
pub fn thread_cpu_s() -> f64 {
    rusage(libc::RUSAGE_THREAD)
}

/// CPU seconds (user + system, all threads) of process `pid`, from /proc/<pid>/stat.
pub fn proc_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at ") ".
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

#[allow(unsafe_code)]
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Resident set size of process `pid` in KiB, from /proc/<pid>/status.
pub fn proc_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Wait until `fd` is readable (or writable too, with `want_write`), for at most
/// `timeout` (None: forever). Returns (readable, writable).
#[allow(unsafe_code)]
pub fn wait_fd(fd: RawFd, want_write: bool, timeout: Option<Duration>) -> io::Result<(bool, bool)> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN | if want_write { libc::POLLOUT } else { 0 }, revents: 0 };
    let ts = timeout.map(|t| libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as _ });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: one valid pollfd, a valid or null timespec, no signal mask.
    let r = unsafe { libc::ppoll(&mut p, 1, tsp, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok((false, false));
        }
        return Err(e);
    }
    let err = p.revents & (libc::POLLERR | libc::POLLHUP) != 0;
    Ok((p.revents & libc::POLLIN != 0 || err, p.revents & libc::POLLOUT != 0 || err))
}

/// Raise the soft open-files limit to the hard limit; returns the new soft limit.
#[allow(unsafe_code)]
pub fn raise_nofile() -> u64 {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid rlimit out-parameter.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return 0;
    }
    if l.rlim_cur < l.rlim_max {
        let want = libc::rlimit { rlim_cur: l.rlim_max, rlim_max: l.rlim_max };
        // SAFETY: valid rlimit in-parameter.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return want.rlim_cur;
        }
    }
    l.rlim_cur
}
