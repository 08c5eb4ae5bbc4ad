//! The settings of a [`QueueConsumer`] and of a [`RedeliveryTracker`] beyond librdkafka's own,
//! and their rules (validated once, here, when the engine is created).
//!
//! [`QueueConsumer`]: super::QueueConsumer
//! [`RedeliveryTracker`]: super::RedeliveryTracker

use std::time::Duration;

use crate::daemon::require_group_id;
use crate::error::{KafkaIoError, KafkaResult};
use crate::topic_roles::require_not_read;

/// Settings of a [`QueueConsumer`](super::QueueConsumer) beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConsumerOptions {
    /// The queue topic to consume.
    pub queue_topic: String,
    /// The markers topic the tracker reads.
    pub markers_topic: String,
    /// Consumer group of the queue consumers.
    pub group_id: String,
    /// Time a handler has before its message is redelivered [60 s].
    pub redelivery_timeout: Duration,
    /// Deadline for writing a batch's START markers and for metadata requests [30 s].
    pub marker_timeout: Duration,
    /// Most messages read, marked and committed at once [500].
    pub max_batch_size: usize,
    /// Write a KEEPALIVE every half timeout for each message handed out and not yet acked or
    /// nacked, on the engine's marker thread [true].
    pub auto_keepalive: bool,
    /// Where a message goes whose START marker the markers topic refuses for good (too large
    /// for it); `None`: handed back to the caller by `fetch` [None].
    pub dead_letter_topic: Option<String>,
}

/// Settings of a [`RedeliveryTracker`](super::RedeliveryTracker) beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedeliveryOptions {
    /// Where redelivered messages go.
    pub queue_topic: String,
    /// The markers topic to track.
    pub markers_topic: String,
    /// Consumer group of the trackers of this markers topic.
    pub group_id: String,
    /// Redeliveries before a message is dead-lettered [3].
    pub max_redeliveries: u32,
    /// Where messages go after `max_redeliveries`; `None` logs, counts and drops them.
    pub dead_letter_topic: Option<String>,
    /// Fall back to the wall clock when no marker was read for this long [60 s].
    pub use_now_if_no_marker_seen: Duration,
    /// Commit after this many markers of a partition [1000] ...
    pub num_offsets_per_commit: u64,
    /// ... or after this long [5 s], and on stop.
    pub commit_interval: Duration,
    /// Longest pause between retries of a failed redelivery write [30 s].
    pub max_backoff: Duration,
    /// Deadline of one synchronous redelivery write [30 s].
    pub produce_timeout: Duration,
}

impl Default for RedeliveryOptions {
    fn default() -> Self {
        RedeliveryOptions {
            queue_topic: String::new(),
            markers_topic: String::new(),
            group_id: "ferrokafka-redelivery".to_owned(),
            max_redeliveries: 3,
            dead_letter_topic: None,
            use_now_if_no_marker_seen: Duration::from_secs(60),
            num_offsets_per_commit: 1000,
            commit_interval: Duration::from_secs(5),
            max_backoff: Duration::from_secs(30),
            produce_timeout: Duration::from_secs(30),
        }
    }
}

impl QueueConsumerOptions {
    pub(super) fn validate(&self) -> KafkaResult<()> {
        require_topics(&self.queue_topic, &self.markers_topic)?;
        require_group_id(&self.group_id)?;
        require_dead_letter_topic(
            self.dead_letter_topic.as_deref(),
            &self.queue_topic,
            &self.markers_topic,
        )
    }
}

impl RedeliveryOptions {
    pub(super) fn validate(&self) -> KafkaResult<()> {
        require_topics(&self.queue_topic, &self.markers_topic)?;
        require_group_id(&self.group_id)?;
        require_dead_letter_topic(
            self.dead_letter_topic.as_deref(),
            &self.queue_topic,
            &self.markers_topic,
        )?;
        if self.num_offsets_per_commit == 0 {
            return Err(KafkaIoError::InvalidArgument(
                "num_offsets_per_commit must be positive, got 0".to_owned(),
            ));
        }
        Ok(())
    }
}

fn require_topics(queue_topic: &str, markers_topic: &str) -> KafkaResult<()> {
    KafkaIoError::check_topic("queue_topic", queue_topic)?;
    KafkaIoError::check_topic("markers_topic", markers_topic)?;
    if queue_topic == markers_topic {
        return Err(KafkaIoError::InvalidArgument(
            "queue_topic and markers_topic must differ".to_owned(),
        ));
    }
    Ok(())
}

fn require_dead_letter_topic(
    topic: Option<&str>,
    queue_topic: &str,
    markers_topic: &str,
) -> KafkaResult<()> {
    if let Some(topic) = topic {
        KafkaIoError::check_topic("dead_letter_topic", topic)?;
    }
    require_not_read(
        "dead_letter_topic",
        topic,
        [
            ("the queue topic", queue_topic),
            ("the markers topic", markers_topic),
        ],
    )
}
