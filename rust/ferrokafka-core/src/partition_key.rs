//! The partition a `partition_key` chooses, as a Karafka (WaterDrop) producer chooses it.
//!
//! WaterDrop hands a message's `partition_key` to karafka-rdkafka, whose
//! `Rdkafka::Bindings.partitioner` calls librdkafka's partitioner (`consistent_random` unless
//! the producer's `partitioner` setting says otherwise: CRC32 of the key modulo the partition
//! count) with the key's bytes but, as their length, Ruby's `String#size`, the number of
//! *characters*. So librdkafka's CRC32 covers only the first N bytes of a key of N characters:
//! every byte of an ASCII key, all but the last of `"zamówienie-3"` (12 characters, 13 bytes),
//! a third of a CJK key. Message keys are not affected: librdkafka hashes all their bytes.
//!
//! [`PartitionKeyHashing::WaterDrop`], the default, reproduces that, so a Python and a Ruby
//! producer put one partition key on one partition (a schedule and its cancel, say);
//! [`PartitionKeyHashing::Bytes`] hashes every byte, as librdkafka's `consistent` partitioner
//! does for a message key, for fleets with no Ruby producer.
//!
//! Invariants:
//! - A key is counted as Ruby counts a UTF-8 string's characters: each well-formed UTF-8
//!   sequence is one character, each byte of an ill-formed one is one (so any bytes are
//!   accepted, and bytes that are not UTF-8 text are hashed whole).
//! - An empty key chooses no partition (`None`): karafka-rdkafka's `consistent_random` then
//!   picks one at random, and WaterDrop refuses an empty `partition_key` before that; callers
//!   refuse it or leave the choice to librdkafka.

use crate::CoreError;

/// How a `partition_key` is hashed into a partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PartitionKeyHashing {
    /// CRC32 of the first N bytes of a key of N characters, as WaterDrop hashes (the default).
    #[default]
    WaterDrop,
    /// CRC32 of every byte of the key.
    Bytes,
}

impl PartitionKeyHashing {
    /// The name of each rule, as users spell it (`partition_key_hashing=`).
    pub const NAMES: [&'static str; 2] = ["waterdrop", "bytes"];

    /// The rule named `name` (one of [`Self::NAMES`]).
    pub fn from_name(name: &str) -> Result<Self, CoreError> {
        match name {
            "waterdrop" => Ok(Self::WaterDrop),
            "bytes" => Ok(Self::Bytes),
            other => Err(CoreError::InvalidArgument(format!(
                "partition_key_hashing must be \"waterdrop\" (hash a key as WaterDrop does) or \
                 \"bytes\" (hash every byte), got {other:?}"
            ))),
        }
    }

    /// The name of this rule.
    pub fn name(self) -> &'static str {
        match self {
            Self::WaterDrop => "waterdrop",
            Self::Bytes => "bytes",
        }
    }

    /// The bytes of `key` that are hashed.
    pub fn hashed_bytes(self, key: &[u8]) -> &[u8] {
        match self {
            Self::WaterDrop => &key[..ruby_char_count(key)],
            Self::Bytes => key,
        }
    }

    /// The partition of `key` among `partition_count` partitions; `None` for an empty key or
    /// no partitions.
    pub fn partition(self, key: &[u8], partition_count: u32) -> Option<u32> {
        if key.is_empty() || partition_count == 0 {
            return None;
        }
        Some(crc32fast::hash(self.hashed_bytes(key)) % partition_count)
    }
}

