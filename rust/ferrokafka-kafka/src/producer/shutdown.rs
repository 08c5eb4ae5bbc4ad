//! Shutting down: refuse new records and deliver what is buffered for the grace period; then
//! stop the worker, purge librdkafka's queues, wait for every purged record's report, and return
//! what was never handed over.

use std::sync::atomic::Ordering;
use std::time::Instant;

use rdkafka::producer::{Producer, PurgeConfig};

use super::pending::Pending;
use super::reports::ProducerEvent;
use super::{AsyncProducer, PURGE_WAIT, WORKER_TICK};
use crate::locks::wait_timeout;

impl AsyncProducer {
    /// Starts shutting down: refuses new records and delivers what is buffered.
    pub fn begin_shutdown(&self) {
        let mut state = self.shared.lock();
        state.closing = true;
        state.deliver_requested = true;
        drop(state);
        self.shared.work.notify_one();
        self.shared.progress.notify_all();
    }

    /// Ends a shutdown: stops the worker (which hands nothing more to librdkafka), purges what
    /// librdkafka still holds and waits for those records' reports (they arrive as `Failed`
    /// events), then returns the records that were never handed to librdkafka. When it returns
    /// every accepted record is delivered, failed, dropped or in the returned list.
    pub fn finish_shutdown(&self) -> Vec<Box<Pending>> {
        self.begin_shutdown();
        self.shared.stopping.store(true, Ordering::Release);
        let handle = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            self.shared.work.notify_all();
            let _ = handle.join();
        }
        if self.shared.in_flight.load(Ordering::Acquire) > 0 {
            self.producer()
                .purge(PurgeConfig::default().queue().inflight());
            // Purged records come back through the delivery callback on librdkafka's polling
            // thread; wait until each one was reported.
            let deadline = Instant::now() + PURGE_WAIT;
            let mut state = self.shared.lock();
            while self.shared.in_flight.load(Ordering::Acquire) > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    // Said with the lock released: a record goes to Python's `logging` (the
                    // GIL), and a `produce` on another thread takes the lock holding the GIL.
                    drop(state);
                    log::error!(
                        "shutdown: librdkafka did not report {} purged record(s) within {:?}",
                        self.shared.in_flight.load(Ordering::Acquire),
                        PURGE_WAIT
                    );
                    break;
                }
                state = wait_timeout(&self.shared.progress, state, left.min(WORKER_TICK));
            }
        }
        let mut state = self.shared.lock();
        let mut undelivered: Vec<Box<Pending>> = state.retries.drain(..).map(|(_, p)| p).collect();
        undelivered.extend(state.suspects.drain(..).map(|(p, _)| p));
        undelivered.extend(state.buffer.drain_chunk(usize::MAX));
        state.stats.failed += undelivered.len() as u64;
        state.stats.queue_size = 0;
        drop(state);
        self.shared.emit(ProducerEvent::ShutDown);
        undelivered
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use super::*;
    use crate::config::settings_of;
    use crate::producer::AsyncProducerOptions;
    use crate::record::OutgoingRecord;

    fn pending(n: usize) -> Box<Pending> {
        Box::new(Pending {
            record: OutgoingRecord {
                topic: "nowhere".to_owned(),
                value: Some(format!("v{n}").into_bytes()),
                ..OutgoingRecord::default()
            },
            partition_key: None,
            ticket: 0,
            failures: 0,
        })
    }

    /// sit in librdkafka, in the worker's hands (waiting for room) and in the buffer. Every one
    /// must come back, as a `Failed` event or in the returned list, exactly once, and quickly.
    #[test]
    fn shutdown_without_a_broker_hands_back_every_record_once() {
        let settings = settings_of(&[
            ("bootstrap.servers", "127.0.0.1:1"),
            ("queue.buffering.max.messages", "10"),
        ]);
        let options = AsyncProducerOptions {
            max_queue_size: 100,
            delivery_threshold: 1,
            ..AsyncProducerOptions::default()
        };
        let producer = AsyncProducer::new(settings, options).unwrap();
        let events = producer.take_events().unwrap();
        let mut items: VecDeque<Box<Pending>> = (0..100).map(pending).collect();
        let (accepted, _, refusal) = producer.try_produce(&mut items, false);
        assert_eq!((accepted, refusal.is_none()), (100, true));

        let started = Instant::now();
        producer.begin_shutdown();
        assert!(!producer.flush_step(Duration::from_millis(300)));
        let returned = producer.finish_shutdown();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        let mut values: Vec<Vec<u8>> = returned
            .into_iter()
            .filter_map(|p| p.record.value)
            .collect();
        for event in events.try_iter() {
            if let ProducerEvent::Failed { pending, .. } = event {
                values.extend(pending.record.value);
            }
        }
        values.sort();
        let mut expected: Vec<Vec<u8>> = (0..100).map(|n| format!("v{n}").into_bytes()).collect();
        expected.sort();
        assert_eq!(values, expected);
        let stats = producer.stats();
        assert_eq!(
            (stats.delivered, stats.failed, stats.in_flight),
            (0, 100, 0)
        );
    }
}
