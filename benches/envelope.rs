//! Scheduled-message envelope: parsing the headers of a proxy record (what the scheduler daemon
//! does for every record it loads), building a proxy (what `schedule()` does), and the headers of
//! a dispatched target, handed over borrowed (what the daemon does) or collected as owned copies
//! (what it did before: two allocations per header).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ferrokafka_core::codec::envelope::{
    Envelope, ProxySource, ScheduleLimits, TargetAddress, TargetMessage, parse_proxy_headers,
    schedule_proxy, visit_dispatch_headers,
};

const NOW: i64 = 1_700_000_000;

fn target() -> TargetMessage {
    TargetMessage {
        address: TargetAddress {
            topic: "orders".into(),
            partition: Some(3),
            key: Some("order-123456".into()),
            partition_key: None,
        },
        payload: Some(vec![b'x'; 512]),
        headers: vec![
            (
                "traceparent".into(),
                b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_vec(),
            ),
            ("content-type".into(), b"application/json".to_vec()),
        ],
    }
}

fn envelope_benches(c: &mut Criterion) {
    let envelope = Envelope {
        topic: "schedules".into(),
        ..Envelope::default()
    };
    let limits = ScheduleLimits::default();
    let proxy = schedule_proxy(&target(), NOW + 3600, &envelope, [9; 16], NOW, &limits)
        .expect("valid proxy");
    c.bench_function("envelope_parse_proxy_headers", |b| {
        b.iter(|| parse_proxy_headers(black_box(&proxy.headers)))
    });
    let source = ProxySource {
        topic: "schedules",
        partition: 3,
        offset: 123_456,
        key: "order-123456",
    };
    let pairs = || {
        proxy
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_slice()))
    };
    c.bench_function("envelope_dispatch_headers_borrowed", |b| {
        b.iter(|| {
            let mut bytes = 0;
            visit_dispatch_headers(pairs(), black_box(&source), |name, value| {
                bytes += name.len() + value.len();
            });
            bytes
        })
    });
    c.bench_function("envelope_dispatch_headers_owned", |b| {
        b.iter(|| {
            let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
            visit_dispatch_headers(pairs(), black_box(&source), |name, value| {
                headers.push((name.to_owned(), value.to_vec()));
            });
            headers
        })
    });
    let message = target();
    c.bench_function("envelope_build_schedule_proxy", |b| {
        b.iter(|| {
            schedule_proxy(
                black_box(&message),
                NOW + 3600,
                &envelope,
                [9; 16],
                NOW,
                &limits,
            )
        })
    });
}

criterion_group!(benches, envelope_benches);
criterion_main!(benches);
