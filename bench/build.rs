//! Links Debian's RocksDB and LevelDB when the `peers` feature is on.
fn main() {
    if std::env::var_os("CARGO_FEATURE_PEERS").is_some() {
        println!("cargo:rustc-link-lib=dylib=rocksdb");
        println!("cargo:rustc-link-lib=dylib=leveldb");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
