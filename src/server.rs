//! Starting the whole broker: admin endpoint, store recovery, shards. Used by the
//! binary and by anything that runs a broker in-process (the broker fuzz target).

use crate::config::{Durability, Settings};
use crate::shard::{self, Global};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The process-wide state for `settings`; fails on unusable auth or TLS files
/// ([`check_files`]).
pub fn global(settings: Settings) -> std::io::Result<Arc<Global>> {
    let loaded = check_files(&settings).map_err(std::io::Error::other)?;
    global_with(settings, loaded)
}

/// What [`check_files`] loaded from the files the configuration names, loaded once for
/// the whole broker.
pub struct Loaded {
    /// Authentication and authorization.
    pub auth: crate::auth::Authenticator,
    /// The TLS listener's configuration (certificate, key, client CA), shared by every
    /// shard; None without a certificate.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// [`global`] with what [`check_files`] loaded for `settings`.
pub fn global_with(mut settings: Settings, loaded: Loaded) -> std::io::Result<Arc<Global>> {
    let Loaded { auth, tls } = loaded;
    // The store's files are opened through io_uring, where a relative directory failed
    // to open (EBADF: "./data", the default, wrote nothing and refused every durable
    // publish): it is made absolute once, against the working directory at start.
    settings.data_dir = std::path::absolute(&settings.data_dir)?;
    let shards = settings.shards;
    Ok(Arc::new(Global {
        auth: Arc::new(auth),
        tls,
        admin: (0..shards).map(|_| Arc::new(crossbeam_queue::ArrayQueue::new(64))).collect(),
        settings,
        connections: AtomicUsize::new(0),
        shard_connections: (0..shards).map(|_| AtomicUsize::new(0)).collect(),
        shutting_down: AtomicBool::new(false),
        ready: AtomicUsize::new(0),
        recovered: std::sync::Mutex::new(Vec::new()),
        events_dir: Arc::new(crate::broker::directory::EventsDirectory::default()),
        store_ok: (0..shards).map(|_| Arc::new(AtomicBool::new(true))).collect(),
        oldest_handshake: (0..shards).map(|_| std::sync::atomic::AtomicU64::new(0)).collect(),
        epoch: std::time::Instant::now(),
    }))
}

fn auth_config(settings: &Settings) -> crate::auth::AuthConfig {
    let path = |s: &str| (!s.is_empty()).then(|| std::path::PathBuf::from(s));
    crate::auth::AuthConfig {
        enabled: settings.auth_enabled,
        jwt_key_file: path(&settings.auth_jwt_key_file),
        jwt_audience: (!settings.auth_jwt_audience.is_empty()).then(|| settings.auth_jwt_audience.clone()),
        casbin_model: path(&settings.auth_casbin_model),
        casbin_policy: path(&settings.auth_casbin_policy),
    }
}

/// Load what the configuration names on disk as a start would: the JWT key, the
/// casbin model and policy (the authenticator), the TLS certificate, key and client CA
/// (the TLS configuration every shard then shares), returned for [`global_with`]. `check-config` runs it, and so does the binary
/// before it starts, so a file that is missing or unusable is a configuration error
/// (exit 2, not restarted by systemd) rather than a failed start.
pub fn check_files(settings: &Settings) -> Result<Loaded, String> {
    let auth = crate::auth::Authenticator::new(&auth_config(settings))?;
    let mut tls = None;
    if settings.enable {
        let no_cert = settings.tls_cert_file.is_empty() && settings.tls_key_file.is_empty();
        if !settings.tls_client_ca_file.is_empty() && no_cert {
            return Err("SLUICE_TLS_CLIENT_CA_FILE is set without a TLS certificate and key (SLUICE_TLS_CERT_FILE, SLUICE_TLS_KEY_FILE): client certificates need the TLS listener".into());
        }
        tls = crate::net::tls::server_config(settings)?;
    }
    Ok(Loaded { auth, tls })
}

/// Raise the soft limit on open files to the hard limit, as most servers (and Go's
/// runtime) do: every connection is a descriptor, and the usual soft default of 1,024
/// would stop the broker far below its MaxConnections. Returns the limit in force
/// (None when it cannot be read).
#[allow(unsafe_code)]
pub fn raise_open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    Some(lim.rlim_cur)
}

/// Run the broker until `global.shutting_down` is set and every shard has closed its
/// connections.
pub fn serve(global: Arc<Global>) -> std::io::Result<()> {
    if !global.settings.enable {
        tracing::warn!("CONNECTORS_AMQP10_ENABLE=false: no AMQP listener; serving admin endpoints only");
    }
    let open_files = raise_open_files_limit();
    // Each connection is a descriptor; the store, listeners and admin need some more.
    if let Some(limit) = open_files.filter(|&l| l < u64::from(global.settings.max_connections) + 256) {
        tracing::warn!(
            open_files_limit = limit,
            max_connections = global.settings.max_connections,
            "the open-files limit is below MaxConnections + 256: raise the hard limit (LimitNOFILE, ulimit -Hn)"
        );
    }
    // The admin endpoint comes first: /healthz answers 503 during recovery.
    let _admin = crate::admin::start(global.clone())?;
    if global.settings.durability == Durability::Fsync && global.settings.enable {
        let recovered = crate::store::startup::recover_all(&global.settings)?;
        if let Ok(mut r) = global.recovered.lock() {
            *r = recovered.into_iter().map(Some).collect();
        }
    }
    tracing::info!(
        shards = global.settings.shards,
        amqp = %format!("{}:{}", global.settings.host, global.settings.port),
        admin = %global.settings.admin_addr,
        open_files_limit = open_files.unwrap_or(0),
        "sluice starting"
    );
    if global.settings.enable {
        shard::run(global.clone())?;
    } else {
        while !global.shutting_down.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    tracing::info!("sluice stopped");
    Ok(())
}
