//! The codecs over whole Arrow batches, as the Spark UDFs use them: zlib, the decoded reports,
//! states and markers as struct rows, the schedule proxy headers, and the partitions partition
//! keys choose.
//!
//! Invariants: every function turns a batch of `n` rows into columns of exactly `n` rows and
//! never fails because of one row: a row that cannot be decoded or built gives a null value
//! (or, for the struct decoders, a struct whose fields are null) and its error message in the
//! error column. Only arguments that apply to the whole batch (a zlib level) fail the call.
//!
//! Row shapes (Spark types in brackets; every integer is `bigint`):
//! - state: `schema_version`, `dispatched_at` [double], `state`, `offsets {low, high}`, `daily`
//!   [array<struct<day, count>>], `started_at`, `reloads`, `skipped_records`, `dispatched`, `failed`.
//! - consumer report (Karafka Web's, any schema read): `schema_version`, `dispatched_at`,
//!   `process {id, status, started_at, memory_usage, memory_total_usage, memory_size, cpus,
//!   threads, cpu_usage [array<double>], tags [array<string>]}`, `stats {busy, enqueued,
//!   utilization, total {batches, messages, errors, retries, dead}, lag, lag_stored}` (`total`:
//!   counts since the process's previous report; `lag`: Karafka Web's hybrid lag summed,
//!   `lag_stored`: the lag to the stored offsets summed, as Karafka Web sums it),
//!   `partitions` [array<struct<consumer_group, topic, partition, lag, lag_stored,
//!   committed_offset, stored_offset, hi_offset, lo_offset, fetch_state, poll_state>>] (the
//!   report's consumer_groups/subscription_groups/topics/partitions maps, flattened),
//!   `jobs` [array<struct<consumer_group, topic, partition, first_offset, last_offset,
//!   committed_offset, messages, kind, updated_at>>].
//! - marker: `kind` (start/keepalive/end), `partition`, `offset`, `deadline`, `key` [binary],
//!   `value` [binary], `headers` [array<struct<key, value: binary>>].
//!
//! Each decoder's struct ends with `error` [string]: null, or why the row could not be decoded.

use crate::CoreError;
use crate::codec::columnar::{
    BatchResult, BinaryBuilder, BinaryView, ColumnBuilder, Float64Builder, HeaderRows,
    Int64Builder, Int64View, ListBuilder, StructRows, Utf8Builder, decode_rows, map_binary,
    struct_builder,
};
use crate::codec::envelope::{self, ScheduleLimits, TargetAddress};
use crate::codec::json::{Document, DocumentDecoder};
use crate::codec::marker_codec;
use crate::codec::report::ConsumerReport;
use crate::codec::state::StateReport;
use crate::codec::zlib;
use crate::markers::Marker;
use crate::partition_key::PartitionKeyHashing;

/// Inflates every row of `input` (at most `max_output` bytes each).
pub fn inflate_batch(
    input: &BinaryView<'_>,
    max_output: usize,
    large: bool,
) -> BatchResult<BinaryBuilder> {
    let mut inflater = zlib::Inflater::new();
    map_binary(input, large, |value, out| {
        inflater.inflate_into(value, max_output, out)
    })
}

/// Deflates every row of `input` at `level`; a level outside 0..=9 fails the call.
pub fn deflate_batch(
    input: &BinaryView<'_>,
    level: u32,
    large: bool,
) -> Result<BatchResult<BinaryBuilder>, CoreError> {
    let mut deflater = zlib::Deflater::new(level)?;
    Ok(map_binary(input, large, |value, out| {
        deflater.deflate_into(value, out)
    }))
}

struct_builder! {
    /// `offsets` of a state row.
    OffsetRows {
        /// Lowest offset seen (-1: none).
        low: Int64Builder,
        /// Highest offset seen (-1: none).
        high: Int64Builder,
    }
}

struct_builder! {
    /// One `daily` entry of a state row.
    DayRows {
        /// `YYYY-MM-DD`.
        day: Utf8Builder,
        /// Pending schedules that day.
        count: Int64Builder,
    }
}