/// The number of characters Ruby's `String#size` gives for `bytes` read as a UTF-8 string.
fn ruby_char_count(bytes: &[u8]) -> usize {
    bytes
        .utf8_chunks()
        .map(|chunk| chunk.valid().chars().count() + chunk.invalid().len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (key, CRC32 of its first N bytes for N characters, CRC32 of all its bytes), computed
    /// independently with Python's `zlib.crc32(key.encode()[:len(key)])` and
    /// `zlib.crc32(key.encode())`.
    const VECTORS: [(&str, u32, u32); 6] = [
        ("customer-7", 0x028c_7948, 0x028c_7948),
        ("zamówienie-3", 0x4f94_7c09, 0x1441_a243),
        ("Zażółć gęślą jaźń", 0xf994_d9e0, 0x0505_71eb),
        ("заказ-42", 0x20d0_78ac, 0x8f4b_62d5),
        ("注文-12", 0xa852_4ad5, 0x53d2_87ae),
        ("🎉-order", 0xe75e_04b8, 0x35ec_23a4),
    ];

    #[test]
    fn waterdrop_hashes_as_many_leading_bytes_as_the_key_has_characters() {
        for (key, waterdrop, bytes) in VECTORS {
            let hashed = PartitionKeyHashing::WaterDrop.hashed_bytes(key.as_bytes());
            assert_eq!(hashed, &key.as_bytes()[..key.chars().count()], "{key}");
            assert_eq!(crc32fast::hash(hashed), waterdrop, "{key}");
            assert_eq!(crc32fast::hash(key.as_bytes()), bytes, "{key}");
            for count in [1, 3, 5, 12] {
                assert_eq!(
                    PartitionKeyHashing::WaterDrop.partition(key.as_bytes(), count),
                    Some(waterdrop % count)
                );
                assert_eq!(
                    PartitionKeyHashing::Bytes.partition(key.as_bytes(), count),
                    Some(bytes % count)
                );
            }
        }
    }

    #[test]
    fn ill_formed_bytes_count_one_character_each_as_ruby_counts_them() {
        // "\xE3\x81A": a cut 3-byte sequence then "A" is 3 characters to Ruby; a lone
        // continuation byte and a surrogate's encoding count each byte.
        assert_eq!(ruby_char_count(b"\xE3\x81A"), 3);
        assert_eq!(ruby_char_count(b"\x80\x80"), 2);
        assert_eq!(ruby_char_count(b"\xED\xA0\x80"), 3);
        assert_eq!(ruby_char_count(b"\xc3\xb3\xff"), 2);
        let binary = b"\xff\xfe\x00\x01";
        assert_eq!(PartitionKeyHashing::WaterDrop.hashed_bytes(binary), binary);
    }

    #[test]
    fn an_empty_key_or_no_partitions_chooses_nothing() {
        for hashing in [PartitionKeyHashing::WaterDrop, PartitionKeyHashing::Bytes] {
            assert_eq!(hashing.partition(b"", 5), None);
            assert_eq!(hashing.partition(b"k", 0), None);
        }
    }

    #[test]
    fn names_round_trip_and_an_unknown_one_is_refused_by_name() {
        for name in PartitionKeyHashing::NAMES {
            assert_eq!(PartitionKeyHashing::from_name(name).unwrap().name(), name);
        }
        assert_eq!(
            PartitionKeyHashing::default(),
            PartitionKeyHashing::WaterDrop
        );
        let err = PartitionKeyHashing::from_name("utf8")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("partition_key_hashing") && err.contains("\"utf8\""),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn waterdrop_agrees_with_bytes_exactly_when_the_key_is_ascii(key in any::<String>()) {
            let bytes = key.as_bytes();
            let hashed = PartitionKeyHashing::WaterDrop.hashed_bytes(bytes);
            prop_assert_eq!(hashed, &bytes[..key.chars().count()]);
            prop_assert_eq!(hashed.len() == bytes.len(), key.is_ascii());
        }

        #[test]
        fn any_bytes_hash_a_prefix_of_themselves(key in proptest::collection::vec(any::<u8>(), 0..64)) {
            let hashed = PartitionKeyHashing::WaterDrop.hashed_bytes(&key);
            prop_assert!(key.starts_with(hashed));
            prop_assert!(hashed.len() * 4 >= key.len());
            if let Some(partition) = PartitionKeyHashing::WaterDrop.partition(&key, 7) {
                prop_assert!(partition < 7);
            }
        }
    }
}
