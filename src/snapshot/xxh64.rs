//! XXH64 (Yann Collet's xxHash, 64-bit variant), streaming: the snapshot checksum.
//!
//! Written here rather than taken from ahash, whose output differs between builds and
//! versions, because a checksum must mean the same thing to every build that reads the file;
//! and rather than from a crate, because the library's default build depends on nothing else.
//! The tests check it against the reference implementation's published values and against
//! the `xxhash-rust` crate.

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

#[inline(always)]
fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

#[inline(always)]
fn merge(acc: u64, val: u64) -> u64 {
    (acc ^ round(0, val)).wrapping_mul(P1).wrapping_add(P4)
}

#[inline(always)]
fn read_u64(bytes: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(word)
}

/// A streaming XXH64 state.
#[derive(Debug, Clone)]
pub(crate) struct Xxh64 {
    seed: u64,
    acc: [u64; 4],
    /// Bytes not yet consumed as a whole 32-byte stripe.
    pending: [u8; 32],
    pending_len: usize,
    total: u64,
}

impl Xxh64 {
    pub(crate) fn new(seed: u64) -> Self {
        Xxh64 {
            seed,
            acc: [
                seed.wrapping_add(P1).wrapping_add(P2),
                seed.wrapping_add(P2),
                seed,
                seed.wrapping_sub(P1),
            ],
            pending: [0; 32],
            pending_len: 0,
            total: 0,
        }
    }

    #[inline(always)]
    fn stripe(acc: &mut [u64; 4], stripe: &[u8]) {
        acc[0] = round(acc[0], read_u64(&stripe[0..]));
        acc[1] = round(acc[1], read_u64(&stripe[8..]));
        acc[2] = round(acc[2], read_u64(&stripe[16..]));
        acc[3] = round(acc[3], read_u64(&stripe[24..]));
    }

    pub(crate) fn update(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.pending_len > 0 {
            let take = (32 - self.pending_len).min(bytes.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&bytes[..take]);
            self.pending_len += take;
            bytes = &bytes[take..];
            if self.pending_len < 32 {
                return;
            }
            let pending = self.pending;
            Self::stripe(&mut self.acc, &pending);
            self.pending_len = 0;
        }
        let mut stripes = bytes.chunks_exact(32);
        let mut acc = self.acc;
        for stripe in &mut stripes {
            Self::stripe(&mut acc, stripe);
        }
        self.acc = acc;
        let rest = stripes.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    pub(crate) fn digest(&self) -> u64 {
        let [v1, v2, v3, v4] = self.acc;
        let mut h = if self.total >= 32 {
            let h = v1
                .rotate_left(1)
                .wrapping_add(v2.rotate_left(7))
                .wrapping_add(v3.rotate_left(12))
                .wrapping_add(v4.rotate_left(18));
            merge(merge(merge(merge(h, v1), v2), v3), v4)
        } else {
            self.seed.wrapping_add(P5)
        };
        h = h.wrapping_add(self.total);
        let mut rest = &self.pending[..self.pending_len];
        while rest.len() >= 8 {
            h ^= round(0, read_u64(rest));
            h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
            rest = &rest[8..];
        }
        if rest.len() >= 4 {
            let word = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            h ^= u64::from(word).wrapping_mul(P1);
            h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
            rest = &rest[4..];
        }
        for &byte in rest {
            h ^= u64::from(byte).wrapping_mul(P5);
            h = h.rotate_left(11).wrapping_mul(P1);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(P2);
        h ^= h >> 29;
        h = h.wrapping_mul(P3);
        h ^ (h >> 32)
    }
}

/// XXH64 of `bytes` in one call.
pub(crate) fn xxh64(bytes: &[u8], seed: u64) -> u64 {
    let mut state = Xxh64::new(seed);
    state.update(bytes);
    state.digest()
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_values() {
        // From the xxHash reference implementation's documentation and test suite.
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
    }

    #[test]
    fn matches_xxhash_rust_for_every_length_and_split() {
        let data: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in 0..data.len() {
            for seed in [0, 1, 0x9E37_79B9_7F4A_7C15] {
                let expected = xxhash_rust::xxh64::xxh64(&data[..len], seed);
                assert_eq!(xxh64(&data[..len], seed), expected, "len {len}");
                for split in [1, 7, 31, 32, 33, len / 2] {
                    let split = split.min(len);
                    let mut state = Xxh64::new(seed);
                    state.update(&data[..split]);
                    state.update(&data[split..len]);
                    assert_eq!(state.digest(), expected, "len {len} split {split}");
                }
            }
        }
    }
}
