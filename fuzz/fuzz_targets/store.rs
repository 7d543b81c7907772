#![no_main]
#[path = "../store_harness.rs"]
mod store_harness;
libfuzzer_sys::fuzz_target!(|data: &[u8]| store_harness::store(data));
