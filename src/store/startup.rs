//! Start-up recovery of every shard's logs, and the `sluice store` commands.

use super::recovery::{recover, Mode, RecoveredShard};
use crate::config::Settings;
use std::path::Path;
use std::time::Instant;

const META: &str = "META";

/// The shard count the data directory was written with, if any.
fn meta_shards(data_dir: &Path) -> std::io::Result<Option<usize>> {
    match std::fs::read_to_string(data_dir.join(META)) {
        Ok(text) => Ok(text.lines().find_map(|l| l.strip_prefix("shards=")).and_then(|n| n.trim().parse().ok())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn write_meta(data_dir: &Path, shards: usize) -> std::io::Result<()> {
    let tmp = data_dir.join("META.tmp");
    std::fs::write(&tmp, format!("format=1\nshards={shards}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, data_dir.join(META))?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// Recover every shard's logs (torn tails are cut; corruption stops start-up with
/// the file and offset). Logs what was found and how long it took.
pub fn recover_all(settings: &Settings) -> std::io::Result<Vec<RecoveredShard>> {
    let dir = &settings.data_dir;
    std::fs::create_dir_all(dir)
        .map_err(|e| std::io::Error::other(format!("data directory {}: {e}", dir.display())))?;
    match meta_shards(dir)? {
        Some(n) if n != settings.shards => {
            return Err(std::io::Error::other(format!(
                "data directory {} was written by {n} shard(s); start with SLUICE_SHARDS={n} (channels are placed by shard count)",
                dir.display()
            )))
        }
        Some(_) => {}
        None => write_meta(dir, settings.shards)?,
    }
    let started = Instant::now();
    let mut all = Vec::with_capacity(settings.shards);
    let (mut records, mut bytes, mut messages, mut events) = (0u64, 0u64, 0usize, 0usize);
    for shard in 0..settings.shards {
        let r = recover(dir, shard, Mode::Start).map_err(|e| std::io::Error::other(e.to_string()))?;
        for (file, offset, dropped) in &r.torn {
            tracing::warn!(file = %file.display(), offset, dropped, "cut a torn tail (an unfinished last commit)");
        }
        for file in &r.unwritten {
            tracing::warn!(file = %file.display(), "deleted a segment nothing was ever written to (an unfinished or failed commit)");
        }
        records += r.records;
        bytes += r.bytes;
        messages += r.queues.values().map(|q| q.len()).sum::<usize>();
        events += r.events.values().map(|e| e.len()).sum::<usize>();
        all.push(r);
    }
    tracing::info!(
        records,
        bytes,
        queue_messages = messages,
        events,
        millis = started.elapsed().as_millis() as u64,
        "store recovered"
    );
    Ok(all)
}

/// `sluice store verify` (read-only) or `sluice store repair` (cut torn tails and
/// corruption). Returns the process exit code.
pub fn command(settings: &Settings, repair: bool) -> i32 {
    let dir = &settings.data_dir;
    let shards = match meta_shards(dir) {
        Ok(Some(n)) => n,
        Ok(None) => settings.shards,
        Err(e) => {
            eprintln!("sluice store: {}: {e}", dir.join(META).display());
            return 1;
        }
    };
    let mode = if repair { Mode::Repair } else { Mode::Verify };
    let mut ok = true;
    for shard in 0..shards {
        match recover(dir, shard, mode) {
            Ok(r) => {
                let messages: usize = r.queues.values().map(|q| q.len()).sum();
                let events: usize = r.events.values().map(|e| e.len()).sum();
                println!(
                    "shard {shard}: {} records, {} bytes, {} queue messages, {} events, {} queue segments, {} events segments",
                    r.records,
                    r.bytes,
                    messages,
                    events,
                    r.queue_log.sizes.len(),
                    r.events_log.sizes.len()
                );
                for (file, offset, dropped) in &r.torn {
                    let verb = if repair { "cut" } else { "torn tail (start-up cuts it)" };
                    println!("  {verb}: {} at offset {offset} ({dropped} bytes)", file.display());
                }
                for file in &r.unwritten {
                    let verb = if repair { "deleted" } else { "never written (start-up deletes it)" };
                    println!("  {verb}: {}", file.display());
                }
            }
            Err(e) => {
                ok = false;
                println!("shard {shard}: {e}");
            }
        }
    }
    if ok {
        println!("store {}", if repair { "repaired" } else { "verified" });
        0
    } else {
        1
    }
}
