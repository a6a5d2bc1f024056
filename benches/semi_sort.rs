//! What the cuckoo filter paper's semi-sorting would cost a snapshot's buckets
//! (`cargo bench --bench semi_sort`). The snapshot format does not use it; this measures it on
//! a real filter's bucket words to decide whether it could be had for free at load time.
//!
//! Semi-sorting orders a bucket's four 16-bit fingerprints and stores their top 4 bits as the
//! index of that sorted quadruple among the 3,876 possible ones (12 bits instead of 16), then
//! the four low 12-bit parts: 60 bits a bucket instead of 64, packed into a bit stream.
//!
//! Groups (`Throughput::Bytes`, the plain words' size; id: keys):
//! - `semi_sort/plain_decode`: the format's own decoding, little-endian words into `u64`s.
//! - `semi_sort/encode`: sort, index, pack.
//! - `semi_sort/decode`: unpack, look the index up, rebuild the words.
//!
//! `CG_SNAPSHOT_KEYS` (one count) replaces the default 10 million keys.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use cuckoo_guard::CuckooFilter;

/// The sorted quadruples of 4-bit values, in order: entry `i` packs the quadruple of index `i`
/// (first value in the low nibble).
fn quadruples() -> Vec<u16> {
    let mut all = Vec::with_capacity(3876);
    for a in 0..16u16 {
        for b in a..16 {
            for c in b..16 {
                for d in c..16 {
                    all.push(a | b << 4 | c << 8 | d << 12);
                }
            }
        }
    }
    all
}

struct Codec {
    /// Index to packed quadruple.
    quads: Vec<u16>,
    /// Packed sorted quadruple to index (other entries unused).
    index: Vec<u16>,
}

impl Codec {
    fn new() -> Codec {
        let quads = quadruples();
        assert_eq!(quads.len(), 3876);
        let mut index = vec![0u16; 1 << 16];
        for (i, &q) in quads.iter().enumerate() {
            index[q as usize] = i as u16;
        }
        Codec { quads, index }
    }

    /// A bucket word's 60-bit code.
    #[inline]
    fn encode_word(&self, word: u64) -> u64 {
        let mut f = [
            word as u16,
            (word >> 16) as u16,
            (word >> 32) as u16,
            (word >> 48) as u16,
        ];
        // A sorting network of five compare-exchanges.
        for (i, j) in [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)] {
            if f[i] > f[j] {
                f.swap(i, j);
            }
        }
        let quad = f[0] >> 12 | (f[1] >> 12) << 4 | (f[2] >> 12) << 8 | (f[3] >> 12) << 12;
        let mut code = u64::from(self.index[quad as usize]);
        for (k, fp) in f.iter().enumerate() {
            code |= u64::from(fp & 0xFFF) << (12 + 12 * k);
        }
        code
    }

    /// The word of a 60-bit code (its fingerprints in ascending order).
    #[inline]
    fn decode_word(&self, code: u64) -> u64 {
        let quad = u64::from(self.quads[(code & 0xFFF) as usize]);
        let mut word = 0;
        for k in 0..4 {
            let high = (quad >> (4 * k)) & 0xF;
            let low = (code >> (12 + 12 * k)) & 0xFFF;
            word |= (high << 12 | low) << (16 * k);
        }
        word
    }

    /// Packs the words' codes, 60 bits each, little-endian.
    fn encode(&self, words: &[u64], out: &mut Vec<u8>) {
        out.clear();
        let (mut buffer, mut bits) = (0u128, 0u32);
        for &word in words {
            buffer |= u128::from(self.encode_word(word)) << bits;
            bits += 60;
            if bits >= 64 {
                out.extend_from_slice(&(buffer as u64).to_le_bytes());
                buffer >>= 64;
                bits -= 64;
            }
        }
        out.extend_from_slice(&buffer.to_le_bytes()[..bits.div_ceil(8) as usize]);
    }

    /// Unpacks `out.len()` words from `bytes`.
    fn decode(&self, bytes: &[u8], out: &mut [u64]) {
        let (mut buffer, mut bits, mut at) = (0u128, 0u32, 0usize);
        for word in out.iter_mut() {
            if bits < 60 {
                let mut chunk = [0u8; 8];
                let n = (bytes.len() - at).min(8);
                chunk[..n].copy_from_slice(&bytes[at..at + n]);
                at += n;
                buffer |= u128::from(u64::from_le_bytes(chunk)) << bits;
                bits += 64;
            }
            *word = self.decode_word(buffer as u64 & ((1 << 60) - 1));
            buffer >>= 60;
            bits -= 60;
        }
    }
}

/// The bucket words of a seeded 16-bit filter of `keys` keys: the words section of its
/// snapshot (one table, no extras: after the 128-byte header, before the extras count, the
/// checkpoint and the trailer).
fn words(keys: u64) -> Vec<u64> {
    let filter = CuckooFilter::builder()
        .capacity(keys as usize)
        .seed(1)
        .build()
        .unwrap();
    for k in 0..keys {
        filter.insert(&k).unwrap();
    }
    let mut bytes = Vec::new();
    filter.write_snapshot(&mut bytes).unwrap();
    bytes[128..bytes.len() - 32]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A word with its four 16-bit lanes in ascending order.
fn sorted_lanes(word: u64) -> u64 {
    let mut lanes: Vec<u64> = (0..4).map(|k| (word >> (16 * k)) & 0xFFFF).collect();
    lanes.sort_unstable();
    lanes.iter().enumerate().map(|(k, l)| l << (16 * k)).sum()
}

fn semi_sort(c: &mut Criterion) {
    let keys = std::env::var("CG_SNAPSHOT_KEYS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(10_000_000u64);
    let codec = Codec::new();
    let words = words(keys);
    let plain: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut packed = Vec::new();
    codec.encode(&words, &mut packed);
    let mut decoded = vec![0u64; words.len()];
    codec.decode(&packed, &mut decoded);
    assert!(
        words
            .iter()
            .zip(&decoded)
            .all(|(&w, &d)| sorted_lanes(w) == d),
        "the codec loses fingerprints"
    );
    println!(
        "semi_sort: {} buckets, {} bytes plain, {} bytes packed ({:.2}% smaller)",
        words.len(),
        plain.len(),
        packed.len(),
        100.0 * (1.0 - packed.len() as f64 / plain.len() as f64)
    );

    let mut group = c.benchmark_group("semi_sort");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(plain.len() as u64));
    let id = format!("{}M", keys / 1_000_000);
    group.bench_function(BenchmarkId::new("plain_decode", &id), |b| {
        b.iter(|| {
            for (word, chunk) in decoded.iter_mut().zip(plain.chunks_exact(8)) {
                *word = u64::from_le_bytes(chunk.try_into().unwrap());
            }
            black_box(&decoded);
        })
    });
    let mut out = Vec::with_capacity(packed.len());
    group.bench_function(BenchmarkId::new("encode", &id), |b| {
        b.iter(|| {
            codec.encode(black_box(&words), &mut out);
            black_box(&out);
        })
    });
    group.bench_function(BenchmarkId::new("decode", &id), |b| {
        b.iter(|| {
            codec.decode(black_box(&packed), &mut decoded);
            black_box(&decoded);
        })
    });
    group.finish();
}

criterion_group!(benches, semi_sort);
criterion_main!(benches);
