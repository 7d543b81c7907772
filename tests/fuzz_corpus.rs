//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) and any recorded
//! crashes (`fuzz/crashes/<target>/`) through the same harness functions that the
//! cargo-fuzz targets run, so that plain `cargo test` keeps every input the fuzzer
//! found interesting passing.
//!
//! Regenerate the seed inputs with
//! `cargo test --test fuzz_corpus -- --ignored generate_seed_corpus`.

/// The `broker` target: a whole broker in-process, inputs over loopback sockets.
#[path = "../fuzz/broker_harness.rs"]
mod broker_harness;
#[path = "../fuzz/harness.rs"]
mod harness;
#[path = "../fuzz/seeds.rs"]
mod seeds;
/// The `store` target: crash recovery over segment files built from the input.
#[path = "../fuzz/store_harness.rs"]
mod store_harness;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// A harness function.
type Harness = fn(&[u8]);

const TARGETS: [(&str, Harness); 3] =
    [("frame_decode", harness::frame_decode), ("value_decode", harness::value_decode), ("engine", harness::engine)];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The regular files of `dir`, sorted; empty when the directory does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

/// Run `f` on every input, collecting the ones that panic.
fn run_all(inputs: impl IntoIterator<Item = (String, Vec<u8>)>, f: fn(&[u8])) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut n = 0;
    for (name, data) in inputs {
        n += 1;
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(&data))) {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let hex: String = data.iter().take(64).map(|b| format!("{b:02x}")).collect();
            failures.push(format!("{name} ({} bytes, starts {hex}): {msg}", data.len()));
        }
    }
    (n, failures)
}

fn read_inputs(files: &[PathBuf]) -> Vec<(String, Vec<u8>)> {
    files
        .iter()
        .map(|p| match std::fs::read(p) {
            Ok(data) => (p.display().to_string(), data),
            Err(e) => panic!("cannot read {}: {e}", p.display()),
        })
        .collect()
}

fn replay(target: &str) {
    let f = TARGETS.iter().find(|(n, _)| *n == target).map(|(_, f)| *f);
    let Some(f) = f else { panic!("unknown target {target}") };
    replay_with(target, f);
}

fn replay_with(target: &str, f: Harness) {
    let corpus = files_in(&fuzz_dir().join("corpus").join(target));
    assert!(!corpus.is_empty(), "fuzz/corpus/{target}/ is missing or empty: the corpus replay would test nothing");
    let crashes = files_in(&fuzz_dir().join("crashes").join(target));
    let (n, failures) = run_all(read_inputs(&corpus).into_iter().chain(read_inputs(&crashes)), f);
    assert!(failures.is_empty(), "{target}: {} of {n} inputs panicked:\n{}", failures.len(), failures.join("\n"));
    eprintln!("{target}: replayed {} corpus and {} crash inputs", corpus.len(), crashes.len());
}

#[test]
fn replay_frame_decode_corpus() {
    replay("frame_decode");
}

#[test]
fn replay_value_decode_corpus() {
    replay("value_decode");
}

#[test]
fn replay_engine_corpus() {
    replay("engine");
}

/// Starts the broker in this test process (once) and plays every input to it.
#[test]
fn replay_broker_corpus() {
    replay_with("broker", broker_harness::broker);
    assert!(broker_harness::healthy(broker_harness::broker_addr()), "broker unhealthy after the replay");
}

#[test]
fn replay_store_corpus() {
    replay_with("store", store_harness::store);
}

#[test]
fn store_seeds_pass_their_harness() {
    seeds_pass("store", store_harness::seeds(), store_harness::store);
}

#[test]
fn broker_seeds_pass_their_harness() {
    seeds_pass("broker", broker_harness::seeds(), broker_harness::broker);
}

/// The seed generator itself stays in working order (and its inputs pass).
#[test]
fn seeds_pass_their_harness() {
    for (target, f) in TARGETS {
        seeds_pass(target, seeds::seeds_for(target), f);
    }
}

/// A target's seeds are at least ten and none panics.
fn seeds_pass(target: &str, seeds: Vec<(String, Vec<u8>)>, f: Harness) {
    assert!(seeds.len() >= 10, "{target}: only {} seeds", seeds.len());
    let (n, failures) = run_all(seeds, f);
    assert!(failures.is_empty(), "{target}: {} of {n} seeds panicked:\n{}", failures.len(), failures.join("\n"));
}

/// Write `seeds` into `fuzz/corpus/<target>/seed-<name>`.
fn write_seeds(target: &str, seeds: &[(String, Vec<u8>)]) {
    let dir = fuzz_dir().join("corpus").join(target);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("cannot create {}: {e}", dir.display());
    }
    for (name, data) in seeds {
        let path = dir.join(format!("seed-{name}"));
        if let Err(e) = std::fs::write(&path, data) {
            panic!("cannot write {}: {e}", path.display());
        }
    }
    eprintln!("{target}: wrote {} seeds to {}", seeds.len(), dir.display());
}

/// Write the seeds into `fuzz/corpus/<target>/seed-<name>` (run on demand).
#[test]
#[ignore = "writes files: run with --ignored to regenerate the seed corpus"]
fn generate_seed_corpus() {
    for (target, _) in TARGETS {
        write_seeds(target, &seeds::seeds_for(target));
    }
}

/// Write the `broker` seeds into `fuzz/corpus/broker/seed-<name>` (run on demand).
#[test]
#[ignore = "writes files: run with --ignored to regenerate the broker seed corpus"]
fn generate_broker_seed_corpus() {
    write_seeds("broker", &broker_harness::seeds());
}

/// Write the `store` seeds into `fuzz/corpus/store/seed-<name>` (run on demand).
#[test]
#[ignore = "writes files: run with --ignored to regenerate the store seed corpus"]
fn generate_store_seed_corpus() {
    write_seeds("store", &store_harness::seeds());
}
