//! Read-back: the payloads of far-future schedules, read again from the schedules topic as the
//! horizon reaches them, retried with backoff until they are read (or known gone).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ferrokafka_core::schedule::ScheduleRecord;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::loading::decode_message;
use super::{MAX_SLEEP, ProxyPayload, SchedulerLoop};
use crate::client::EndIsExpected;
use crate::config::ClientSettings;
use crate::daemon::now_ms;

/// Longest one read-back of far-future payloads waits for the broker before it is retried.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(10);

impl SchedulerLoop {
    /// Moves each partition's horizon forward and reads back the payloads now needed, retrying
    /// those that could not be read (broker unreachable) with backoff.
    pub(super) fn advance_horizons(&mut self) {
        let now = now_ms();
        let keys: Vec<(String, i32)> = self.runs.keys().cloned().collect();
        for key in keys {
            let Some(run) = self.runs.get_mut(&key) else {
                continue;
            };
            if let Ok(entering) = run.tracker.advance_horizon(now)
                && !entering.is_empty()
            {
                log::info!(
                    "{}-{}: reading back {} schedules entering the horizon",
                    key.0,
                    key.1,
                    entering.len()
                );
                run.unread.extend(entering);
            }
            if run.unread.is_empty() || run.read_back_backoff.waiting() {
                continue;
            }
            let mut fetches = std::mem::take(&mut run.unread);
            fetches.sort_unstable_by_key(|fetch| fetch.offset);
            fetches.dedup_by_key(|fetch| fetch.offset);
            let offsets: Vec<i64> = fetches
                .iter()
                .filter_map(|f| i64::try_from(f.offset).ok())
                .collect();
            let mut read = read_offsets(&self.fetch_settings, &key.0, key.1, &offsets);
            let Some(run) = self.runs.get_mut(&key) else {
                continue;
            };
            for fetch in fetches {
                let offset = i64::try_from(fetch.offset).unwrap_or(i64::MAX);
                let gone = match read.records.remove(&fetch.offset) {
                    Some(Some(payload)) => {
                        run.tracker
                            .provide_payload(&fetch.key, fetch.offset, payload);
                        continue;
                    }
                    Some(None) => "the record read back is no longer this schedule",
                    // Read past it: compaction removed it, so a later record replaced it.
                    None if read.covered.is_some_and(|covered| covered >= offset) => {
                        "it is gone from the topic"
                    }
                    None => {
                        run.unread.push(fetch);
                        continue;
                    }
                };
                log::warn!(
                    "{}-{}@{}: schedule {:?} skipped: {gone}",
                    key.0,
                    key.1,
                    fetch.offset,
                    fetch.key
                );
                let _ = run
                    .tracker
                    .apply(fetch.offset, &fetch.key, ScheduleRecord::Cancel);
                run.tracker.record_skipped(fetch.offset);
            }
            if run.unread.is_empty() {
                run.read_back_backoff.succeeded();
            } else {
                let pause = run.read_back_backoff.failed();
                log::warn!(
                    "{}-{}: {} schedules could not be read back yet, retrying in {pause:?}",
                    key.0,
                    key.1,
                    run.unread.len()
                );
            }
        }
    }
}

/// What a read-back found: the records wanted (the proxy data of each that is a schedule), and
/// the highest offset known to be read past (`i64::MAX` once the end of the partition was
/// reached), if any.
struct ReadBack {
    records: HashMap<u64, Option<ProxyPayload>>,
    covered: Option<i64>,
}

/// Reads the records at `offsets` of one partition (sorted ascending), for payloads entering the
/// horizon. Records that cannot be read within [`READ_BACK_TIMEOUT`] are simply missing.
fn read_offsets(
    settings: &ClientSettings,
    topic: &str,
    partition: i32,
    offsets: &[i64],
) -> ReadBack {
    let mut read = ReadBack {
        records: HashMap::new(),
        covered: None,
    };
    let Some(&first) = offsets.first() else {
        return read;
    };
    let consumer = match EndIsExpected::reader(settings, "ferrokafka-scheduler-fetch", &[], None) {
        Ok(consumer) => consumer,
        Err(e) => {
            log::error!("cannot create the payload fetch consumer: {e}");
            return read;
        }
    };
    let wanted: std::collections::HashSet<i64> = offsets.iter().copied().collect();
    let mut tpl = TopicPartitionList::new();
    if tpl
        .add_partition_offset(topic, partition, Offset::Offset(first))
        .and_then(|()| consumer.assign(&tpl))
        .is_err()
    {
        return read;
    }
    let deadline = Instant::now() + READ_BACK_TIMEOUT;
    let last = offsets.last().copied().unwrap_or(first);
    while Instant::now() < deadline {
        match consumer.poll(MAX_SLEEP) {
            Some(Ok(message)) => {
                let offset = message.offset();
                if wanted.contains(&offset) {
                    let payload =
                        decode_message(&message)
                            .ok()
                            .and_then(|(_, decoded)| match decoded {
                                ScheduleRecord::Schedule { payload, .. } => Some(payload),
                                _ => None,
                            });
                    read.records.insert(offset as u64, payload);
                }
                read.covered = Some(offset);
                if offset >= last {
                    break;
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {
                read.covered = Some(i64::MAX);
                break;
            }
            Some(Err(e)) => log::warn!("payload fetch {topic}-{partition}: {e}"),
            None => {}
        }
    }
    read
}
