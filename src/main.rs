//! sluice: a thread-per-core AMQP 1.0 broker for Linux on glommio (io_uring).

use sluice::config::{self, Command, LogFormat, Settings};
use sluice::shard::Global;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "store") {
        // `sluice store verify|repair [flags]`: the store's offline tools.
        let repair = match args.get(1).map(String::as_str) {
            Some("verify") => false,
            Some("repair") => true,
            _ => {
                eprintln!("sluice: usage: sluice store verify|repair [--data-dir DIR] [--shards N]");
                std::process::exit(2);
            }
        };
        let settings = match config::parse(&args[2..], &|k| std::env::var(k).ok()) {
            Ok(Command::Run(s)) => s,
            Ok(_) => Settings::default(),
            Err(e) => {
                eprintln!("sluice: {e}");
                std::process::exit(2);
            }
        };
        std::process::exit(sluice::store::startup::command(&settings, repair));
    }
    let command = match config::parse(&args, &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            std::process::exit(2);
        }
    };
    match command {
        Command::Help(text) => println!("{text}"),
        Command::Version => println!("sluice {}", env!("CARGO_PKG_VERSION")),
        Command::CheckConfig(s) => {
            if let Err(e) = sluice::server::check_files(&s) {
                eprintln!("sluice: {e}");
                std::process::exit(2);
            }
            println!(
                "configuration is valid: {} shard(s), AMQP on {}:{}, admin on {}",
                s.shards, s.host, s.port, s.admin_addr
            );
        }
        Command::Run(s) => {
            init_logging(s.log_format);
            let loaded = match sluice::server::check_files(&s) {
                Ok(loaded) => loaded,
                Err(e) => {
                    tracing::error!(error = %e, "invalid configuration");
                    eprintln!("sluice: {e}");
                    std::process::exit(2);
                }
            };
            if let Err(e) = run(s, loaded) {
                tracing::error!(error = %e, "sluice stopped");
                eprintln!("sluice: {e}");
                std::process::exit(1);
            }
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Human => builder.try_init(),
    };
}

fn run(settings: Settings, loaded: sluice::server::Loaded) -> std::io::Result<()> {
    let global = sluice::server::global_with(settings, loaded)?;
    install_signals(global.clone())?;
    sluice::server::serve(global)
}

/// SIGTERM/SIGINT: stop accepting, close every connection with
/// `amqp:connection:forced`, exit 0. A second signal exits at once.
fn install_signals(global: Arc<Global>) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])?;
    std::thread::Builder::new().name("sluice-signals".into()).spawn(move || {
        for _ in signals.forever() {
            if global.shutting_down.swap(true, Ordering::SeqCst) {
                std::process::exit(0);
            }
            tracing::info!("shutting down");
            // Never hang: exit even if a shard is stuck.
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_secs(5));
                std::process::exit(0);
            });
        }
    })?;
    Ok(())
}
