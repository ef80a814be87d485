//! A small deterministic generator (xorshift64*) for the model tests,
//! seeded per round.
#![allow(dead_code)]

/// xorshift64*: the same sequence for the same (non-zero) seed.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}
