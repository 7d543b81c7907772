#![no_main]
#[path = "../broker_harness.rs"]
mod broker_harness;
libfuzzer_sys::fuzz_target!(|data: &[u8]| broker_harness::broker(data));
