//! The Spark decoders' batch functions on one 10,000-row Arrow batch (Spark's default
//! `maxRecordsPerBatch`): `decode_state_batch` over scheduler state reports (a week of `daily`
//! counts, ~190 B as zlib, as the states topic carries them) and `inflate_batch` over the same
//! rows, and the documents alone decoded with a decompressor per row (`decode_document`) against
//! one for all rows (`DocumentDecoder`), in the same run. Per-row costs that do not depend on
//! the document's size (a decompressor's setup, a fresh output buffer) weigh on rows this small.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferrokafka_benches::Rng;
use ferrokafka_core::codec::columnar::BinaryView;
use ferrokafka_core::codec::json::{DocumentDecoder, decode_document};
use ferrokafka_core::codec::rows::{decode_state_batch, inflate_batch};
use ferrokafka_core::codec::state::StateReport;
use ferrokafka_core::codec::zlib;
use serde_json::json;

const ROWS: usize = 10_000;
const LIMIT: usize = 64 << 20;

/// A scheduler state report as the tracker writes it, zlib-compressed.
fn state_row(rng: &mut Rng) -> Vec<u8> {
    let daily: serde_json::Map<String, serde_json::Value> = (14..21)
        .map(|day| (format!("2026-11-{day}"), json!(rng.below(5_000))))
        .collect();
    let high = 1_000 + rng.below(1_000_000);
    let document = json!({
        "schema_version": "1.0.0", "dispatched_at": 1_764_000_000.0 + rng.below(86_400) as f64,
        "state": "loaded", "offsets": {"low": 0, "high": high}, "daily": daily,
        "started_at": 1_763_990_000u64, "reloads": rng.below(3), "skipped_records": 0,
        "dispatched": rng.below(100_000), "failed": rng.below(10),
    });
    zlib::deflate(&serde_json::to_vec(&document).unwrap_or_default(), 6).unwrap_or_default()
}

/// The offsets and data buffers of a binary Arrow array of `rows`.
fn binary_column(rows: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
    let mut offsets = Vec::with_capacity(4 * (rows.len() + 1));
    let mut data = Vec::new();
    offsets.extend_from_slice(&0i32.to_le_bytes());
    for row in rows {
        data.extend_from_slice(row);
        let end = i32::try_from(data.len()).unwrap_or(i32::MAX);
        offsets.extend_from_slice(&end.to_le_bytes());
    }
    (offsets, data)
}

fn decode_batch_benches(c: &mut Criterion) {
    let mut rng = Rng::new(11);
    let rows: Vec<Vec<u8>> = (0..ROWS).map(|_| state_row(&mut rng)).collect();
    let (offsets, data) = binary_column(&rows);
    let view = || BinaryView::new(None, &offsets, &data, 0, ROWS, false);
    eprintln!("state rows: {} B of zlib on average", data.len() / ROWS);

    let mut group = c.benchmark_group("spark_batch_10k_state_rows");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("decode_state_batch", |b| {
        b.iter(|| view().map(|input| decode_state_batch(black_box(&input), LIMIT)))
    });
    group.bench_function("inflate_batch", |b| {
        b.iter(|| view().map(|input| inflate_batch(black_box(&input), LIMIT, false)))
    });
    group.bench_function("decode_document_per_row", |b| {
        b.iter(|| {
            rows.iter()
                .map(|row| decode_document::<StateReport>(black_box(row), LIMIT))
                .filter(Result::is_ok)
                .count()
        })
    });
    group.bench_function("document_decoder_per_batch", |b| {
        b.iter(|| {
            let mut decoder = DocumentDecoder::default();
            rows.iter()
                .map(|row| decoder.decode::<StateReport>(black_box(row), LIMIT))
                .filter(Result::is_ok)
                .count()
        })
    });
    group.finish();
}

criterion_group!(benches, decode_batch_benches);
criterion_main!(benches);
