//! The [`Client`] reading a topic back, from the beginning to its end as of the call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrokafka_core::FirstRecords;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::{Client, EndIsExpected};
use crate::error::{KafkaIoError, KafkaResult};
use crate::record::{ReceivedRecord, TopicName};
use crate::undecodable::undecodable_error;

impl Client {
    /// Reads every partition of `topic` from the beginning up to its end as of this call, at most
    /// `max_records` records: the first ones in partition then offset order (see
    /// [`FirstRecords`]), whichever partitions answer first.
    pub fn read_topic(
        &self,
        topic: &str,
        max_records: usize,
        timeout: Duration,
    ) -> KafkaResult<Vec<ReceivedRecord>> {
        KafkaIoError::check_topic("topic", topic)?;
        let deadline = Instant::now() + timeout;
        let cluster = self.list_topics_until("read_topic", Some(topic), deadline, timeout)?;
        let partitions: Vec<i32> = cluster
            .topics
            .iter()
            .filter(|t| t.name == topic)
            .flat_map(|t| t.partitions.iter().map(|p| p.id))
            .collect();
        if partitions.is_empty() {
            return Err(KafkaIoError::InvalidArgument(format!(
                "topic {topic:?} does not exist"
            )));
        }
        let consumer = EndIsExpected::reader(
            &self.settings,
            "ferrokafka-read-topic",
            &[],
            Some(Arc::clone(&self.watch)),
        )?;
        let mut assignment = TopicPartitionList::new();
        for &p in &partitions {
            assignment
                .add_partition_offset(topic, p, Offset::Beginning)
                .map_err(|e| self.error("read_topic", e, timeout))?;
        }
        consumer
            .assign(&assignment)
            .map_err(|e| self.error("read_topic", e, timeout))?;
        let mut first = FirstRecords::new(max_records, partitions);
        let mut names = TopicName::default();
        while !first.done() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out(&format!("read_topic({topic})"), timeout));
            }
            match consumer.poll(left.min(Duration::from_millis(100))) {
                None => {}
                Some(Ok(message)) => {
                    first.take(message.partition(), message.offset(), || {
                        ReceivedRecord::from_message_named(&message, &mut names)
                    });
                }
                Some(Err(KafkaError::PartitionEOF(p))) => first.reached_end(p),
                // A refused connection comes as an error event, whose description the context
                // took: that names the cause. A batch that cannot be decoded would be fetched
                // again until the deadline: said now, and why.
                Some(Err(e)) => {
                    return Err(
                        undecodable_error("read_topic", &format!("topic {topic:?}"), &e)
                            .or_else(|| self.watch.failure().map(|f| f.error("read_topic")))
                            .unwrap_or_else(|| self.error("read_topic", e, timeout)),
                    );
                }
            }
        }
        let (records, left_out) = first.finish();
        if left_out {
            log::info!(
                "read_topic({topic}): the first {max_records} records by (partition, offset); \
                 the topic holds more"
            );
        }
        Ok(records)
    }
}
