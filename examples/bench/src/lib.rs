//! Benchmarks live in `benches/peers.rs`.
