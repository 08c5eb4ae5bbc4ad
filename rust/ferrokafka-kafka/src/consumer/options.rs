//! What a [`ConcurrentConsumer`](super::ConcurrentConsumer) consumes and how: the
//! [`ConsumerOptions`] beyond librdkafka's own (validated once, here), the subscriptions and
//! where they start. The [`ErrorPolicy`] for handler exceptions, a pure rule, lives in the core;
//! it is validated here with the rest.

use std::time::Duration;

use ferrokafka_core::OrderBy;
pub use ferrokafka_core::{ErrorPolicy, OnError};

use crate::error::{KafkaIoError, KafkaResult};
use crate::topic_roles::require_not_read;

/// Where an explicitly assigned partition starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartAt {
    /// The group's committed offset, else (and always without a group) `auto.offset.reset`.
    Stored,
    /// The first offset still in the log.
    Beginning,
    /// The end of the log: only records produced from now on.
    End,
    /// This offset.
    Offset(i64),
    /// The first record whose timestamp is at or after this many ms since the epoch.
    Timestamp(i64),
}

/// What to consume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subscription {
    /// Every partition of a topic: assigned by the group, or, without `group.id`, all of them
    /// assigned to this consumer (starting at `auto.offset.reset`).
    Topic(String),
    /// One partition, assigned by this consumer alone.
    Partition {
        /// Topic name.
        topic: String,
        /// Partition number.
        partition: i32,
        /// Where to start.
        start: StartAt,
    },
}

impl Subscription {
    /// Whether this starts wherever the group committed, else at `auto.offset.reset`: a whole
    /// topic, or a partition given no start of its own.
    pub fn has_no_start_of_its_own(&self) -> bool {
        matches!(
            self,
            Subscription::Topic(_)
                | Subscription::Partition {
                    start: StartAt::Stored,
                    ..
                }
        )
    }
}

/// Settings of a [`ConcurrentConsumer`](super::ConcurrentConsumer) beyond librdkafka's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerOptions {
    /// What to consume: topic names, or explicit partitions, not both.
    pub subscriptions: Vec<Subscription>,
    /// Most records per batch handed to a worker [unbounded].
    pub max_batch_size: Option<usize>,
    /// How often finished offsets are committed [5 s].
    pub commit_interval: Duration,
    /// A partition is not polled while this many records are queued, and again at half [1000].
    pub max_queue_records: usize,
    /// A partition is not polled while this many bytes are queued, and again at half [1 MiB].
    pub max_queue_bytes: usize,
    /// What a handler exception does to its batch [commit].
    pub errors: ErrorPolicy,
    /// What stays in order: a partition (one batch at a time) or each key [partition].
    pub ordering: OrderBy,
    /// With ordering by key, most batches of one partition handled at once [8].
    pub max_concurrency: usize,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            subscriptions: Vec::new(),
            max_batch_size: None,
            commit_interval: Duration::from_secs(5),
            max_queue_records: 1000,
            max_queue_bytes: 1024 * 1024,
            errors: ErrorPolicy::default(),
            ordering: OrderBy::Partition,
            max_concurrency: 8,
        }
    }
}

impl ConsumerOptions {
    /// Batches of one partition that may be handed out at once.
    pub(super) fn concurrency(&self) -> usize {
        match self.ordering {
            OrderBy::Partition => 1,
            OrderBy::Key => self.max_concurrency,
        }
    }

