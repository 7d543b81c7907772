//! Starting the whole broker: admin endpoint, store recovery, shards. Used by the
//! binary and by anything that runs a broker in-process (the broker fuzz target).

use crate::config::{Durability, Settings};
use crate::shard::{self, Global};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The process-wide state for `settings`; fails on unusable auth files.
pub fn global(settings: Settings) -> std::io::Result<Arc<Global>> {
    let shards = settings.shards;
    let path = |s: &str| (!s.is_empty()).then(|| std::path::PathBuf::from(s));
    let auth = crate::auth::AuthConfig {
        enabled: settings.auth_enabled,
        jwt_key_file: path(&settings.auth_jwt_key_file),
        jwt_audience: (!settings.auth_jwt_audience.is_empty()).then(|| settings.auth_jwt_audience.clone()),
        casbin_model: path(&settings.auth_casbin_model),
        casbin_policy: path(&settings.auth_casbin_policy),
    };
    let auth = crate::auth::Authenticator::new(&auth).map_err(std::io::Error::other)?;
    Ok(Arc::new(Global {
        auth: Arc::new(auth),
        admin: (0..shards).map(|_| Arc::new(crossbeam_queue::ArrayQueue::new(64))).collect(),
        settings,
        connections: AtomicUsize::new(0),
        shard_connections: (0..shards).map(|_| AtomicUsize::new(0)).collect(),
        shutting_down: AtomicBool::new(false),
        ready: AtomicUsize::new(0),
        recovered: std::sync::Mutex::new(Vec::new()),
        events_dir: Arc::new(crate::broker::directory::EventsDirectory::default()),
        store_ok: (0..shards).map(|_| Arc::new(AtomicBool::new(true))).collect(),
    }))
}

/// Run the broker until `global.shutting_down` is set and every shard has closed its
/// connections.
pub fn serve(global: Arc<Global>) -> std::io::Result<()> {
    if !global.settings.enable {
        tracing::warn!("CONNECTORS_AMQP10_ENABLE=false: no AMQP listener; serving admin endpoints only");
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
