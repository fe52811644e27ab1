#![no_main]

#[path = "../sse_checks.rs"]
mod sse_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| sse_checks::sse_decoders(data));
