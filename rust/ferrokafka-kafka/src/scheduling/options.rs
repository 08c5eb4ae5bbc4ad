//! [`SchedulerOptions`]: the settings of a scheduler beyond librdkafka's own, and their rules
//! (validated once, here, when the daemon starts).

use std::time::Duration;

use ferrokafka_core::PartitionKeyHashing;

use crate::daemon::require_group_id;
use crate::error::{KafkaIoError, KafkaResult};
use crate::topic_roles::require_not_read;

/// Settings of a [`Scheduler`](super::Scheduler) beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerOptions {
    /// The schedules topics to serve.
    pub schedules_topics: Vec<String>,
    /// Consumer group of the daemons serving these topics.
    pub group_id: String,
    /// Most messages (targets plus tombstones) per dispatched chunk [1000].
    pub flush_batch_size: usize,
    /// Least time between two periodic state reports of a partition.
    pub state_interval: Duration,
    /// Appended to a schedules topic's name to name its states topic ["_states"].
    pub states_postfix: String,
    /// How far ahead schedules keep their payload in memory (see `ScheduleTracker`).
    pub horizon: Duration,
    /// Deadline of one round of sends (or of a transaction commit).
    pub dispatch_timeout: Duration,
    /// Where schedules whose target is refused for good are copied (none: only counted and
    /// logged; their proxy then stays on the schedules topic).
    pub dead_letter_topic: Option<String>,
    /// How a target's `partition_key` is hashed into its partition [as WaterDrop].
    pub partition_key_hashing: PartitionKeyHashing,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            schedules_topics: Vec::new(),
            // Karafka's group: Ruby and Python daemons on one topic share its partitions.
            group_id: "karafka_scheduled_messages".to_owned(),
            flush_batch_size: 1000,
            // Karafka's tick.
            state_interval: Duration::from_secs(5),
            states_postfix: "_states".to_owned(),
            horizon: Duration::from_secs(3600),
            dispatch_timeout: Duration::from_secs(30),
            dead_letter_topic: None,
            partition_key_hashing: PartitionKeyHashing::default(),
        }
    }
}

impl SchedulerOptions {
    pub(super) fn validate(&self) -> KafkaResult<()> {
        if self.schedules_topics.is_empty() {
            return Err(KafkaIoError::InvalidArgument(
                "at least one schedules topic is required".to_owned(),
            ));
        }
        for topic in &self.schedules_topics {
            KafkaIoError::check_topic("schedules topic", topic)?;
        }
        require_group_id(&self.group_id)?;
        if let Some(topic) = &self.dead_letter_topic {
            // Caught now, not when the broker first refuses a dead-letter copy.
            KafkaIoError::check_topic("dead_letter_topic", topic)?;
        }
        let schedules = || {
            self.schedules_topics
                .iter()
                .map(|t| ("a schedules topic", t.as_str()))
        };
        require_not_read(
            "dead_letter_topic",
            self.dead_letter_topic.as_deref(),
            schedules(),
        )?;
        if self.states_postfix.is_empty() {
            return Err(KafkaIoError::InvalidArgument(
                "states_postfix must not be empty: the states topic would be the schedules topic"
                    .to_owned(),
            ));
        }
        for topic in &self.schedules_topics {
            let states = format!("{topic}{}", self.states_postfix);
            require_not_read("a states topic", Some(&states), schedules())?;
        }
        if self.flush_batch_size < 2 {
            return Err(KafkaIoError::InvalidArgument(format!(
                "flush_batch_size must be >= 2 (a target and its tombstone), got {}",
                self.flush_batch_size
            )));
        }
        Ok(())
    }
}
