//! `Batch.to_arrow()`'s Rust half: 1,024 consumed records of 100 B (a keyed record, no
//! headers, one topic name: the consumer's run size and the consumer bench's records) pushed
//! into `RecordRows` and finished into Arrow-layout columns. What is left per record here is
//! what every `to_arrow()` call pays before pyarrow sees the buffers.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ferrokafka_core::codec::columnar::ColumnBuilder;
use ferrokafka_core::codec::records::{RecordFields, RecordRows};

const ROWS: usize = 1_024;

fn record_rows_benches(c: &mut Criterion) {
    let keys: Vec<Vec<u8>> = (0..ROWS).map(|n| format!("k{n}").into_bytes()).collect();
    let value = vec![b'x'; 100];
    let topic = "bench-consumer-3ccbc381";
    let mut group = c.benchmark_group("record_rows_1024_x_100B");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("push_and_finish", |b| {
        b.iter(|| {
            let mut rows = RecordRows::with_capacity(
                ROWS,
                keys.iter().map(Vec::len).sum(),
                ROWS * value.len(),
                ROWS * topic.len(),
            );
            for (offset, key) in (0_i64..).zip(&keys) {
                rows.push(RecordFields {
                    key: Some(key.as_slice()),
                    value: Some(value.as_slice()),
                    topic,
                    partition: 3,
                    offset,
                    timestamp_ms: Some(1_764_000_000_000 + offset),
                    headers: [],
                });
            }
            black_box(rows.finish())
        })
    });
    group.finish();
}

criterion_group!(benches, record_rows_benches);
criterion_main!(benches);
