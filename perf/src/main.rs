//! `sluice-perf <scenario> [options]`: see `sluice-perf --help` and perf/README.md.

use sluice_perf::{opts, run};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match opts::Opts::parse(&args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            print!("{}", opts::USAGE);
            return;
        }
        Err(e) => {
            eprintln!("sluice-perf: {e}\n\n{}", opts::USAGE);
            std::process::exit(2);
        }
    };
    let as_json = opts.json;
    let report = run::run(opts);
    std::process::exit(run::print(&report, as_json));
}
