//! Consumer and error reports against Karafka-shaped documents of every schema read (fixtures
//! in tests/fixtures/karafka_web, written from Karafka Web's contracts and sampler).

use serde_json::{Value, json};

use super::*;
use crate::codec::json::{decode_document, encode_document, encode_json_document};
use crate::codec::report_rules::{consumer_report_violations, error_report_violations};
use crate::codec::zlib;
use crate::tracking::{
    ErrorSample, GroupSample, JobSample, PartitionSample, PartitionStatistics, ProcessSample,
    ReportBuilder, SourceSample, SourceTotals, error_report,
};

const CONSUMER_FIXTURES: [(&str, &str); 4] = [
    (
        "1.2.1",
        include_str!("../../../../tests/fixtures/karafka_web/consumer_report_1.2.1.json"),
    ),
    (
        "1.4.1",
        include_str!("../../../../tests/fixtures/karafka_web/consumer_report_1.4.1.json"),
    ),
    (
        "1.6.0",
        include_str!("../../../../tests/fixtures/karafka_web/consumer_report_1.6.0.json"),
    ),
    (
        "1.7.0",
        include_str!("../../../../tests/fixtures/karafka_web/consumer_report_1.7.0.json"),
    ),
];

const ERROR_FIXTURES: [(&str, &str); 3] = [
    (
        "1.0.0",
        include_str!("../../../../tests/fixtures/karafka_web/error_report_1.0.0.json"),
    ),
    (
        "1.1.0",
        include_str!("../../../../tests/fixtures/karafka_web/error_report_1.1.0.json"),
    ),
    (
        "1.2.0",
        include_str!("../../../../tests/fixtures/karafka_web/error_report_1.2.0.json"),
    ),
];

fn packed(document: &Value) -> Vec<u8> {
    zlib::deflate(&serde_json::to_vec(document).unwrap(), 6).unwrap()
}

fn fixture(version: &str) -> Value {
    let (_, text) = CONSUMER_FIXTURES
        .iter()
        .find(|(v, _)| *v == version)
        .unwrap();
    serde_json::from_str(text).unwrap()
}

#[test]
fn every_karafka_consumer_schema_decodes() {
    for (version, text) in CONSUMER_FIXTURES {
        let document: Value = serde_json::from_str(text).unwrap();
        let report: ConsumerReport = decode_document(&packed(&document), 1 << 20).unwrap();
        assert_eq!(report.schema_version, version);
        assert_eq!(
            report.process.id, "ruby-host:4242:a1b2c3d4e5f6",
            "{version}"
        );
        assert_eq!(report.process.listeners.active, 2, "{version}");
        assert!(!report.newer_schema());
        let places: Vec<_> = report
            .partitions()
            .map(|p| {
                (
                    p.consumer_group,
                    p.subscription_group,
                    p.topic,
                    p.partition.id,
                )
            })
            .collect();
        assert_eq!(
            places,
            [
                ("audit_app", "eccbc87e4b5c_0", "audit", 0),
                ("orders_app", "c4ca4238a0b9_0", "orders", 0),
                ("orders_app", "c4ca4238a0b9_0", "orders", 2),
                ("orders_app", "c4ca4238a0b9_1", "payments", 1),
            ],
            "{version}"
        );
        // Hybrid lag: stored lag where known (3, 0, 2), else the committed one (7).
        assert_eq!(report.lag(), 12, "{version}");
        let subscription =
            &report.consumer_groups["orders_app"].subscription_groups["c4ca4238a0b9_0"];
        let newer_than = |v: &str| compare_versions(version, v) != Some(Ordering::Less);
        let expected_interval = if newer_than("1.7.0") {
            600_000
        } else {
            300_000
        };
        assert_eq!(subscription.state.poll_interval, expected_interval);
        let expected_instance = newer_than("1.6.0").then(|| "orders-static-1".to_owned());
        assert_eq!(subscription.instance_id, expected_instance);
        assert_eq!(report.process.execution_mode.is_some(), newer_than("1.4.0"));
        assert_eq!(report.stats.total.messages, 400);
    }
}

