//! The `ferrokafka._native` extension module: registration only.

use pyo3::prelude::*;

mod arrow;
mod arrow_c;
mod batch;
mod blocking;
mod client;
mod codec;
mod consumer;
mod consumer_events;
mod consumer_stats;
mod convert;
mod daemon_class;
mod deadline_queue;
mod delivery_report;
mod engine_log;
mod errors;
mod flat_record;
mod message;
mod options;
mod producer;
mod producer_events;
mod producer_waiters;
mod redelivery;
mod redelivery_status;
mod report_samples;
mod scheduling;
mod state_report_view;
mod token_callback;

mod statistics;
mod tracking;

/// Every Rust allocation of the extension (see Cargo.toml for why not the system allocator).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Engine threads log through the `log` crate; this forwards their records to `logging`
    // under the Rust module path (e.g. `ferrokafka_kafka.scheduling.dispatcher`), and to stderr
    // at exit.
    engine_log::install(m)?;
    m.add_class::<client::PyClient>()?;
    m.add_class::<client::PyNewTopic>()?;
    m.add_class::<client::PyClusterMetadata>()?;
    m.add_class::<client::PyTopicMetadata>()?;
    m.add_class::<client::PyPartitionMetadata>()?;
    m.add_class::<client::PyBrokerMetadata>()?;
    m.add_class::<message::PyMessage>()?;
    m.add_class::<producer::PyRawAsyncProducer>()?;
    m.add_class::<producer::PyProducerStats>()?;
    m.add_class::<delivery_report::PyDeliveryReport>()?;
    m.add_class::<producer_events::PyProducerFailed>()?;
    m.add_class::<producer_events::PyProducerDropped>()?;
    m.add_class::<producer_events::PyProducerDelivering>()?;
    m.add_class::<producer_events::PyProducerRetrying>()?;
    m.add_class::<producer_events::PyProducerShutDown>()?;
    m.add_class::<consumer::PyRawConsumer>()?;
    m.add_function(wrap_pyfunction!(consumer::validate_consumer_options, m)?)?;
    m.add_class::<consumer_events::PyAssignment>()?;
    m.add_class::<consumer_events::PyConsumerAssigned>()?;
    m.add_class::<consumer_events::PyConsumerDraining>()?;
    m.add_class::<consumer_events::PyConsumerUnassigned>()?;
    m.add_class::<consumer_events::PyConsumerCaughtUp>()?;
    m.add_class::<consumer_events::PyConsumerLoadControl>()?;
    m.add_class::<consumer_events::PyConsumerCommitted>()?;
    m.add_class::<consumer_events::PyConsumerError>()?;
    m.add_class::<consumer_stats::PyConsumerStats>()?;
    m.add_class::<consumer_stats::PyPartitionStats>()?;
    m.add_class::<consumer_stats::PyConsumerCounters>()?;
    m.add_class::<statistics::PyBrokerOffsets>()?;
    m.add_class::<statistics::PyGroupStatistics>()?;
    m.add_class::<batch::PyBatch>()?;
    m.add_class::<batch::PyBatchIterator>()?;
    m.add_class::<scheduling::PyRawScheduler>()?;
    m.add_class::<scheduling::PySchedulerPartitionStatus>()?;
    m.add_class::<redelivery::PyRawQueueConsumer>()?;
    m.add_class::<redelivery::PyRawRedeliveryTracker>()?;
    m.add_function(wrap_pyfunction!(redelivery::queue_dead_letter_headers, m)?)?;
    m.add_function(wrap_pyfunction!(redelivery::redelivery_count_in, m)?)?;
    m.add_class::<redelivery_status::PyQueueConsumerStats>()?;
    m.add_class::<redelivery_status::PyRedeliveryPartitionStatus>()?;
    m.add_class::<deadline_queue::PyDeadlineQueue>()?;
    m.add_class::<codec::PyMarker>()?;
    m.add_class::<codec::PyProxyMessage>()?;
    m.add_class::<codec::PyProxyRecord>()?;
    m.add_function(wrap_pyfunction!(codec::deflate, m)?)?;
    m.add_function(wrap_pyfunction!(codec::inflate, m)?)?;
    m.add_function(wrap_pyfunction!(codec::encode_state_report, m)?)?;
    m.add_function(wrap_pyfunction!(codec::decode_state_report, m)?)?;
    m.add_function(wrap_pyfunction!(codec::encode_process_report, m)?)?;
    m.add_function(wrap_pyfunction!(codec::decode_process_report, m)?)?;
    m.add_function(wrap_pyfunction!(codec::encode_error_report, m)?)?;
    m.add_function(wrap_pyfunction!(codec::decode_error_report, m)?)?;
    m.add_class::<tracking::PyReportBuilder>()?;
    m.add_class::<report_samples::PyProcessFacts>()?;
    m.add_class::<report_samples::PySourceSample>()?;
    m.add_class::<report_samples::PyPartitionSample>()?;
    m.add_class::<report_samples::PyJobSample>()?;
    m.add_class::<tracking::PyConsumerReportView>()?;
    m.add_class::<tracking::PyReportPartition>()?;
    m.add_class::<tracking::PyErrorReportView>()?;
    m.add_function(wrap_pyfunction!(tracking::view_consumer_report, m)?)?;
    m.add_function(wrap_pyfunction!(tracking::view_error_report, m)?)?;
    m.add_class::<state_report_view::PyStateReportView>()?;
    m.add_function(wrap_pyfunction!(state_report_view::view_state_report, m)?)?;
    m.add_function(wrap_pyfunction!(
        tracking::consumer_report_violations_of,
        m
    )?)?;
    m.add_function(wrap_pyfunction!(tracking::error_report_violations_of, m)?)?;
    m.add_function(wrap_pyfunction!(codec::encode_marker, m)?)?;
    m.add_function(wrap_pyfunction!(codec::decode_marker, m)?)?;
    m.add_function(wrap_pyfunction!(codec::schedule_proxy, m)?)?;
    m.add_function(wrap_pyfunction!(codec::cancel_proxy, m)?)?;
    m.add_function(wrap_pyfunction!(codec::parse_proxy_headers, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::inflate_batch, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::deflate_batch, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::partition_key_batch, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::decode_state_batch, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::decode_report_batch, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::decode_marker_batch, m)?)?;
    m.add_function(wrap_pyfunction!(arrow::schedule_headers_batch, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("librdkafka_version", ferrokafka_kafka::librdkafka_version())?;
    m.add(
        "WATERDROP_MAX_PAYLOAD_SIZE",
        ferrokafka_core::codec::envelope::WATERDROP_MAX_PAYLOAD_SIZE,
    )?;
    use ferrokafka_kafka::error::{TIMED_OUT_CODE, TIMED_OUT_NAME};
    m.add("TIMED_OUT_CODE", TIMED_OUT_CODE)?;
    m.add("TIMED_OUT_NAME", TIMED_OUT_NAME)?;
    use ferrokafka_kafka::headers;
    m.add("REDELIVERY_COUNT_HEADER", headers::REDELIVERY_COUNT_HEADER)?;
    m.add("ORIGINAL_TOPIC_HEADER", headers::ORIGINAL_TOPIC_HEADER)?;
    m.add(
        "ORIGINAL_PARTITION_HEADER",
        headers::ORIGINAL_PARTITION_HEADER,
    )?;
    m.add("ORIGINAL_OFFSET_HEADER", headers::ORIGINAL_OFFSET_HEADER)?;
    m.add(
        "DEAD_LETTER_HEADERS",
        pyo3::types::PyTuple::new(m.py(), headers::DEAD_LETTER_HEADERS)?,
    )?;
    Ok(())
}
