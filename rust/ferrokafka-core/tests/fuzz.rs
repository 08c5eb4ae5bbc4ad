//! Fuzz-style totality tests: arbitrary or mutated bytes fed to every decoder give a value or a
//! `CoreError`, never a panic, and never more output than the limit.

use ferrokafka_core::codec::envelope::{
    self, Envelope, ScheduleLimits, TargetAddress, TargetMessage, parse_proxy_headers,
};
use ferrokafka_core::codec::marker_codec::{decode_marker, encode_marker};
use ferrokafka_core::codec::report::{ConsumerReport, ErrorReport};
use ferrokafka_core::codec::state::StateReport;
use ferrokafka_core::codec::zlib::{deflate, inflate};
use ferrokafka_core::{
    CoreError, Marker, MessageId, MessagePayload, ScheduleTracker, TrackerConfig, decode_document,
    encode_document,
};
use proptest::prelude::*;

const LIMIT: usize = 64 * 1024;

/// Applies `(position, xor)` flips to a valid encoding.
fn mutate(mut bytes: Vec<u8>, flips: &[(usize, u8)]) -> Vec<u8> {
    if !bytes.is_empty() {
        for &(position, xor) in flips {
            let len = bytes.len();
            bytes[position % len] ^= xor;
        }
    }
    bytes
}

fn flips() -> impl Strategy<Value = Vec<(usize, u8)>> {
    prop::collection::vec((any::<usize>(), 1u8..=255), 1..4)
}

fn valid_state_payload() -> Vec<u8> {
    let mut tracker = ScheduleTracker::<()>::new(TrackerConfig::default(), 1_700_000_000_000);
    tracker.mark_loading().unwrap_or_default();
    encode_document(&tracker.state_report(1_700_000_000_000), 6).unwrap_or_default()
}

fn valid_start_marker() -> Vec<u8> {
    encode_marker(&Marker::Start {
        message_id: MessageId {
            partition: 2,
            offset: 99,
        },
        deadline: 1_700_000_000_000,
        payload: MessagePayload {
            key: Some(b"k".to_vec()),
            value: Some(b"value".to_vec()),
            headers: vec![("h".into(), Some(b"v".to_vec())), ("n".into(), None)],
        },
    })
}

fn header_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(envelope::SCHEMA_VERSION_HEADER.to_owned()),
        Just(envelope::SOURCE_TYPE_HEADER.to_owned()),
        Just(envelope::TARGET_EPOCH_HEADER.to_owned()),
        Just(envelope::TARGET_TOPIC_HEADER.to_owned()),
        Just(envelope::TARGET_PARTITION_HEADER.to_owned()),
        Just(envelope::TARGET_KEY_HEADER.to_owned()),
        Just(envelope::SOURCE_OFFSET_HEADER.to_owned()),
        "[a-z_]{0,12}",
    ]
}

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"1.0.0".to_vec()),
        Just(b"schedule".to_vec()),
        Just(b"tombstone".to_vec()),
        "-?[0-9]{1,21}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..12),
    ]
}

proptest! {
    #[test]
    fn inflate_is_total_and_bounded(data in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(out) = inflate(&data, LIMIT) {
            prop_assert!(out.len() <= LIMIT);
        }
    }

    #[test]
    fn inflate_of_mutated_stream_is_total(data in prop::collection::vec(any::<u8>(), 0..2048), flips in flips()) {
        let packed = mutate(deflate(&data, 6).unwrap_or_default(), &flips);
        if let Ok(out) = inflate(&packed, 1024) {
            prop_assert!(out.len() <= 1024);
        }
    }

    #[test]
    fn envelope_parse_is_total(headers in prop::collection::vec((header_name(), header_value()), 0..10)) {
        let _ = parse_proxy_headers(&headers);
    }

    #[test]
    fn built_proxies_parse_back(epoch_ahead in 0i64..1_000_000, random in any::<[u8; 16]>(), partition in prop::option::of(0i32..1000)) {
        let now = 1_700_000_000;
        let message = TargetMessage {
            address: TargetAddress { topic: "t".into(), partition, key: None, partition_key: None },
            payload: Some(vec![1, 2, 3]),
            headers: vec![],
        };
        let envelope = Envelope { topic: "s".into(), ..Envelope::default() };
        let proxy = envelope::schedule_proxy(&message, now + epoch_ahead, &envelope, random, now, &ScheduleLimits::default());
        let proxy = proxy.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(
            parse_proxy_headers(&proxy.headers),
            Ok(envelope::ProxyRecord::Schedule { epoch_secs: now + epoch_ahead, target: message.address })
        );
    }

    #[test]
    fn state_decode_is_total(data in prop::collection::vec(any::<u8>(), 0..512), flips in flips()) {
        let _ = decode_document::<StateReport>(&data, LIMIT);
        let _ = decode_document::<StateReport>(&mutate(valid_state_payload(), &flips), LIMIT);
        // Valid zlib around arbitrary text reaches the JSON parser.
        let packed = deflate(&data, 1).unwrap_or_default();
        let decoded = decode_document::<StateReport>(&packed, LIMIT);
        let expected = matches!(decoded, Err(CoreError::Corrupt { .. } | CoreError::InvalidField { .. }) | Ok(_));
        prop_assert!(expected, "unexpected {:?}", decoded);
    }

    #[test]
    fn report_decode_is_total(text in "\\PC{0,300}", data in prop::collection::vec(any::<u8>(), 0..256)) {
        for packed in [deflate(text.as_bytes(), 6).unwrap_or_default(), data] {
            let _ = decode_document::<ConsumerReport>(&packed, LIMIT);
            let _ = decode_document::<ErrorReport>(&packed, LIMIT);
        }
    }

    #[test]
    fn marker_decode_is_total(data in prop::collection::vec(any::<u8>(), 0..128), flips in flips()) {
        let _ = decode_marker(&data);
        let mut prefixed = vec![1u8];
        prefixed.extend_from_slice(&data);
        let _ = decode_marker(&prefixed);
        if let Ok(marker) = decode_marker(&mutate(valid_start_marker(), &flips)) {
            prop_assert_eq!(decode_marker(&encode_marker(&marker)), Ok(marker));
        }
    }

    #[test]
    fn markers_round_trip(partition in any::<u32>(), offset in any::<u64>(), deadline in any::<u64>(),
                          key in prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
                          headers in prop::collection::vec(("\\PC{0,8}", prop::option::of(prop::collection::vec(any::<u8>(), 0..8))), 0..4)) {
        let message_id = MessageId { partition, offset };
        for marker in [
            Marker::Start { message_id, deadline, payload: MessagePayload { key: key.clone(), value: None, headers: headers.clone() } },
            Marker::KeepAlive { message_id, deadline },
            Marker::End { message_id },
        ] {
            prop_assert_eq!(decode_marker(&encode_marker(&marker)), Ok(marker));
        }
    }
}
