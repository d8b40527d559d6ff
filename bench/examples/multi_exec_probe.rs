//! One run of the server suite's MULTI/EXEC workload against a running
//! server, for profiling it alone: `multi_exec_probe ADDR CLIENTS TRANSACTIONS`
//! prints transactions per second (each MULTI, ten SETs, EXEC, waiting for
//! the answer, as `kivi bench --server` runs it):
//! `cargo run --release -p kivi-bench --example multi_exec_probe -- 127.0.0.1:6379 50 50000`

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = &args[1];
    let clients: usize = args[2].parse().unwrap();
    let total: u64 = args[3].parse().unwrap();
    let r = kivi_bench::resp_workloads::multi_exec(addr, clients, total).unwrap();
    println!("{r:.0}");
}
