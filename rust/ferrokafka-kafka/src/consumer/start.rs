//! Where consuming starts ([`start_consuming`]): a group consumer subscribes; otherwise the
//! explicit partitions (a topic name standing for all of its partitions) are assigned, with
//! timestamps resolved to offsets and, without a group, the high watermark to report reaching.
//!
//! A consumer without a group still carries a `group.id` (librdkafka refuses `assign` without
//! one), but it never asks that group anything: a partition it was given no start for starts
//! where `auto.offset.reset` says, as an explicit offset. Left as librdkafka's "stored offset",
//! every such consumer in a cluster would first look up the committed offsets of one shared
//! group id: a coordinator round trip before any record, a start that waits while that group's
//! coordinator is away (whatever the partitions' leaders do), a refusal where ACLs grant the
//! topic but not the group, and a start wherever anyone else committed under that name.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::{Offset, TopicPartitionList};

use super::events::ConsumerEvent;
use super::options::{StartAt, Subscription};
use super::state::{Handle, Shared};
use crate::error::{KafkaIoError, KafkaResult};

/// How long network lookups at start-up (watermarks, offsets for timestamps) may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Subscribes (a group consumer) or assigns the explicit partitions, each with its own split
/// queue, resolving timestamps and, without a group, whole topics and high watermarks.
pub(super) fn start_consuming(
    shared: &Shared,
    consumer: &Arc<Handle>,
    start_without_group: Option<Offset>,
    bootstrap: Option<&str>,
) -> KafkaResult<()> {
    let error = |operation: &str, e: KafkaError| {
        let no_broker = matches!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
        );
        let error = match KafkaIoError::from_rdkafka(operation, e, LOOKUP_TIMEOUT, bootstrap) {
            // librdkafka ends a lookup that no broker answered within its timeout (brokers
            // away, or frozen) as a transport failure: a timeout, as every such wait is.
            KafkaIoError::Broker { .. } if no_broker => {
                KafkaIoError::timed_out(operation, LOOKUP_TIMEOUT, bootstrap)
            }
            other => other,
        };
        shared.watch.explain_timeout(error)
    };
    let subscriptions = &shared.options.subscriptions;
    if shared.group
        && subscriptions
            .iter()
            .all(|s| matches!(s, Subscription::Topic(_)))
    {
        let topics: Vec<&str> = subscriptions
            .iter()
            .filter_map(|s| match s {
                Subscription::Topic(t) => Some(t.as_str()),
                Subscription::Partition { .. } => None,
            })
            .collect();
        consumer
            .subscribe(&topics)
            .map_err(KafkaIoError::subscribing("the topics", &topics))?;
    } else {
        let subscriptions = whole_topics(consumer, subscriptions, &error)?;
        let partitions =
            resolve_partitions(consumer, &subscriptions, shared.group, start_without_group)
                .map_err(|e| error("assign", e))?;
        let mut tpl = TopicPartitionList::new();
        for (topic, partition, offset, _) in &partitions {
            tpl.add_partition_offset(topic, *partition, *offset)
                .map_err(|e| error("assign", e))?;
        }
        consumer.assign(&tpl).map_err(|e| error("assign", e))?;
        let caught_up: Vec<(String, i32, i64)> = partitions
            .iter()
            .filter_map(|(t, p, _, target)| match target {
                CatchUp::Already(high) => Some((t.clone(), *p, *high)),
                _ => None,
            })
            .collect();
        let assigned = shared.add_slots(
            partitions
                .into_iter()
                .map(|(t, p, _, target)| {
                    let to = match target {
                        CatchUp::At(high) => Some(high),
                        CatchUp::Already(_) | CatchUp::Untracked => None,
                    };
                    (t, p, to)
                })
                .collect(),
        );
        shared.emit(ConsumerEvent::Assigned(assigned));
        for (topic, partition, offset) in caught_up {
            shared.emit(ConsumerEvent::CaughtUp {
                topic,
                partition,
                offset,
            });
        }
    }
    Ok(())
}

/// What a consumer without a group reports as caught up.
enum CatchUp {
    /// Report reaching this high watermark.
    At(i64),
    /// Nothing to read at start: report at once.
    Already(i64),
    /// A group consumer: caught-up is not reported.
    Untracked,
}

