//! The PolledProducer's drop: its polling thread stops, yet every delivery report librdkafka had
//! queued before the drop still reaches the context, on that thread (rdkafka's `BaseProducer`
//! would otherwise poll them in its own drop, on the dropping thread, in up to 100 ms).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

use ferrokafka_kafka::polled_producer::{POLLING_THREAD, PolledProducer};
use rdkafka::ClientContext;
use rdkafka::bindings as rdsys;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::common::{Topics, WAIT, bootstrap, wait_until};

/// Counts the delivered records and the reports run on another thread than the polling thread
/// (the counts outlive the producer). The first report says it
/// arrived and then holds the polling thread until it is released, so that the other reports
/// pile up on the main queue meanwhile.
struct HeldReports {
    delivered: Arc<AtomicUsize>,
    off_the_polling_thread: Arc<AtomicUsize>,
    first_arrived: Mutex<Option<Sender<()>>>,
    release: Mutex<Receiver<()>>,
}

impl ClientContext for HeldReports {}

impl ProducerContext for HeldReports {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_ok() {
            self.delivered.fetch_add(1, Ordering::SeqCst);
        }
        if thread::current().name() != Some(POLLING_THREAD) {
            self.off_the_polling_thread.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(first_arrived) = self.first_arrived.lock().unwrap().take() {
            first_arrived.send(()).unwrap();
            self.release.lock().unwrap().recv_timeout(WAIT).unwrap();
        }
    }
}

/// The events waiting on the main queue of `producer`'s client.
fn queued_events(producer: &PolledProducer<HeldReports>) -> usize {
    // SAFETY: a live client handle; the queue handle taken here is destroyed before returning.
    unsafe {
        let queue = rdsys::rd_kafka_queue_get_main(producer.client().native_ptr());
        let length = rdsys::rd_kafka_queue_length(queue);
        rdsys::rd_kafka_queue_destroy(queue);
        length
    }
}

#[test]
fn the_drop_returns_after_handing_every_queued_delivery_report_to_the_context() {
    let mut topics = Topics::new();
    let topic = topics.create("polled-drop", 1, &[]);
    let delivered = Arc::new(AtomicUsize::new(0));
    let off_the_polling_thread = Arc::new(AtomicUsize::new(0));
    let (first_arrived, first_arrival) = mpsc::channel();
    let (release, released) = mpsc::channel();
    let context = HeldReports {
        delivered: Arc::clone(&delivered),
        off_the_polling_thread: Arc::clone(&off_the_polling_thread),
        first_arrived: Mutex::new(Some(first_arrived)),
        release: Mutex::new(released),
    };
    // The linger puts the records sent while the thread is held into one request, so that their
    // reports come back as one event.
    let producer: PolledProducer<HeldReports> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("linger.ms", "100")
        .create_with_context(context)
        .expect("producer");
    let send = |value: &str| {
        producer
            .send(BaseRecord::<(), str>::to(&topic).payload(value))
            .unwrap_or_else(|(e, _)| panic!("cannot queue a record: {e}"));
    };
    send("held");
    first_arrival
        .recv_timeout(WAIT)
        .expect("the first delivery report");
    let rest = 50;
    for i in 0..rest {
        send(&i.to_string());
    }
    wait_until("the other reports on the main queue", WAIT, || {
        queued_events(&producer) > 0
    });

    // The held report is released by another thread once the drop has begun, so the polling
    // thread finds the others still queued when it is told to stop.
    let (dropping, drop_begun) = mpsc::channel::<()>();
    let releaser = thread::spawn(move || {
        drop_begun.recv_timeout(WAIT).unwrap();
        release.send(()).unwrap();
    });
    dropping.send(()).unwrap();
    drop(producer);
    releaser.join().unwrap();
    assert_eq!(
        delivered.load(Ordering::SeqCst),
        1 + rest,
        "a delivery report queued before the drop was lost"
    );
    assert_eq!(
        off_the_polling_thread.load(Ordering::SeqCst),
        0,
        "the polling thread stopped before the reports queued before the drop"
    );
}

/// Drops its own producer from its first delivery report, on the polling thread, as Python's
/// garbage collector may when a callback there runs Python code; says on which thread it was
/// dropped, and whether that thread was unwinding from a panic then.
struct DropsItsOwnProducer {
    owner: Arc<Mutex<Option<PolledProducer<DropsItsOwnProducer>>>>,
    dropped_on: Mutex<Sender<(Option<String>, bool)>>,
}

impl ClientContext for DropsItsOwnProducer {}

impl ProducerContext for DropsItsOwnProducer {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {
        let producer = self.owner.lock().unwrap().take();
        drop(producer);
    }
}

impl Drop for DropsItsOwnProducer {
    fn drop(&mut self) {
        let thread = thread::current().name().map(str::to_owned);
        let _ = self
            .dropped_on
            .lock()
            .unwrap()
            .send((thread, thread::panicking()));
    }
}

#[test]
fn a_producer_dropped_by_its_own_callback_closes_on_its_polling_thread() {
    let mut topics = Topics::new();
    let topic = topics.create("polled-self-drop", 1, &[]);
    let owner = Arc::new(Mutex::new(None));
    let (dropped_on, context_dropped) = mpsc::channel();
    let producer: PolledProducer<DropsItsOwnProducer> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create_with_context(DropsItsOwnProducer {
            owner: Arc::clone(&owner),
            dropped_on: Mutex::new(dropped_on),
        })
        .expect("producer");
    // Sent once the owner holds the producer, so the report finds it there.
    owner
        .lock()
        .unwrap()
        .insert(producer)
        .send(BaseRecord::<(), str>::to(&topic).payload("last"))
        .unwrap_or_else(|(e, _)| panic!("cannot queue a record: {e}"));
    // Joining itself, the thread would panic ("Resource deadlock avoided") and destroy the client
    // while unwinding; it destroys it once the callback has returned and its loop ended.
    let (thread, panicking) = context_dropped
        .recv_timeout(WAIT)
        .expect("the client was never destroyed");
    assert_eq!(thread.as_deref(), Some(POLLING_THREAD));
    assert!(
        !panicking,
        "the polling thread panicked dropping its own producer"
    );
}