#[test]
fn the_current_fixture_passes_every_contract_rule() {
    assert_eq!(consumer_report_violations(&fixture("1.7.0")), []);
    for (_, text) in &ERROR_FIXTURES[2..] {
        assert_eq!(
            error_report_violations(&serde_json::from_str(text).unwrap()),
            []
        );
    }
}

#[test]
fn broken_rules_are_named() {
    let partition =
        "consumer_groups.orders_app.subscription_groups.c4ca4238a0b9_0.topics.orders.partitions.0";
    let cases: [(&str, Value, String, &str); 7] = [
        (
            "/process/cpus",
            json!(0),
            "process.cpus".into(),
            "required Integer >= 1",
        ),
        (
            "/process/status",
            json!("sleeping"),
            "process.status".into(),
            "required one of Karafka's process states",
        ),
        (
            "/process/cpu_usage",
            json!([1.0, 2.0]),
            "process.cpu_usage".into(),
            "required Array of 3 Numeric >= -1",
        ),
        (
            "/consumer_groups/orders_app/subscription_groups/c4ca4238a0b9_0/state/poll_interval",
            json!(0),
            "consumer_groups.orders_app.subscription_groups.c4ca4238a0b9_0.state.poll_interval"
                .into(),
            "required Integer > 0",
        ),
        (
            "/consumer_groups/orders_app/subscription_groups/c4ca4238a0b9_0/topics/orders/partitions/0/lag_d",
            json!(1.5),
            format!("{partition}.lag_d"),
            "required Integer",
        ),
        (
            "/jobs/0/updated_at",
            json!(1_763_900_100),
            "jobs.0.updated_at".into(),
            "required Float >= 0",
        ),
        (
            "/jobs/0/first_offset",
            json!(-5),
            "jobs.0.first_offset".into(),
            "required Integer >= 0 or -1001",
        ),
    ];
    for (pointer, value, path, rule) in cases {
        let mut report = fixture("1.7.0");
        *report.pointer_mut(pointer).unwrap() = value;
        let violations = consumer_report_violations(&report);
        assert_eq!(violations.len(), 1, "{pointer}: {violations:?}");
        assert_eq!(
            (violations[0].path.as_str(), violations[0].rule),
            (path.as_str(), rule)
        );
    }
    let mut missing = fixture("1.7.0");
    let partition_value = missing.pointer_mut(
        "/consumer_groups/orders_app/subscription_groups/c4ca4238a0b9_0/topics/orders/partitions/0",
    );
    partition_value
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove("transactional");
    let violations = consumer_report_violations(&missing);
    assert_eq!(violations[0].path, format!("{partition}.transactional"));
    // Nested contracts run only on an otherwise valid report, as in Karafka Web.
    let mut both = fixture("1.7.0");
    *both.pointer_mut("/process/threads").unwrap() = json!(-1);
    *both.pointer_mut("/jobs/0/status").unwrap() = json!("done");
    assert_eq!(consumer_report_violations(&both).len(), 1);
    // Older schemas break the current contract exactly where the schema grew.
    let old: Vec<String> = consumer_report_violations(&fixture("1.4.1"))
        .into_iter()
        .map(|v| v.path)
        .collect();
    assert_eq!(old.len(), 6, "{old:?}");
    assert!(
        old.iter()
            .all(|path| path.ends_with("instance_id") || path.ends_with("poll_interval")),
        "{old:?}"
    );
}

