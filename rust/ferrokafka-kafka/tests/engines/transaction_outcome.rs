//! `transaction_outcome`: what became of a transaction, read through one record it wrote, as
//! the AsyncProducer and the scheduler read it once a new instance took over from one whose
//! commit went unanswered. The transactions are made with a plain rdkafka producer, so only the reading is
//! under test.

use std::sync::Mutex;
use std::time::Duration;

use ferrokafka_kafka::{TransactionOutcome, Witness, transaction_outcome};
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::common::{Topics, WAIT, bootstrap, settings, unique};

/// Keeps the offset of each record delivered.
#[derive(Default)]
struct Offsets(Mutex<Vec<i64>>);

impl ClientContext for Offsets {}

impl ProducerContext for Offsets {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let message = result.as_ref().expect("a record of the test is written");
        self.0.lock().unwrap().push(message.offset());
    }
}

/// Writes one record in a transaction of `producer` and ends it as `end` says (commit, abort,
/// or leave it open); returns where the record landed.
fn one_record_transaction(
    producer: &BaseProducer<Offsets>,
    topic: &str,
    end: Option<bool>,
) -> Witness {
    producer.begin_transaction().expect("begin");
    producer
        .send(BaseRecord::<(), str>::to(topic).partition(0).payload("x"))
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(WAIT).expect("flush");
    match end {
        Some(true) => producer.commit_transaction(WAIT).expect("commit"),
        Some(false) => producer.abort_transaction(WAIT).expect("abort"),
        None => {}
    }
    let offset = *producer
        .context()
        .0
        .lock()
        .unwrap()
        .last()
        .expect("delivered");
    Witness {
        topic: topic.to_owned(),
        partition: 0,
        offset,
    }
}

#[test]
fn a_transaction_is_read_as_committed_aborted_or_still_open() {
    let mut topics = Topics::new();
    let topic = topics.create("outcome", 1, &[]);
    let producer: BaseProducer<Offsets> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", unique("outcome-txn"))
        .create_with_context(Offsets::default())
        .expect("transactional producer");
    producer.init_transactions(WAIT).expect("init_transactions");
    let committed = one_record_transaction(&producer, &topic, Some(true));
    // Aborted, with a committed record after it: the reader is handed that one instead.
    let aborted_before_a_commit = one_record_transaction(&producer, &topic, Some(false));
    one_record_transaction(&producer, &topic, Some(true));
    // Aborted and followed only by an open transaction: the reader reaches the last stable
    // offset, past the record.
    let aborted_last = one_record_transaction(&producer, &topic, Some(false));
    let open = one_record_transaction(&producer, &topic, None);

    let settings = settings(&[]);
    let read_within = |witness: &Witness, seconds: u64| {
        transaction_outcome(&settings, witness, Duration::from_secs(seconds), &|| false)
    };
    let read = |witness: &Witness| read_within(witness, 10);
    assert_eq!(read(&committed), TransactionOutcome::Committed);
    assert_eq!(read(&aborted_before_a_commit), TransactionOutcome::Aborted);
    assert_eq!(read(&aborted_last), TransactionOutcome::Aborted);
    // Read again while it stays open, then said to be open.
    let still_open = read_within(&open, 1);
    assert!(
        matches!(still_open, TransactionOutcome::Unknown(ref why) if why.contains("still open")),
        "{still_open:?}"
    );
    producer
        .abort_transaction(WAIT)
        .expect("abort the open one");
    assert_eq!(read(&open), TransactionOutcome::Aborted);
}
