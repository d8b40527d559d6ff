#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kivi_fuzz_targets::log_record_body(data));