struct_builder! {
    /// Decoded scheduler state reports.
    StateRows {
        /// Schema version.
        schema_version: Utf8Builder,
        /// Report time, Unix seconds.
        dispatched_at: Float64Builder,
        /// Tracker state.
        state: Utf8Builder,
        /// Offsets seen.
        offsets: OffsetRows,
        /// Pending schedules per day.
        daily: ListBuilder<DayRows>,
        /// Tracker start, Unix seconds.
        started_at: Int64Builder,
        /// Full re-reads.
        reloads: Int64Builder,
        /// Undecodable records skipped.
        skipped_records: Int64Builder,
        /// Schedules dispatched.
        dispatched: Int64Builder,
        /// Schedules whose target was refused for good.
        failed: Int64Builder,
    }
}

impl StateRows {
    fn push(&mut self, report: StateReport) {
        self.schema_version.push_str(Some(&report.schema_version));
        self.dispatched_at.push(Some(report.dispatched_at));
        self.state.push_str(Some(report.state.as_str()));
        self.offsets.low.push(Some(report.offsets.low));
        self.offsets.high.push(Some(report.offsets.high));
        self.offsets.close_row();
        for (day, count) in &report.daily {
            self.daily.items.day.push_str(Some(day));
            self.daily.items.count.push_u64(Some(*count));
            self.daily.items.close_row();
        }
        self.daily.close_row();
        self.started_at.push(Some(report.started_at));
        self.reloads.push_u64(Some(report.reloads));
        self.skipped_records.push_u64(Some(report.skipped_records));
        self.dispatched.push_u64(Some(report.dispatched));
        self.failed.push_u64(Some(report.failed));
        self.close_row();
    }
}

/// Decodes every row of `input` as a zlib JSON document `D` into `B`'s rows with `push`: one
/// [`DocumentDecoder`] serves the whole batch.
fn decode_document_rows<D: Document, B: StructRows>(
    input: &BinaryView<'_>,
    max_inflated: usize,
    push: impl FnMut(&mut B, D),
) -> BatchResult<B> {
    let mut decoder = DocumentDecoder::default();
    decode_rows(input, |value| decoder.decode(value, max_inflated), push)
}

/// Decodes every row of `input` as a zlib JSON state report.
pub fn decode_state_batch(input: &BinaryView<'_>, max_inflated: usize) -> BatchResult<StateRows> {
    decode_document_rows(input, max_inflated, StateRows::push)
}

struct_builder! {
    /// `process` of a report row.
    ProcessRows {
        /// `host:pid:random`.
        id: Utf8Builder,
        /// Lifecycle status.
        status: Utf8Builder,
        /// Start time, Unix seconds.
        started_at: Float64Builder,
        /// Resident memory, KiB.
        memory_usage: Int64Builder,
        /// Host memory in use, KiB.
        memory_total_usage: Int64Builder,
        /// Host memory, KiB.
        memory_size: Int64Builder,
        /// CPUs.
        cpus: Int64Builder,
        /// Threads.
        threads: Int64Builder,
        /// Load averages (1, 5, 15 minutes).
        cpu_usage: ListBuilder<Float64Builder>,
        /// Tags.
        tags: ListBuilder<Utf8Builder>,
    }
}

struct_builder! {
    /// `stats.total` of a report row.
    TotalRows {
        /// Batches handled.
        batches: Int64Builder,
        /// Messages processed.
        messages: Int64Builder,
        /// Handler errors.
        errors: Int64Builder,
        /// Retries.
        retries: Int64Builder,
        /// Dead-lettered.
        dead: Int64Builder,
    }
}

struct_builder! {
    /// `stats` of a report row.
    StatsRows {
        /// Busy workers.
        busy: Int64Builder,
        /// Waiting jobs.
        enqueued: Int64Builder,
        /// Utilization, 0..=100.
        utilization: Float64Builder,
        /// Counters since start.
        total: TotalRows,
        /// Total lag.
        lag: Int64Builder,
        /// Total lag to the stored offsets.
        lag_stored: Int64Builder,
    }
}