#[test]
fn error_schemas_decode_and_the_current_one_is_enforced_on_write() {
    for (version, text) in ERROR_FIXTURES {
        let document: Value = serde_json::from_str(text).unwrap();
        let report: ErrorReport = decode_document(&packed(&document), 1 << 20).unwrap();
        assert_eq!(
            report.process.id, "ruby-host:4242:a1b2c3d4e5f6",
            "{version}"
        );
        assert_eq!(report.id.is_some(), version == "1.2.0");
        assert_eq!(report.details["partition"], json!(0));
    }
    let old: ErrorReport = serde_json::from_str(ERROR_FIXTURES[1].1).unwrap();
    assert!(
        encode_document(&old, 6).is_err(),
        "1.1.0 is read, never written"
    );
    let mut no_id: Value = serde_json::from_str(ERROR_FIXTURES[2].1).unwrap();
    no_id.as_object_mut().unwrap().remove("id");
    assert_eq!(error_report_violations(&no_id)[0].path, "id");
    let mut integer_time: Value = serde_json::from_str(ERROR_FIXTURES[2].1).unwrap();
    integer_time["occurred_at"] = json!(1_763_900_090);
    assert_eq!(
        error_report_violations(&integer_time)[0].rule,
        "required Float"
    );
}

#[test]
fn newer_schemas_are_read_and_flagged_older_ones_refused() {
    let mut newer = fixture("1.7.0");
    newer["schema_version"] = json!("1.9.0");
    newer["process"]["gpu_usage"] = json!([0.5]);
    newer["stats"]["total"]
        .as_object_mut()
        .unwrap()
        .remove("jobs");
    let report: ConsumerReport = decode_document(&packed(&newer), 1 << 20).unwrap();
    assert!(report.newer_schema());
    assert_eq!((report.stats.total.jobs, report.lag()), (None, 12));
    let mut older = fixture("1.2.1");
    older["schema_version"] = json!("1.1.0");
    assert!(matches!(
        decode_document::<ConsumerReport>(&packed(&older), 1 << 20),
        Err(CoreError::UnsupportedVersion { .. })
    ));
    let mut producer = fixture("1.7.0");
    producer["type"] = json!("producer");
    assert!(decode_document::<ConsumerReport>(&packed(&producer), 1 << 20).is_err());
}

fn refusal<T: Document>(json: &Value) -> (String, String) {
    match encode_json_document::<T>(json, 6) {
        Err(CoreError::InvalidField { field, reason }) => (field, reason),
        other => panic!("expected InvalidField, got {other:?}"),
    }
}

#[test]
fn a_report_given_as_json_is_written_exactly_as_given() {
    let report = fixture("1.7.0");
    let written = encode_json_document::<ConsumerReport>(&report, 6).unwrap();
    let inflated = zlib::inflate(&written, 1 << 20).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&inflated).unwrap(), report);
    // A whole number where the schema has a float is the same number (Ruby's Numeric).
    let mut whole = fixture("1.7.0");
    whole["dispatched_at"] = json!(1_763_900_100);
    assert!(encode_json_document::<ConsumerReport>(&whole, 6).is_ok());
}

#[test]
fn a_report_given_as_json_is_never_repaired() {
    let subscription = "/consumer_groups/orders_app/subscription_groups/c4ca4238a0b9_0";
    let missing_memory = {
        let mut report = fixture("1.7.0");
        report["process"]
            .as_object_mut()
            .unwrap()
            .remove("memory_usage");
        report
    };
    let missing_bytes_value = {
        let mut report = fixture("1.7.0");
        report["process"]["bytes_received"] = json!("fast");
        report
    };
    let cases: [(&str, Value, &str, &str); 6] = [
        (
            "missing required field",
            missing_memory,
            "process.memory_usage",
            "required Integer >= 0",
        ),
        (
            "true for an instance id",
            {
                let mut report = fixture("1.7.0");
                *report
                    .pointer_mut(&format!("{subscription}/instance_id"))
                    .unwrap() = json!(true);
                report
            },
            "consumer_groups.orders_app.subscription_groups.c4ca4238a0b9_0.instance_id",
            "required false or String",
        ),
        (
            "an array for the process",
            {
                let mut report = fixture("1.7.0");
                report["process"] = json!(["a"]);
                report
            },
            "process",
            "required Hash",
        ),
        (
            "an unknown field",
            {
                let mut report = fixture("1.7.0");
                report["process"]["memory_usgae"] = json!(5);
                report
            },
            "process.memory_usgae",
            "not a field of this schema",
        ),
        (
            "the 1.2.x name of the process id",
            {
                let mut report = fixture("1.7.0");
                let id = report["process"].as_object_mut().unwrap().remove("id");
                report["process"]["name"] = id.unwrap();
                report
            },
            "process.id",
            "required String with at least two ':'",
        ),
        (
            "a null optional field",
            {
                let mut report = fixture("1.7.0");
                report["process"]["bytes_sent"] = Value::Null;
                report
            },
            "process.bytes_sent",
            "null is not valid here (it would be left out)",
        ),
    ];
    for (what, report, field, reason) in cases {
        let (refused_field, refused_reason) = refusal::<ConsumerReport>(&report);
        assert_eq!(refused_field, field, "{what}");
        assert!(
            refused_reason.starts_with(reason),
            "{what}: {refused_reason}"
        );
    }
    // A type only serde knows (Karafka's contract does not check it) names the document.
    let (field, reason) = refusal::<ConsumerReport>(&missing_bytes_value);
    assert_eq!(field, "consumer report");
    assert!(reason.contains("invalid type: string \"fast\""), "{reason}");
}

