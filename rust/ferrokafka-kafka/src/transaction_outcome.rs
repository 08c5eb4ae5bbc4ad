//! What became of a transaction whose commit went unanswered.
//!
//! After an outage, librdkafka can keep a commit "timed out, call again" for good, or fail its
//! instance fatally, while the coordinator did take the commit (the request left before the
//! broker stopped answering). The producer then gives up that instance; whether the records
//! were committed cannot be asked of Kafka, but it can be read: once a new instance with the
//! same `transactional.id` is in place (its `InitProducerId` returns only after the coordinator
//! finished whatever the old epoch left: the commit completed, or the transaction aborted and
//! its markers written), a `read_committed` reader started at one record the transaction wrote
//! (its [`Witness`]) is given that very record if the transaction committed, and a later one or
//! the partition's end (the last stable offset, past the record) if it aborted; an end at the
//! record means the transaction is still open, and the partition is read again until the time
//! given runs out. A transaction commits or aborts in every partition at once, so one record
//! tells for all of them.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::EndIsExpected;
use crate::config::ClientSettings;

/// Longest one poll of the outcome reader waits, so a shutdown is noticed.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// How long a reader that found the transaction still open waits before reading again.
const REREAD_PAUSE: Duration = Duration::from_millis(200);
/// What a reader says of a transaction whose record is at the last stable offset.
const STILL_OPEN: &str = "the transaction is still open: the last stable offset is at its record";

/// Longest [`committed_after_all`] reads, the broker having just answered the new instance.
const OUTCOME_READ: Duration = Duration::from_secs(10);

/// A record a transaction wrote, as its delivery report placed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witness {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl Witness {
    /// Where the acknowledged `message` was written.
    pub(crate) fn of(message: &impl Message) -> Self {
        Witness {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
        }
    }
}

/// What a `read_committed` reader found of a transaction, through its [`Witness`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransactionOutcome {
    /// The witness was read: the transaction committed.
    Committed,
    /// The reader went past the witness without it: the transaction aborted.
    Aborted,
    /// Not learnt within the time given (why): the transaction stayed open, or the broker did
    /// not answer.
    Unknown(String),
}

/// Reads what became of the transaction that wrote `witness`, within `timeout` (or until
/// `stopping` says so). `settings` are the producer's: a reader that joins no group is made of
/// them.
pub fn transaction_outcome(
    settings: &ClientSettings,
    witness: &Witness,
    timeout: Duration,
    stopping: &dyn Fn() -> bool,
) -> TransactionOutcome {
    let reader = match EndIsExpected::reader(
        settings,
        "ferrokafka-transaction-outcome",
        &[("isolation.level", "read_committed")],
        None,
    ) {
        Ok(reader) => reader,
        Err(e) => return TransactionOutcome::Unknown(format!("cannot create a reader: {e}")),
    };
    let mut assignment = TopicPartitionList::new();
    if let Err(e) = assignment
        .add_partition_offset(
            &witness.topic,
            witness.partition,
            Offset::Offset(witness.offset),
        )
        .and_then(|()| reader.assign(&assignment))
    {
        return TransactionOutcome::Unknown(format!("cannot read the partition: {e}"));
    }
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    let mut open_since: Option<Instant> = None;
    while Instant::now() < deadline && !stopping() {
        // Still open at the last end: the markers may not be written yet (they are once the
        // new instance is in place, but a replica may lag); read the partition again.
        if open_since.is_some_and(|at| at.elapsed() >= REREAD_PAUSE) {
            open_since = None;
            if let Err(e) = reader.assign(&assignment) {
                last_error = Some(e.to_string());
            }
        }
        match reader.poll(POLL_SLICE) {
            Some(Ok(message)) if message.offset() == witness.offset => {
                return TransactionOutcome::Committed;
            }
            Some(Ok(message)) if message.offset() > witness.offset => {
                return TransactionOutcome::Aborted;
            }
            Some(Ok(_)) => {}
            Some(Err(KafkaError::PartitionEOF(_))) => {
                // The end of a read_committed reader is the last stable offset: past the
                // witness (the reader skipped it), the transaction ended without it; at the
                // witness (nothing skipped, so no position), it is still open.
                match end_offset(&reader, witness) {
                    Some(end) if end > witness.offset => return TransactionOutcome::Aborted,
                    _ => {
                        last_error = Some(STILL_OPEN.to_owned());
                        open_since.get_or_insert_with(Instant::now);
                    }
                }
            }
            Some(Err(e)) => last_error = Some(e.to_string()),
            None => {}
        }
    }
    TransactionOutcome::Unknown(match last_error {
        Some(error) => format!("{error} ({timeout:?} of reading)"),
        None => format!("nothing read within {timeout:?}"),
    })
}

/// Whether the transaction that wrote `witness`, left by a producer instance a new one replaced,
/// committed after all (read within `OUTCOME_READ`, or until `stopping` says so); `what` names
/// what it held, for the log ("its 25 schedules"). Not when that is not known: what it held
/// then goes again and may be written twice, which is said at WARNING.
pub(crate) fn committed_after_all(
    settings: &ClientSettings,
    witness: &Witness,
    what: &str,
    stopping: &dyn Fn() -> bool,
) -> bool {
    match transaction_outcome(settings, witness, OUTCOME_READ, stopping) {
        TransactionOutcome::Committed => {
            log::warn!(
                "the transaction the replaced producer instance left had been committed: {what} \
                 are written, once"
            );
            true
        }
        TransactionOutcome::Aborted => {
            log::info!(
                "the transaction the replaced producer instance left was aborted: {what} go again"
            );
            false
        }
        TransactionOutcome::Unknown(why) => {
            log::warn!(
                "whether the transaction the replaced producer instance left was committed is \
                 not known ({why}): {what} go again and may be written twice"
            );
            false
        }
    }
}

/// The reader's position in the witness's partition: where a partition end left it.
fn end_offset(reader: &BaseConsumer<EndIsExpected>, witness: &Witness) -> Option<i64> {
    let positions = reader.position().ok()?;
    match positions
        .find_partition(&witness.topic, witness.partition)?
        .offset()
    {
        Offset::Offset(end) => Some(end),
        _ => None,
    }
}