/// Replaces each topic name (of a consumer without a group) by all partitions of the topic,
/// each with no start of its own (so at `auto.offset.reset`).
fn whole_topics(
    consumer: &Handle,
    subscriptions: &[Subscription],
    error: &dyn Fn(&str, KafkaError) -> KafkaIoError,
) -> KafkaResult<Vec<Subscription>> {
    let mut expanded = Vec::with_capacity(subscriptions.len());
    for subscription in subscriptions {
        let Subscription::Topic(topic) = subscription else {
            expanded.push(subscription.clone());
            continue;
        };
        let metadata = consumer
            .fetch_metadata(Some(topic), LOOKUP_TIMEOUT)
            .map_err(|e| error("assign", e))?;
        let found = metadata.topics().iter().find(|t| t.name() == topic);
        let partitions = match found {
            Some(t) if t.error().is_none() && !t.partitions().is_empty() => t.partitions(),
            _ => {
                return Err(KafkaIoError::InvalidArgument(format!(
                    "topic {topic:?} does not exist (a consumer without group.id assigns itself \
                     all partitions of a topic, so the topic must exist)"
                )));
            }
        };
        expanded.extend(partitions.iter().map(|p| Subscription::Partition {
            topic: topic.clone(),
            partition: p.id(),
            start: StartAt::Stored,
        }));
    }
    Ok(expanded)
}

/// Resolves explicit partition subscriptions to start offsets (timestamps via the broker) and,
/// without a group, to the high watermark to report reaching.
fn resolve_partitions(
    consumer: &Handle,
    subscriptions: &[Subscription],
    group: bool,
    start_without_group: Option<Offset>,
) -> Result<Vec<(String, i32, Offset, CatchUp)>, KafkaError> {
    let mut resolved = Vec::with_capacity(subscriptions.len());
    for subscription in subscriptions {
        let Subscription::Partition {
            topic,
            partition,
            start,
        } = subscription
        else {
            continue;
        };
        let offset = match *start {
            StartAt::Stored if group => Offset::Stored,
            StartAt::Stored => start_without_group.unwrap_or(Offset::Stored),
            StartAt::Beginning => Offset::Beginning,
            StartAt::End => Offset::End,
            StartAt::Offset(n) => Offset::Offset(n),
            StartAt::Timestamp(ms) => {
                let mut query = TopicPartitionList::new();
                query.add_partition_offset(topic, *partition, Offset::Offset(ms))?;
                let found = consumer.offsets_for_times(query, LOOKUP_TIMEOUT)?;
                found
                    .find_partition(topic, *partition)
                    .map_or(Offset::End, |e| match e.offset() {
                        Offset::Offset(n) => Offset::Offset(n),
                        _ => Offset::End,
                    })
            }
        };
        let catch_up = if group {
            CatchUp::Untracked
        } else {
            let (low, high) = consumer.fetch_watermarks(topic, *partition, LOOKUP_TIMEOUT)?;
            let first = match offset {
                Offset::Offset(n) => n.max(low),
                Offset::Beginning => low,
                _ => high,
            };
            if first >= high {
                CatchUp::Already(high)
            } else {
                CatchUp::At(high)
            }
        };
        resolved.push((topic.clone(), *partition, offset, catch_up));
    }
    Ok(resolved)
}

/// Where a consumer without a group starts a partition it was given no start for:
/// `auto.offset.reset` as an explicit offset (librdkafka's default, `latest`, when unset).
/// `None` for `error` (or a value librdkafka itself refuses): then librdkafka's own handling of
/// the missing committed offset applies.
pub(super) fn start_without_group(auto_offset_reset: Option<&str>) -> Option<Offset> {
    let Some(value) = auto_offset_reset else {
        return Some(Offset::End);
    };
    // librdkafka reads the value without regard to case.
    let one_of = |names: &[&str]| names.iter().any(|name| value.eq_ignore_ascii_case(name));
    if one_of(&["earliest", "smallest", "beginning"]) {
        Some(Offset::Beginning)
    } else if one_of(&["latest", "largest", "end"]) {
        Some(Offset::End)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_offset_reset_names_a_start_as_librdkafka_reads_it() {
        for (value, start) in [
            (Some("earliest"), Some(Offset::Beginning)),
            (Some("Smallest"), Some(Offset::Beginning)),
            (Some("BEGINNING"), Some(Offset::Beginning)),
            (Some("latest"), Some(Offset::End)),
            (Some("LARGEST"), Some(Offset::End)),
            (Some("End"), Some(Offset::End)),
            (None, Some(Offset::End)),
            (Some("error"), None),
            (Some("earliest "), None),
        ] {
            assert_eq!(start_without_group(value), start, "{value:?}");
        }
    }
}