#[test]
fn an_error_report_given_as_json_is_never_repaired() {
    let error: Value = serde_json::from_str(ERROR_FIXTURES[2].1).unwrap();
    assert!(encode_json_document::<ErrorReport>(&error, 6).is_ok());
    let mut no_class = error.clone();
    no_class.as_object_mut().unwrap().remove("error_class");
    assert_eq!(
        refusal::<ErrorReport>(&no_class),
        ("error_class".into(), "required non-empty String".into())
    );
    let mut listed_process = error.clone();
    listed_process["process"] = json!(["ruby-host:4242:a1b2c3d4e5f6", []]);
    assert_eq!(refusal::<ErrorReport>(&listed_process).0, "process");
    // Tags are optional in Karafka Web's error contract: written as [] when not given.
    let mut untagged = error.clone();
    untagged["process"].as_object_mut().unwrap().remove("tags");
    let written = encode_json_document::<ErrorReport>(&untagged, 6).unwrap();
    let decoded: Value =
        serde_json::from_slice(&zlib::inflate(&written, 1 << 20).unwrap()).unwrap();
    assert_eq!(decoded["process"]["tags"], json!([]));
}

fn partition_sample(id: u32, lag: i64) -> PartitionSample {
    PartitionSample {
        topic: "orders".into(),
        partition: id,
        lag: None,
        lag_stored: None,
        committed_offset: None,
        fetch_state: None,
        paused: false,
        statistics: Some(PartitionStatistics {
            partitions_cnt: 2,
            lag,
            lag_stored: lag,
            committed_offset: 10,
            stored_offset: 10,
            hi_offset: 10 + lag,
            lo_offset: 0,
            ls_offset: 10 + lag,
            eof_offset: 10 + lag,
            fetch_state: "active".into(),
            ..PartitionStatistics::default()
        }),
    }
}

fn source(messages: u64, busy_seconds: f64) -> SourceSample {
    SourceSample {
        consumer_group: "billing".into(),
        subscription_group: None,
        instance_id: None,
        group_state: Some(GroupSample {
            state: "up".into(),
            join_state: "steady".into(),
            stateage: 1000,
            rebalance_age: 900,
            rebalance_cnt: 1,
            rebalance_reason: "initial assignment".into(),
        }),
        poll_age: 0.123,
        poll_interval: 300_000,
        listeners: 1,
        workers: 2,
        bytes_received: Some(2048),
        bytes_sent: None,
        busy: 1,
        enqueued: 3,
        totals: SourceTotals {
            jobs: None,
            batches: messages / 10,
            messages,
            busy_seconds,
            ..SourceTotals::default()
        },
        partitions: vec![partition_sample(0, 3), partition_sample(1, 0)],
        jobs: vec![JobSample {
            handler: "handle".into(),
            topic: "orders".into(),
            partition: 0,
            first_offset: 7,
            last_offset: 9,
            messages: 3,
            started_at: 1_700_000_001.0,
            last_timestamp_ms: Some(1_700_000_000_950),
        }],
    }
}

