//! The `ferrokafka._native` extension module: registration only.

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
mod document_view;
mod engine_drops;
mod engine_log;
mod errors;
mod flat_record;
mod gc_tracking;
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

// What the extension module exports, grouped by the binding module that defines it.
#[pyo3::pymodule(gil_used = false)]
mod _native {
    #[pymodule_export]
    use crate::{
        arrow::{
            decode_marker_batch, decode_report_batch, decode_state_batch, deflate_batch,
            inflate_batch, partition_key_batch, schedule_headers_batch,
        },
        batch::{PyBatch, PyBatchIterator},
        client::{
            PyBrokerMetadata, PyClient, PyClusterMetadata, PyNewTopic, PyPartitionMetadata,
            PyTopicMetadata, check_topic_name,
        },
        codec::{
            PyMarker, PyProxyMessage, PyProxyRecord, cancel_proxy, decode_error_report,
            decode_marker, decode_process_report, decode_state_report, deflate,
            encode_error_report, encode_marker, encode_process_report, encode_state_report,
            inflate, parse_proxy_headers, schedule_proxy,
        },
        consumer::{PyRawConsumer, validate_consumer_options},
        consumer_events::{
            PyAssignment, PyConsumerAssigned, PyConsumerCaughtUp, PyConsumerCommitted,
            PyConsumerDraining, PyConsumerError, PyConsumerLoadControl, PyConsumerUnassigned,
        },
        consumer_stats::{PyConsumerCounters, PyConsumerStats, PyPartitionStats},
        deadline_queue::PyDeadlineQueue,
        delivery_report::PyDeliveryReport,
        engine_drops::{on_engine_thread, wait_for_background_closes},
        gc_tracking::{gc_track, gc_untrack},
        message::PyMessage,
        producer::{PyProducerStats, PyRawAsyncProducer},
        producer_events::{
            PyProducerDelivering, PyProducerDropped, PyProducerFailed, PyProducerRetrying,
            PyProducerShutDown,
        },
        redelivery::{
            PyRawQueueConsumer, PyRawRedeliveryTracker, queue_dead_letter_headers,
            redelivery_count_in,
        },
        redelivery_status::{PyQueueConsumerStats, PyRedeliveryPartitionStatus},
        report_samples::{PyJobSample, PyPartitionSample, PyProcessFacts, PySourceSample},
        scheduling::{PyRawScheduler, PySchedulerPartitionStatus},
        state_report_view::{PyStateReportView, view_state_report},
        statistics::{PyBrokerOffsets, PyGroupStatistics},
        tracking::{
            PyConsumerReportView, PyErrorReportView, PyReportBuilder, PyReportPartition,
            consumer_report_violations_of, error_report_violations_of, view_consumer_report,
            view_error_report,
        },
    };
    use pyo3::prelude::*;

    /// The engine log bridge and the constants Python shares with the engines.
    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        // Engine threads log through the `log` crate; this forwards their records to `logging`
        // under the Rust module path (e.g. `ferrokafka_kafka.scheduling.dispatcher`), and to
        // stderr at exit.
        crate::engine_log::install(m)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("librdkafka_version", ferrokafka_kafka::librdkafka_version())?;
        m.add("DEFAULT_MAX_INFLATED", crate::codec::DEFAULT_MAX_INFLATED)?;
        m.add(
            "CONSUMER_CLOSE_SECONDS",
            ferrokafka_kafka::consumer::CLOSE_WITHIN.as_secs_f64(),
        )?;
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
}