struct_builder! {
    /// One assigned partition of a report row.
    PartitionRows {
        /// Consumer group.
        consumer_group: Utf8Builder,
        /// Topic.
        topic: Utf8Builder,
        /// Partition.
        partition: Int64Builder,
        /// Lag to the committed offset.
        lag: Int64Builder,
        /// Lag to the stored offset.
        lag_stored: Int64Builder,
        /// Committed offset.
        committed_offset: Int64Builder,
        /// Stored offset.
        stored_offset: Int64Builder,
        /// High watermark.
        hi_offset: Int64Builder,
        /// Low watermark.
        lo_offset: Int64Builder,
        /// librdkafka fetch state.
        fetch_state: Utf8Builder,
        /// active / paused.
        poll_state: Utf8Builder,
    }
}

struct_builder! {
    /// One running job of a report row.
    JobRows {
        /// Consumer group.
        consumer_group: Utf8Builder,
        /// Topic.
        topic: Utf8Builder,
        /// Partition.
        partition: Int64Builder,
        /// First offset.
        first_offset: Int64Builder,
        /// Last offset.
        last_offset: Int64Builder,
        /// Committed offset at start.
        committed_offset: Int64Builder,
        /// Messages.
        messages: Int64Builder,
        /// Job kind (the report's `type`).
        kind: Utf8Builder,
        /// Last update, Unix seconds.
        updated_at: Float64Builder,
    }
}

struct_builder! {
    /// Decoded process reports.
    ReportRows {
        /// Schema version.
        schema_version: Utf8Builder,
        /// Report time, Unix seconds.
        dispatched_at: Float64Builder,
        /// The process.
        process: ProcessRows,
        /// Processing statistics.
        stats: StatsRows,
        /// Assigned partitions, flattened from consumer groups and topics.
        partitions: ListBuilder<PartitionRows>,
        /// Running jobs.
        jobs: ListBuilder<JobRows>,
    }
}

impl ReportRows {
    fn push(&mut self, report: ConsumerReport) {
        self.schema_version.push_str(Some(&report.schema_version));
        self.dispatched_at.push(Some(report.dispatched_at));
        let (process, info) = (&mut self.process, &report.process);
        process.id.push_str(Some(&info.id));
        process.status.push_str(Some(&info.status));
        process.started_at.push(Some(info.started_at));
        process.memory_usage.push_u64(Some(info.memory_usage));
        process
            .memory_total_usage
            .push_u64(Some(info.memory_total_usage));
        process.memory_size.push_u64(Some(info.memory_size));
        process.cpus.push_u64(Some(info.cpus));
        process.threads.push_u64(Some(info.threads));
        for load in info.cpu_usage {
            process.cpu_usage.items.push(Some(load));
        }
        process.cpu_usage.close_row();
        for tag in &info.tags {
            process.tags.items.push_str(Some(tag));
        }
        process.tags.close_row();
        process.close_row();
        let (stats, figures) = (&mut self.stats, &report.stats);
        stats.busy.push_u64(Some(figures.busy));
        stats.enqueued.push_u64(Some(figures.enqueued));
        stats.utilization.push(Some(figures.utilization));
        stats.total.batches.push_u64(Some(figures.total.batches));
        stats.total.messages.push_u64(Some(figures.total.messages));
        stats.total.errors.push_u64(Some(figures.total.errors));
        stats.total.retries.push_u64(Some(figures.total.retries));
        stats.total.dead.push_u64(Some(figures.total.dead));
        stats.total.close_row();
        stats.lag.push(Some(report.lag()));
        stats.lag_stored.push(Some(report.lag_stored()));
        stats.close_row();
        let rows = &mut self.partitions.items;
        for place in report.partitions() {
            let partition = place.partition;
            rows.consumer_group.push_str(Some(place.consumer_group));
            rows.topic.push_str(Some(place.topic));
            rows.partition.push(Some(i64::from(partition.id)));
            rows.lag.push(Some(partition.lag));
            rows.lag_stored.push(Some(partition.lag_stored));
            rows.committed_offset.push(Some(partition.committed_offset));
            rows.stored_offset.push(Some(partition.stored_offset));
            rows.hi_offset.push(Some(partition.hi_offset));
            rows.lo_offset.push(Some(partition.lo_offset));
            rows.fetch_state.push_str(Some(&partition.fetch_state));
            rows.poll_state.push_str(Some(&partition.poll_state));
            rows.close_row();
        }
        self.partitions.close_row();
        let jobs = &mut self.jobs.items;
        for job in &report.jobs {
            jobs.consumer_group.push_str(Some(&job.consumer_group));
            jobs.topic.push_str(Some(&job.topic));
            jobs.partition.push(Some(i64::from(job.partition)));
            jobs.first_offset.push(Some(job.first_offset));
            jobs.last_offset.push(Some(job.last_offset));
            jobs.committed_offset.push(Some(job.committed_offset));
            jobs.messages.push_u64(Some(job.messages));
            jobs.kind.push_str(Some(&job.kind));
            jobs.updated_at.push(Some(job.updated_at));
            jobs.close_row();
        }
        self.jobs.close_row();
        self.close_row();
    }
}

