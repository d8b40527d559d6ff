//! One run of the server suite's expiring-cache workload against a running
//! kivi server, for profiling it alone: `expiring_probe ADDR RATE SECONDS`
//! sends RATE SETs a second of new keys with PX 10000 and prints what it saw
//! (rate kept, the files' peak over the live data, live keys at the end):
//! `cargo run --release -p kivi-bench --example expiring_probe -- 127.0.0.1:6379 100000 30`

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let r = kivi_bench::resp_workloads::expiring_cache(
        &args[1],
        args[2].parse().unwrap(),
        std::time::Duration::from_secs(10),
        args[3].parse().unwrap(),
    )
    .unwrap();
    println!("{r:?}");
}
