//! The Scheduler's load-dispatch-tombstone cycle: schedules written before the daemon starts are
//! loaded from the schedules topic, schedules written after it loaded are applied as they come;
//! each is dispatched once, not before its epoch, to its target with its key and payload, and
//! retired by a tombstone on the schedules topic (same key and partition).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrokafka_core::codec::envelope::{
    Envelope, SOURCE_KEY_HEADER, SOURCE_OFFSET_HEADER, SOURCE_TYPE_HEADER, ScheduleLimits,
    TargetAddress, TargetMessage, schedule_proxy,
};
use ferrokafka_kafka::{Client, OutgoingRecord, Scheduler, SchedulerOptions};
use rdkafka::Timestamp;
use rdkafka::message::Message;

use crate::common::{Observer, Topics, WAIT, header, settings, unique, wait_until};

/// Karafka's schedules topic settings that matter here: compacted, so tombstones retire.
const SCHEDULES_CONFIG: &[(&str, &str)] = &[("cleanup.policy", "compact")];

/// A schedule the test wrote: the proxy's key, where the proxy landed, and when it is due.
struct Written {
    n: usize,
    proxy_key: String,
    partition: i32,
    offset: i64,
    epoch: i64,
}

fn now_secs() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    i64::try_from(now.as_secs()).expect("seconds fit")
}

/// Builds schedule `n` (target key `k<n>`, payload `m<n>`, due `delay` seconds from now) with the
/// core's codec and writes its proxy to `schedules` through ferrokafka's `Client`.
fn schedule(client: &Client, schedules: &str, target: &str, n: usize, delay: i64) -> Written {
    let now = now_secs();
    let epoch = now + delay;
    let message = TargetMessage {
        address: TargetAddress {
            topic: target.to_owned(),
            key: Some(format!("k{n}")),
            ..TargetAddress::default()
        },
        payload: Some(format!("m{n}").into_bytes()),
        headers: Vec::new(),
    };
    let envelope = Envelope {
        topic: schedules.to_owned(),
        key: Some(format!("proxy-{n}")),
        ..Envelope::default()
    };
    let proxy = schedule_proxy(
        &message,
        epoch,
        &envelope,
        [0; 16],
        now,
        &ScheduleLimits::default(),
    )
    .expect("a valid schedule");
    let record = OutgoingRecord {
        topic: proxy.topic,
        partition: proxy.partition,
        key: Some(proxy.key.clone().into_bytes()),
        value: proxy.payload,
        headers: proxy
            .headers
            .into_iter()
            .map(|(name, value)| (name, Some(value)))
            .collect(),
        timestamp_ms: None,
    };
    let partition_key = proxy.partition_key.as_deref().map(str::as_bytes);
    let stored = client
        .produce(&record, partition_key, WAIT)
        .expect("proxy written");
    Written {
        n,
        proxy_key: proxy.key,
        partition: stored.partition,
        offset: stored.offset,
        epoch,
    }
}

fn text(bytes: Option<&[u8]>) -> String {
    String::from_utf8(bytes.unwrap_or_default().to_vec()).expect("UTF-8")
}

#[test]
fn loaded_and_live_schedules_are_dispatched_then_tombstoned() {
    let mut topics = Topics::new();
    let schedules = topics.create("schedules", 2, SCHEDULES_CONFIG);
    topics.create_named(&format!("{schedules}_states"), 2, SCHEDULES_CONFIG);
    let target = topics.create("scheduled-targets", 3, &[]);
    let (loaded, live) = (6, 6);
    let mut written: Vec<Written> = (0..loaded)
        .map(|n| schedule(topics.client(), &schedules, &target, n, 0))
        .collect();

    let scheduler = Scheduler::start(
        settings(&[
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
        ]),
        SchedulerOptions {
            schedules_topics: vec![schedules.clone()],
            group_id: unique("scheduler-group"),
            state_interval: Duration::from_millis(200),
            ..SchedulerOptions::default()
        },
    )
    .expect("scheduler");
    wait_until("both schedules partitions loaded", WAIT, || {
        let status = scheduler.status();
        assert!(scheduler.failure().is_none(), "{:?}", scheduler.failure());
        status.partitions.len() == 2 && status.partitions.iter().all(|p| p.state == "loaded")
    });
    // Due a second after they are written: applied live, dispatched when due.
    written.extend(
        (loaded..loaded + live).map(|n| schedule(topics.client(), &schedules, &target, n, 1)),
    );
    let total = written.len();
    let observer = Observer::new(None);
    wait_until("every schedule dispatched and tombstoned", WAIT, || {
        let status = scheduler.status();
        let dispatched: u64 = status.partitions.iter().map(|p| p.dispatched).sum();
        let pending: usize = status.partitions.iter().map(|p| p.pending).sum();
        let on_schedules: i64 = observer.end_offsets(&schedules).values().sum();
        dispatched == total as u64 && pending == 0 && on_schedules == 2 * total as i64
    });
    scheduler.request_stop();
    assert!(scheduler.wait(WAIT), "the scheduler did not stop");
    assert!(scheduler.failure().is_none(), "{:?}", scheduler.failure());

    let by_key: BTreeMap<String, &Written> =
        written.iter().map(|w| (w.proxy_key.clone(), w)).collect();
    let targets = Observer::read(&target);
    assert_eq!(targets.len(), total, "one target per schedule on {target}");
    let mut dispatched_keys: Vec<String> = Vec::new();
    for message in &targets {
        let proxy_key = text(header(message, SOURCE_KEY_HEADER));
        let schedule = by_key
            .get(&proxy_key)
            .unwrap_or_else(|| panic!("a target from an unknown proxy {proxy_key:?}"));
        assert_eq!(text(message.key()), format!("k{}", schedule.n));
        assert_eq!(text(message.payload()), format!("m{}", schedule.n));
        assert_eq!(
            text(header(message, SOURCE_OFFSET_HEADER)),
            schedule.offset.to_string()
        );
        let Timestamp::CreateTime(written_ms) = message.timestamp() else {
            panic!("{proxy_key}: no create time");
        };
        assert!(
            written_ms >= schedule.epoch * 1000,
            "{proxy_key} dispatched at {written_ms} ms, before its epoch {}",
            schedule.epoch
        );
        dispatched_keys.push(proxy_key);
    }
    dispatched_keys.sort();
    assert_eq!(dispatched_keys, by_key.keys().cloned().collect::<Vec<_>>());

    let tombstones: Vec<_> = Observer::read(&schedules)
        .into_iter()
        .filter(|m| m.payload().is_none())
        .collect();
    assert_eq!(tombstones.len(), total, "one tombstone per schedule");
    for tombstone in &tombstones {
        let proxy_key = text(tombstone.key());
        let schedule = by_key
            .get(&proxy_key)
            .unwrap_or_else(|| panic!("a tombstone for an unknown proxy {proxy_key:?}"));
        assert_eq!(text(header(tombstone, SOURCE_TYPE_HEADER)), "tombstone");
        assert_eq!(
            text(header(tombstone, SOURCE_OFFSET_HEADER)),
            schedule.offset.to_string()
        );
        assert_eq!(tombstone.partition(), schedule.partition, "{proxy_key}");
        assert!(tombstone.offset() > schedule.offset, "{proxy_key}");
    }
}
