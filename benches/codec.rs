//! zlib backends on report-like JSON (the payloads of process and state reports) at 1 KB, 10 KB
//! and 100 KB, level 6: the core's codec (flate2 on zlib-rs, bounded streaming inflate) against
//! miniz_oxide (flate2's default backend), libdeflate and zlib-ng (C, one-shot calls).
//!
//! The other backends get their best case: libdeflate and zlib-ng inflate into a buffer of the
//! exact known size, miniz_oxide into a growing one with a limit, where the core streams with a
//! limit and no size hint.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ferrokafka_benches::Rng;
use ferrokafka_core::codec::zlib;
use serde_json::{Value, json};

const LEVEL: u32 = 6;
const LIMIT: usize = 16 << 20;

/// A Karafka-Web-like process report with enough partitions to reach `target_bytes` of JSON.
fn report_json(target_bytes: usize) -> Vec<u8> {
    let mut rng = Rng::new(7);
    let mut partitions = serde_json::Map::new();
    let mut report = Vec::new();
    for id in 0u64.. {
        let hi = 1_000_000 + rng.below(9_000_000);
        let committed = hi - rng.below(5_000);
        partitions.insert(
            id.to_string(),
            json!({
                "id": id, "lag": hi - committed, "lag_stored": rng.below(100),
                "committed_offset": committed, "stored_offset": committed + rng.below(50),
                "hi_offset": hi, "lo_offset": rng.below(1000),
                "fetch_state": "active", "poll_state": if rng.below(10) == 0 { "paused" } else { "active" },
            }),
        );
        let document = json!({
            "schema_version": "1.0.0", "type": "consumer", "dispatched_at": 1_700_000_000.123,
            "process": {
                "id": format!("worker-{}.prod.internal:{}:{:x}", rng.below(50), 1000 + rng.below(60_000), rng.next_u64()),
                "status": "running", "started_at": 1_699_990_000.5, "memory_usage": 182_344,
                "memory_total_usage": 7_734_112, "memory_size": 16_314_368, "cpus": 2, "threads": 14,
                "cpu_usage": [0.42, 0.37, 0.31], "tags": ["billing", "eu-west-1"],
            },
            "stats": {
                "busy": 2, "enqueued": 0, "utilization": 37.5, "lag": 1234, "lag_stored": 12,
                "total": {"batches": 12_345, "messages": 987_654, "errors": 3, "retries": 7, "dead": 1},
            },
            "consumer_groups": {"billing": {"id": "billing", "topics": {"orders": {"name": "orders", "partitions": Value::Object(partitions.clone())}}}},
            "jobs": [{"consumer_group": "billing", "topic": "orders", "partition": 0, "first_offset": 100, "last_offset": 164,
                      "committed_offset": 99, "messages": 64, "type": "consume", "updated_at": 1_700_000_000.1}],
        });
        report = serde_json::to_vec(&document).unwrap_or_default();
        if report.len() >= target_bytes {
            break;
        }
    }
    report
}

fn libdeflate_compress(data: &[u8]) -> Vec<u8> {
    let mut compressor = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
    let mut out = vec![0; compressor.zlib_compress_bound(data.len())];
    let written = compressor.zlib_compress(data, &mut out).unwrap_or(0);
    out.truncate(written);
    out
}

fn libdeflate_decompress(data: &[u8], size: usize) -> Vec<u8> {
    let mut out = vec![0; size];
    let written = libdeflater::Decompressor::new()
        .zlib_decompress(data, &mut out)
        .unwrap_or(0);
    out.truncate(written);
    out
}

#[allow(unsafe_code)]
fn zlib_ng_compress(data: &[u8]) -> Vec<u8> {
    // SAFETY: the buffers are valid for the lengths passed; zlib-ng writes at most `len` bytes.
    unsafe {
        let mut len = libz_ng_sys::compressBound(data.len());
        let mut out = vec![0u8; len];
        libz_ng_sys::compress2(
            out.as_mut_ptr(),
            &mut len,
            data.as_ptr(),
            data.len(),
            LEVEL as i32,
        );
        out.truncate(len);
        out
    }
}

#[allow(unsafe_code)]
fn zlib_ng_decompress(data: &[u8], size: usize) -> Vec<u8> {
    let mut out = vec![0u8; size];
    let mut len = size;
    // SAFETY: as above; `len` is the capacity of `out` and is updated to the bytes written.
    unsafe {
        libz_ng_sys::uncompress(out.as_mut_ptr(), &mut len, data.as_ptr(), data.len());
    }
    out.truncate(len);
    out
}

fn codec_benches(c: &mut Criterion) {
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("1KB", report_json(1_000)),
        ("10KB", report_json(10_000)),
        ("100KB", report_json(100_000)),
    ];
    for (name, json) in &inputs {
        let core = zlib::deflate(json, LEVEL).unwrap_or_default();
        let miniz = miniz_oxide::deflate::compress_to_vec_zlib(json, LEVEL as u8);
        let libdeflate = libdeflate_compress(json);
        let zlib_ng = zlib_ng_compress(json);
        for packed in [&core, &miniz, &libdeflate, &zlib_ng] {
            assert_eq!(
                zlib::inflate(packed, LIMIT).ok().as_ref(),
                Some(json),
                "interoperable"
            );
        }
        eprintln!(
            "{name}: json {} B -> core {} B, miniz_oxide {} B, libdeflate {} B, zlib-ng {} B",
            json.len(),
            core.len(),
            miniz.len(),
            libdeflate.len(),
            zlib_ng.len()
        );
    }

    let mut group = c.benchmark_group("zlib_deflate");
    for (name, json) in &inputs {
        group.throughput(Throughput::Bytes(json.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("core(flate2+zlib-rs)", name),
            json,
            |b, json| b.iter(|| zlib::deflate(black_box(json), LEVEL)),
        );
        group.bench_with_input(BenchmarkId::new("miniz_oxide", name), json, |b, json| {
            b.iter(|| miniz_oxide::deflate::compress_to_vec_zlib(black_box(json), LEVEL as u8))
        });
        group.bench_with_input(BenchmarkId::new("libdeflate", name), json, |b, json| {
            b.iter(|| libdeflate_compress(black_box(json)))
        });
        group.bench_with_input(BenchmarkId::new("zlib-ng", name), json, |b, json| {
            b.iter(|| zlib_ng_compress(black_box(json)))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("zlib_inflate");
    for (name, json) in &inputs {
        let packed = zlib::deflate(json, LEVEL).unwrap_or_default();
        let size = json.len();
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(
            BenchmarkId::new("core(flate2+zlib-rs)", name),
            &packed,
            |b, packed| b.iter(|| zlib::inflate(black_box(packed), LIMIT)),
        );
        group.bench_with_input(
            BenchmarkId::new("miniz_oxide", name),
            &packed,
            |b, packed| {
                b.iter(|| {
                    miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(
                        black_box(packed),
                        LIMIT,
                    )
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("libdeflate", name),
            &packed,
            |b, packed| b.iter(|| libdeflate_decompress(black_box(packed), size)),
        );
        group.bench_with_input(BenchmarkId::new("zlib-ng", name), &packed, |b, packed| {
            b.iter(|| zlib_ng_decompress(black_box(packed), size))
        });
    }
    group.finish();
}

criterion_group!(benches, codec_benches);
criterion_main!(benches);
