//! Scheduled-message envelope: parsing the headers of a proxy record (what the scheduler daemon
//! does for every record it loads) and building a proxy (what `schedule()` does).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ferrokafka_core::codec::envelope::{
    Envelope, ScheduleLimits, TargetAddress, TargetMessage, parse_proxy_headers, schedule_proxy,
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