fn process_sample() -> ProcessSample {
    ProcessSample {
        id: "host-1:4242:ab12cd".into(),
        status: "running".into(),
        started_at: 1_700_000_000.0,
        rss_kib: 120_000,
        host_used_kib: 8_000_000,
        memory_limit_kib: 16_000_000,
        cpus: 2,
        threads: 9,
        load_average: Some([0.5, 0.4, 0.3]),
        tags: vec!["web".into()],
        runtime: "CPython 3.12.1".into(),
        ferrokafka: "0.1.0".into(),
        librdkafka: "2.8.0".into(),
    }
}

#[test]
fn built_reports_pass_every_rule_and_carry_counts_since_the_last_one() {
    let mut builder = ReportBuilder::new();
    let first = builder.consumer_report(process_sample(), vec![source(50, 4.0)], 1_700_000_010.0);
    let value = serde_json::to_value(&first).unwrap();
    assert_eq!(consumer_report_violations(&value), []);
    let encoded = encode_document(&first, 6).unwrap();
    assert_eq!(
        decode_document::<ConsumerReport>(&encoded, 1 << 20),
        Ok(first.clone())
    );
    assert_eq!(first.stats.total.messages, 50);
    // 4 s of handler time over 10 s of 2 workers.
    assert_eq!(first.stats.utilization, 20.0);
    let topic = &first.consumer_groups["billing"].subscription_groups["billing_0"].topics["orders"];
    assert_eq!((topic.partitions_cnt, topic.partitions.len()), (Some(2), 2));
    assert_eq!(topic.partitions[&1].transactional, Some(false));
    assert_eq!(
        value["process"]["listeners"],
        json!({"active": 1, "standby": 0})
    );
    assert_eq!(
        value["consumer_groups"]["billing"]["subscription_groups"]["billing_0"]["instance_id"],
        json!(false)
    );
    let second = builder.consumer_report(process_sample(), vec![source(80, 5.0)], 1_700_000_020.0);
    assert_eq!(
        (second.stats.total.messages, second.stats.total.batches),
        (30, 3)
    );
    assert_eq!(second.stats.utilization, 5.0);
    let mut wrong = second;
    wrong.process.status = "asleep".into();
    let refused = encode_document(&wrong, 6).unwrap_err();
    assert!(refused.to_string().contains("process.status"), "{refused}");
}

#[test]
fn a_sample_without_statistics_keeps_librdkafkas_unknowns() {
    let (count, figures) = PartitionSample {
        topic: "schedules".into(),
        partition: 3,
        lag: Some(7),
        lag_stored: Some(7),
        committed_offset: None,
        fetch_state: Some("loaded".into()),
        paused: true,
        statistics: None,
    }
    .into_report();
    assert_eq!(count, None);
    assert_eq!(
        (figures.id, figures.lag, figures.fetch_state.as_str()),
        (3, 7, "loaded")
    );
    assert_eq!(
        (figures.committed_offset, figures.hi_offset),
        (UNKNOWN_OFFSET, UNKNOWN_OFFSET)
    );
    assert_eq!(figures.poll_state, "paused");
}

#[test]
fn built_error_reports_pass_the_error_contract() {
    let long = "é".repeat(MAX_ERROR_MESSAGE_CHARS + 5);
    let report = error_report(ErrorSample {
        id: "0f6c1d2e-4b3a-4c5d-8e9f-001122334455".into(),
        kind: "consumer.consume.error".into(),
        error_class: "ValueError".into(),
        error_message: long,
        backtrace: "line 1".into(),
        details: BTreeMap::from([("partition".into(), json!(0))]),
        occurred_at: 1_700_000_000.0,
        process_id: "host-1:4242:ab12cd".into(),
        tags: vec![],
    });
    assert_eq!(
        report.error_message.chars().count(),
        MAX_ERROR_MESSAGE_CHARS
    );
    assert_eq!(
        error_report_violations(&serde_json::to_value(&report).unwrap()),
        []
    );
    let encoded = encode_document(&report, 6).unwrap();
    assert_eq!(
        decode_document::<ErrorReport>(&encoded, 1 << 20),
        Ok(report)
    );
}
