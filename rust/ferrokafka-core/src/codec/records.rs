//! Kafka records as one Arrow struct column, the shape `Batch.to_arrow()` hands to pyarrow:
//! `key` [binary], `value` [binary], `topic` [string], `partition`, `offset`, `timestamp`
//! [ms since the epoch, null when the record has none] (all `bigint`), and `headers`
//! [array<struct<key: string, value: binary>>], as Spark's Kafka source types them.
//!
//! Invariants: one row per pushed record, every value copied once into the column buffers.

use crate::codec::columnar::{
    BinaryBuilder, ColumnBuilder, HeaderRows, Int64Builder, ListBuilder, Utf8Builder,
    struct_builder,
};

/// One record's fields, borrowed from wherever the record lives.
#[derive(Clone, Copy, Debug)]
pub struct RecordFields<'a, H> {
    /// Record key.
    pub key: Option<&'a [u8]>,
    /// Record value.
    pub value: Option<&'a [u8]>,
    /// Topic name.
    pub topic: &'a str,
    /// Partition number.
    pub partition: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// Timestamp in ms since the epoch, `None` when not available.
    pub timestamp_ms: Option<i64>,
    /// Headers in wire order.
    pub headers: H,
}

struct_builder! {
    /// Kafka records, one struct row each (see the module docs).
    RecordRows {
        /// Record key.
        key: BinaryBuilder,
        /// Record value.
        value: BinaryBuilder,
        /// Topic name.
        topic: Utf8Builder,
        /// Partition number.
        partition: Int64Builder,
        /// Offset.
        offset: Int64Builder,
        /// Timestamp, ms since the epoch.
        timestamp: Int64Builder,
        /// Headers.
        headers: ListBuilder<HeaderRows>,
    }
}

impl RecordRows {
    /// A builder with room for `rows` records of `keys` key bytes, `values` value bytes and
    /// `topics` topic-name bytes in all: the columns are allocated once, never grown (growing
    /// them was most of the page faults of a `to_arrow` call).
    pub fn with_capacity(rows: usize, keys: usize, values: usize, topics: usize) -> Self {
        Self {
            key: BinaryBuilder::with_capacity(rows, keys, false),
            value: BinaryBuilder::with_capacity(rows, values, false),
            topic: Utf8Builder::with_capacity(rows, topics, false),
            partition: Int64Builder::with_capacity(rows),
            offset: Int64Builder::with_capacity(rows),
            timestamp: Int64Builder::with_capacity(rows),
            ..Self::default()
        }
    }

    /// Appends one record.
    pub fn push<'a, H>(&mut self, record: RecordFields<'a, H>)
    where
        H: IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    {
        self.key.push(record.key);
        self.value.push(record.value);
        self.topic.push_str(Some(record.topic));
        self.partition.push(Some(i64::from(record.partition)));
        self.offset.push(Some(record.offset));
        self.timestamp.push(record.timestamp_ms);
        for (key, value) in record.headers {
            self.headers.items.push(key, value);
        }
        self.headers.close_row();
        self.close_row();
    }
}

#[cfg(test)]
mod tests {
    use super::{RecordFields, RecordRows};
    use crate::codec::columnar::{Column, ColumnBuilder};

    #[test]
    fn one_struct_row_per_record_with_nullable_key_value_and_timestamp() {
        let mut rows = RecordRows::default();
        rows.push(RecordFields {
            key: Some(b"k".as_slice()),
            value: None,
            topic: "orders",
            partition: 2,
            offset: 7,
            timestamp_ms: None,
            headers: [("trace", Some(b"t1".as_slice())), ("empty", None)],
        });
        rows.push(RecordFields {
            key: None,
            value: Some(b"v".as_slice()),
            topic: "orders",
            partition: 2,
            offset: 8,
            timestamp_ms: Some(1_700_000_000_000),
            headers: [],
        });
        let Ok(Column::Struct { len, fields, .. }) = rows.finish() else {
            panic!("a struct column");
        };
        assert_eq!(len, 2);
        let names: Vec<&str> = fields.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            names,
            [
                "key",
                "value",
                "topic",
                "partition",
                "offset",
                "timestamp",
                "headers"
            ]
        );
        let Some((
            _,
            Column::Int64 {
                validity, values, ..
            },
        )) = fields.get(5)
        else {
            panic!("timestamp is int64");
        };
        assert_eq!(validity.as_deref(), Some([0b10].as_slice()));
        assert_eq!(values[8..], 1_700_000_000_000i64.to_le_bytes());
        let Some((_, Column::List { offsets, .. })) = fields.get(6) else {
            panic!("headers is a list");
        };
        let ends: Vec<u32> = offsets
            .chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(ends, [0, 2, 2]);
    }
}