/// Decodes every row of `input` as a zlib JSON consumer report.
pub fn decode_report_batch(input: &BinaryView<'_>, max_inflated: usize) -> BatchResult<ReportRows> {
    decode_document_rows(input, max_inflated, ReportRows::push)
}

struct_builder! {
    /// Decoded redelivery markers.
    MarkerRows {
        /// start / keepalive / end.
        kind: Utf8Builder,
        /// Queue partition.
        partition: Int64Builder,
        /// Queue offset.
        offset: Int64Builder,
        /// Redelivery deadline, ms (start and keepalive).
        deadline: Int64Builder,
        /// The message's key (start).
        key: BinaryBuilder,
        /// The message's value (start).
        value: BinaryBuilder,
        /// The message's headers (start; empty otherwise).
        headers: ListBuilder<HeaderRows>,
    }
}

impl MarkerRows {
    fn push(&mut self, marker: Marker) {
        let (kind, id, deadline, payload) = match &marker {
            Marker::Start {
                message_id,
                deadline,
                payload,
            } => ("start", message_id, Some(*deadline), Some(payload)),
            Marker::KeepAlive {
                message_id,
                deadline,
            } => ("keepalive", message_id, Some(*deadline), None),
            Marker::End { message_id } => ("end", message_id, None, None),
        };
        self.kind.push_str(Some(kind));
        self.partition.push(Some(i64::from(id.partition)));
        self.offset.push_u64(Some(id.offset));
        self.deadline.push_u64(deadline);
        self.key.push(payload.and_then(|p| p.key.as_deref()));
        self.value.push(payload.and_then(|p| p.value.as_deref()));
        for (name, value) in payload.map(|p| p.headers.as_slice()).unwrap_or_default() {
            self.headers.items.push(name, value.as_deref());
        }
        self.headers.close_row();
        self.close_row();
    }
}

/// Decodes every row of `input` as a binary redelivery marker.
pub fn decode_marker_batch(input: &BinaryView<'_>) -> BatchResult<MarkerRows> {
    decode_rows(input, marker_codec::decode_marker, MarkerRows::push)
}

/// The partition each row's partition key chooses among `partition_count` partitions, by
/// `hashing` (null for a null or empty key); no partitions fails the call.
pub fn partition_key_batch(
    input: &BinaryView<'_>,
    partition_count: u32,
    hashing: PartitionKeyHashing,
) -> Result<BatchResult<Int64Builder>, CoreError> {
    if partition_count == 0 {
        return Err(CoreError::InvalidArgument(
            "partition_count must be positive".into(),
        ));
    }
    Ok(BatchResult::run(
        Int64Builder::default(),
        input.len(),
        |out, row| match input.get(row) {
            Ok(key) => {
                let partition = key.and_then(|key| hashing.partition(key, partition_count));
                out.push(partition.map(i64::from));
                Ok(())
            }
            Err(err) => {
                out.push_null();
                Err(err)
            }
        },
    ))
}

/// The columns that describe the target of each scheduled row.
#[derive(Debug, Clone, Copy)]
pub struct ScheduleColumns<'a> {
    /// Target topics (required per row).
    pub target_topic: BinaryView<'a>,
    /// Epochs, Unix seconds (required per row).
    pub epoch: Int64View<'a>,
    /// Target message keys.
    pub key: Option<BinaryView<'a>>,
    /// Target partitions.
    pub partition: Option<Int64View<'a>>,
    /// Target partition keys.
    pub partition_key: Option<BinaryView<'a>>,
    /// Payload sizes in bytes (null: no payload), checked against the limits.
    pub payload_size: Option<Int64View<'a>>,
}

