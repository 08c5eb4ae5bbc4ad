//! Holder crate for the criterion benches in `benches/*.rs` (run with `cargo bench`), plus the
//! deterministic workload helpers they share.
//!
//! Invariants: helpers are deterministic (seeded generators), so every run measures the same
//! operations.

/// A xorshift64* generator: fast, deterministic, good enough for benchmark workloads.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed (zero is replaced by a fixed constant).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..bound` (`bound > 0`).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}