    /// Checks everything: the settings and the subscriptions (which may not mix topic names
    /// with explicit partitions in a consumer `group`).
    pub(super) fn validate(&self, group: bool) -> KafkaResult<()> {
        self.validate_settings()?;
        let invalid = |message: String| Err(KafkaIoError::InvalidArgument(message));
        if self.subscriptions.is_empty() {
            return invalid("subscriptions must name at least one topic or partition".to_owned());
        }
        let by_topic = self
            .subscriptions
            .iter()
            .filter(|s| matches!(s, Subscription::Topic(_)))
            .count();
        // Without a group a topic name stands for all its partitions, which mix freely with
        // explicit ones; a group assigns topics itself and cannot also take explicit partitions.
        if group && by_topic > 0 && by_topic < self.subscriptions.len() {
            return invalid(
                "subscriptions cannot mix topic names (group-assigned) with explicit partitions"
                    .to_owned(),
            );
        }
        let subscribed = self.subscriptions.iter().map(|s| {
            let (Subscription::Topic(topic) | Subscription::Partition { topic, .. }) = s;
            ("a subscribed topic", topic.as_str())
        });
        require_not_read(
            "dead_letter_topic",
            self.errors.dead_letter_topic.as_deref(),
            subscribed,
        )?;
        for subscription in &self.subscriptions {
            let (Subscription::Topic(topic) | Subscription::Partition { topic, .. }) = subscription;
            // librdkafka reads a subscribed name starting with '^' as a regular expression;
            // any other is a topic name. Neither may hold a NUL byte (rdkafka panicked on one).
            if matches!(subscription, Subscription::Topic(_)) && topic.starts_with('^') {
                if topic.contains('\0') {
                    return invalid(format!(
                        "subscription pattern {topic:?} must not contain a NUL byte"
                    ));
                }
            } else {
                KafkaIoError::check_topic("subscription topic", topic)?;
            }
            match subscription {
                Subscription::Partition { partition, .. } if *partition < 0 => {
                    return invalid(format!("partition must be >= 0, got {partition}"));
                }
                Subscription::Partition {
                    start: StartAt::Offset(n) | StartAt::Timestamp(n),
                    ..
                } if *n < 0 => {
                    return invalid(format!("start offset or timestamp must be >= 0, got {n}"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks the settings other than the subscriptions: the one place their rules live (the
    /// bindings call it when a Python options object is created, before any subscription).
    pub fn validate_settings(&self) -> KafkaResult<()> {
        let invalid = |message: String| Err(KafkaIoError::InvalidArgument(message));
        if self.max_batch_size == Some(0) {
            return invalid(
                "max_batch_size must be positive (or None: unbounded), got 0".to_owned(),
            );
        }
        if self.commit_interval.is_zero() {
            return invalid("commit_interval must be positive".to_owned());
        }
        if self.errors.on_error == OnError::DeadLetter
            && self
                .errors
                .dead_letter_topic
                .as_deref()
                .is_none_or(str::is_empty)
        {
            return invalid("on_error='dead_letter' needs dead_letter_topic='<topic>'".to_owned());
        }
        // An empty name would be written to for ever (librdkafka refuses it and the writer
        // sends again), and the batch's offsets never committed.
        if self.errors.dead_letter_topic.as_deref() == Some("") {
            return invalid("dead_letter_topic must name a topic (or be None), got ''".to_owned());
        }
        if self.max_concurrency == 0 {
            return invalid("max_concurrency must be at least 1".to_owned());
        }
        if self.max_queue_records < 2 || self.max_queue_bytes < 2 {
            return invalid(
                "max_queue_records and max_queue_bytes must be at least 2 (resume happens at half)"
                    .to_owned(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Python `ConsumerOptions` is checked alone when it is created; the subscriptions only
    /// when the consumer starts.
    #[test]
    fn the_settings_are_checked_without_the_subscriptions() {
        let options = ConsumerOptions::default();
        assert!(options.validate_settings().is_ok());
        assert!(options.validate(true).is_err(), "no subscription");
        let dead_letter = ConsumerOptions {
            errors: ErrorPolicy {
                on_error: OnError::DeadLetter,
                ..ErrorPolicy::default()
            },
            ..ConsumerOptions::default()
        };
        let refused = dead_letter.validate_settings().unwrap_err().to_string();
        assert!(refused.contains("dead_letter_topic"), "{refused}");
    }
}