fn optional_text(column: Option<&BinaryView<'_>>, row: usize) -> Result<Option<String>, CoreError> {
    Ok(column
        .map(|column| column.get_str(row))
        .transpose()?
        .flatten()
        .map(str::to_owned))
}

/// The proxy headers (`array<struct<key, value>>`) of every row, validated as
/// [`envelope::schedule_headers`] does at `now_secs`; a row without topic or epoch fails.
pub fn schedule_headers_batch(
    columns: &ScheduleColumns<'_>,
    now_secs: i64,
    limits: &ScheduleLimits,
) -> BatchResult<ListBuilder<HeaderRows>> {
    let rows = columns.target_topic.len();
    BatchResult::run(ListBuilder::default(), rows, |out, row| {
        let headers = (|| {
            let topic = columns
                .target_topic
                .get_str(row)?
                .ok_or_else(|| CoreError::InvalidArgument("target topic is null".into()))?;
            let epoch = columns
                .epoch
                .get(row)
                .ok_or_else(|| CoreError::InvalidArgument("epoch is null".into()))?;
            let partition = columns
                .partition
                .and_then(|column| column.get(row))
                .map(|partition| {
                    i32::try_from(partition).map_err(|_| {
                        CoreError::InvalidArgument(format!("partition {partition} is out of range"))
                    })
                })
                .transpose()?;
            let address = TargetAddress {
                topic: topic.to_owned(),
                partition,
                key: optional_text(columns.key.as_ref(), row)?,
                partition_key: optional_text(columns.partition_key.as_ref(), row)?,
            };
            let payload_size = columns.payload_size.and_then(|column| column.get(row));
            envelope::check_payload_size(
                usize::try_from(payload_size.unwrap_or(0)).unwrap_or(0),
                limits,
            )?;
            envelope::schedule_headers(&address, epoch, now_secs, limits, Vec::new())
        })();
        match headers {
            Ok(headers) => {
                for (name, value) in &headers {
                    out.items.push(name, Some(value));
                }
                out.close_row();
                Ok(())
            }
            Err(err) => {
                out.push_null();
                Err(err)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::columnar::Column;
    use crate::codec::columnar::tests::buffers_of;

    fn errors(column: Column) -> Vec<Option<String>> {
        let Column::Bytes {
            len,
            validity,
            offsets,
            data,
            ..
        } = column
        else {
            panic!("bytes expected")
        };
        let view = BinaryView::new(validity.as_deref(), &offsets, &data, 0, len, false).unwrap();
        (0..len)
            .map(|row| view.get_str(row).unwrap().map(str::to_owned))
            .collect()
    }

    #[test]
    fn inflate_batch_round_trips_and_isolates_bad_rows() {
        let mut input = BinaryBuilder::default();
        let rows: [Option<&[u8]>; 4] = [Some(b"hello"), None, Some(b""), Some(b"x")];
        for row in rows {
            input.push(row.map(|r| zlib::deflate(r, 6).unwrap()).as_deref());
        }
        input.push(Some(b"corrupt"));
        let (validity, offsets, data) = buffers_of(input);
        let view = BinaryView::new(validity.as_deref(), &offsets, &data, 0, 5, false).unwrap();
        let (output, errs) = inflate_batch(&view, 100, true).finish().unwrap();
        let Column::Bytes {
            validity,
            offsets,
            data,
            large,
            ..
        } = output
        else {
            panic!("bytes expected")
        };
        assert!(large);
        let out = BinaryView::new(validity.as_deref(), &offsets, &data, 0, 5, true).unwrap();
        let read: Vec<_> = (0..5).map(|row| out.get(row).unwrap()).collect();
        assert_eq!(
            read,
            [Some(&b"hello"[..]), None, Some(b""), Some(b"x"), None]
        );
        let errs = errors(errs);
        assert_eq!(errs[..4], [None, None, None, None]);
        assert!(errs[4].as_deref().unwrap().contains("zlib"));
        assert!(deflate_batch(&view, 10, false).is_err());
    }

    /// The headers column and each row's error of schedules to `topics` due at `epochs`, with
    /// payloads of `sizes` bytes when given, built at 1_700_000_000 under `limits`.
    fn headers_at_now(
        topics: &[Option<&[u8]>],
        epochs: &[i64],
        sizes: Option<&[i64]>,
        limits: &ScheduleLimits,
    ) -> (Column, Vec<Option<String>>) {
        let int64_buffer =
            |values: &[i64]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
        let rows = topics.len();
        let mut column = BinaryBuilder::default();
        for topic in topics {
            column.push(*topic);
        }
        let (validity, offsets, data) = buffers_of(column);
        let epochs = int64_buffer(epochs);
        let sizes = sizes.map(int64_buffer);
        let columns = ScheduleColumns {
            target_topic: BinaryView::new(validity.as_deref(), &offsets, &data, 0, rows, false)
                .unwrap(),
            epoch: Int64View::new(None, &epochs, 0, rows).unwrap(),
            key: None,
            partition: None,
            partition_key: None,
            payload_size: sizes
                .as_deref()
                .map(|sizes| Int64View::new(None, sizes, 0, rows).unwrap()),
        };
        let (headers, errs) = schedule_headers_batch(&columns, 1_700_000_000, limits)
            .finish()
            .unwrap();
        (headers, errors(errs))
    }

    #[test]
    fn schedule_headers_match_the_single_proxy_builder() {
        let topics = [Some(&b"orders"[..]), None, Some(b"orders")];
        let epochs = [1_700_000_100, 1_700_000_100, 5];
        let limits = ScheduleLimits::default();
        let (headers, errs) = headers_at_now(&topics, &epochs, None, &limits);
        assert_eq!(errs[0], None);
        assert!(errs[1].as_deref().unwrap().contains("target topic is null"));
        assert!(errs[2].as_deref().unwrap().contains("in the past"));
        let Column::List { validity, item, .. } = headers else {
            panic!("list expected")
        };
        assert_eq!(validity, Some(vec![0b001]));
        let expected = envelope::schedule_headers(
            &TargetAddress {
                topic: "orders".into(),
                ..TargetAddress::default()
            },
            1_700_000_100,
            1_700_000_000,
            &limits,
            Vec::new(),
        )
        .unwrap();
        let Column::Struct { len, .. } = *item else {
            panic!("struct expected")
        };
        assert_eq!(len, expected.len());
    }

    #[test]
    fn a_row_whose_payload_is_over_the_limit_fails_naming_it() {
        let topics = [Some(&b"orders"[..]); 2];
        let sizes = [1_000_012, 1_000_013];
        let limits = ScheduleLimits::default();
        let (_, errs) = headers_at_now(&topics, &[1_700_000_100; 2], Some(&sizes), &limits);
        assert_eq!(errs[0], None);
        assert!(
            errs[1].as_deref().unwrap().contains("max_payload_size"),
            "{errs:?}"
        );
    }

    #[test]
    fn partition_keys_choose_the_partitions_the_rule_gives() {
        let keys = [
            Some("zamówienie-3".as_bytes()),
            None,
            Some(b""),
            Some(b"customer-7"),
        ];
        let mut column = BinaryBuilder::default();
        for key in keys {
            column.push(key);
        }
        let (validity, offsets, data) = buffers_of(column);
        let view = BinaryView::new(validity.as_deref(), &offsets, &data, 0, 4, false).unwrap();
        for hashing in [PartitionKeyHashing::WaterDrop, PartitionKeyHashing::Bytes] {
            let (partitions, errs) = partition_key_batch(&view, 5, hashing)
                .unwrap()
                .finish()
                .unwrap();
            assert_eq!(errors(errs), [None, None, None, None]);
            let Column::Int64 {
                validity, values, ..
            } = partitions
            else {
                panic!("int64 expected")
            };
            assert_eq!(validity, Some(vec![0b1001]));
            let partition =
                |row: usize| i64::from_le_bytes(values[row * 8..row * 8 + 8].try_into().unwrap());
            for row in [0, 3] {
                let expected = hashing.partition(keys[row].unwrap(), 5).unwrap();
                assert_eq!(partition(row), i64::from(expected));
            }
        }
        assert!(partition_key_batch(&view, 0, PartitionKeyHashing::WaterDrop).is_err());
    }
}
