//! The ConcurrentConsumer's commit progress across a rebalance: two members of one group, the
//! second joining while the first is half-way, every record handled, every new owner of a
//! partition starting exactly at the group's committed offset (read by an outside rdkafka
//! consumer), and the committed offsets reaching the end of every partition.
//!
//! The test drives the engine as the bindings do: one thread reads its events and starts a
//! worker per assigned partition; a worker fetches batches, handles them and acknowledges them
//! until its partition is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ferrokafka_kafka::{
    Assignment, ConcurrentConsumer, ConsumerEvent, ConsumerOptions, Fetched, Outcome, Subscription,
};

use crate::common::{Observer, Topics, WAIT, settings, unique, wait_until, write};

const PARTITIONS: i32 = 4;
const RECORDS: usize = 400;
/// How long a revoked partition's running batch may take: far longer than a handler takes here,
/// so no batch is abandoned and every revocation commits what was handled.
const DRAIN: Duration = Duration::from_secs(10);

/// What the members did, shared by their threads.
#[derive(Default)]
struct Progress {
    state: Mutex<ProgressState>,
    changed: Condvar,
}

#[derive(Default)]
struct ProgressState {
    /// `(member, partition) -> offsets`, in the order each member handled them.
    handled: BTreeMap<(usize, i32), Vec<i64>>,
    /// The partitions each member holds now.
    assigned: BTreeMap<usize, BTreeSet<i32>>,
    /// Set just before the second member joins.
    second_joining: bool,
    /// Set when a member starts giving partitions up after that: the rebalance has begun.
    revoking: bool,
    /// Where each worker's first batch started, with the group's committed offset at that moment.
    starts: Vec<Start>,
    /// What went wrong on a member's thread.
    failures: Vec<String>,
}

#[derive(Debug)]
struct Start {
    member: usize,
    partition: i32,
    first: i64,
    committed: Option<i64>,
}

impl Progress {
    fn update<T>(&self, change: impl FnOnce(&mut ProgressState) -> T) -> T {
        let mut state = self.state.lock().expect("progress lock");
        let result = change(&mut state);
        self.changed.notify_all();
        result
    }

    fn handled(state: &ProgressState, member: usize, partition: i32) -> usize {
        state.handled.get(&(member, partition)).map_or(0, Vec::len)
    }

    /// Waits until `condition` holds; fails naming `what` after [`WAIT`].
    fn wait_for(&self, what: &str, condition: impl Fn(&ProgressState) -> bool) {
        let state = self.state.lock().expect("progress lock");
        let (state, timeout) = self
            .changed
            .wait_timeout_while(state, WAIT, |s| !condition(s) && s.failures.is_empty())
            .expect("progress lock");
        assert!(state.failures.is_empty(), "{:?}", state.failures);
        assert!(!timeout.timed_out(), "timed out waiting for {what}");
    }
}

/// One member of the group, with its event thread (which owns the worker threads).
struct Member {
    consumer: Arc<ConcurrentConsumer>,
    stop: Arc<AtomicBool>,
    events: JoinHandle<Vec<JoinHandle<()>>>,
}

impl Member {
    /// Joins `group`. With `hold_from`, the member's handler of a partition stops before the
    /// batch at that partition's offset, until the rebalance begins: whichever partitions the
    /// second member gets, it finds records left on them.
    fn join(
        id: usize,
        topic: &str,
        group: &str,
        hold_from: Option<&BTreeMap<i32, i64>>,
        progress: &Arc<Progress>,
    ) -> Member {
        let settings = settings(&[
            ("group.id", group),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
        ]);
        let options = ConsumerOptions {
            subscriptions: vec![Subscription::Topic(topic.to_owned())],
            max_batch_size: Some(10),
            commit_interval: Duration::from_millis(200),
            ..ConsumerOptions::default()
        };
        let consumer = ConcurrentConsumer::new(settings, options, DRAIN).expect("consumer");
        let receiver = consumer
            .take_events()
            .expect("the first take gets the events");
        let stop = Arc::new(AtomicBool::new(false));
        let worker = Worker {
            id,
            consumer: Arc::clone(&consumer),
            progress: Arc::clone(progress),
            observer: group.to_owned(),
            hold_from: hold_from.cloned(),
            stopped: Arc::clone(&stop),
        };
        let events_stop = Arc::clone(&stop);
        let events = std::thread::spawn(move || {
            let mut workers = Vec::new();
            loop {
                match receiver.recv_timeout(Duration::from_millis(50)) {
                    Ok(ConsumerEvent::Assigned(assignments)) => {
                        worker.progress.update(|s| {
                            let held = s.assigned.entry(id).or_default();
                            held.extend(assignments.iter().map(|a| a.partition));
                        });
                        for assignment in assignments {
                            let worker = worker.clone();
                            workers.push(std::thread::spawn(move || worker.run(&assignment)));
                        }
                    }
                    Ok(ConsumerEvent::Unassigned { partitions, .. }) => {
                        worker.progress.update(|s| {
                            let held = s.assigned.entry(id).or_default();
                            for assignment in &partitions {
                                held.remove(&assignment.partition);
                            }
                        });
                    }
                    Ok(ConsumerEvent::Draining { .. }) => worker.progress.update(|s| {
                        s.revoking |= s.second_joining;
                    }),
                    Ok(ConsumerEvent::Error(e)) => eprintln!("member {id}: {e}"),
                    Ok(_) => {}
                    // Every event is sent before the engine reports itself stopped.
                    Err(_) if events_stop.load(Ordering::Acquire) => return workers,
                    Err(_) => {}
                }
            }
        });
        Member {
            consumer,
            stop,
            events,
        }
    }

    /// Stops the member: its running batches drain, their offsets are committed, it leaves.
    fn leave(self) {
        self.consumer.begin_stop(DRAIN);
        assert!(
            self.consumer.wait_stopped(WAIT),
            "the consumer did not stop"
        );
        self.stop.store(true, Ordering::Release);
        let workers = self.events.join().expect("event thread");
        for worker in workers {
            worker.join().expect("worker thread");
        }
    }
}

/// What a worker thread needs.
#[derive(Clone)]
struct Worker {
    id: usize,
    consumer: Arc<ConcurrentConsumer>,
    progress: Arc<Progress>,
    /// The group, whose committed offsets the worker reads as an outsider.
    observer: String,
    hold_from: Option<BTreeMap<i32, i64>>,
    /// Set once the consumer reported itself stopped.
    stopped: Arc<AtomicBool>,
}

impl Worker {
    fn run(&self, assignment: &Assignment) {
        let observer = Observer::new(Some(&self.observer));
        let mut started = false;
        loop {
            let batch = match self
                .consumer
                .fetch(assignment.worker, Duration::from_millis(100))
            {
                Ok(Fetched::Batch(batch)) => batch,
                Ok(Fetched::Empty) if self.stopped.load(Ordering::Acquire) => {
                    return self.fail(format!(
                        "partition {} is still handed out after the consumer stopped",
                        assignment.partition
                    ));
                }
                Ok(Fetched::Empty) => continue,
                Ok(Fetched::Gone) => return,
                Err(e) => return self.fail(format!("fetch: {e}")),
            };
            let first = batch[0].offset;
            if !started {
                // Nobody commits this partition now: the previous owner committed before giving
                // it up, and this worker has acknowledged nothing yet.
                let committed = observer
                    .committed(&assignment.topic, &[assignment.partition])
                    .get(&assignment.partition)
                    .copied();
                let start = Start {
                    member: self.id,
                    partition: assignment.partition,
                    first,
                    committed,
                };
                self.progress.update(|s| s.starts.push(start));
                started = true;
            }
            self.hold(assignment.partition, first);
            self.progress.update(|s| {
                let offsets = s
                    .handled
                    .entry((self.id, assignment.partition))
                    .or_default();
                offsets.extend(batch.iter().map(|r| r.offset));
            });
            if !self
                .consumer
                .ack(assignment.worker, first, Outcome::Handled)
            {
                return self.fail(format!("batch at {first} no longer counted"));
            }
        }
    }

    /// Holds the batch at `first` of `partition`, from the member's `hold_from` offset on, until
    /// the rebalance begins.
    fn hold(&self, partition: i32, first: i64) {
        let Some(&from) = self.hold_from.as_ref().and_then(|h| h.get(&partition)) else {
            return;
        };
        if first < from {
            return;
        }
        let state = self.progress.state.lock().expect("progress lock");
        let (state, timeout) = self
            .progress
            .changed
            .wait_timeout_while(state, WAIT, |s| !s.revoking)
            .expect("progress lock");
        drop(state);
        if timeout.timed_out() {
            self.fail("the rebalance never began".to_owned());
        }
    }

    fn fail(&self, what: String) {
        self.progress
            .update(|s| s.failures.push(format!("member {}: {what}", self.id)));
    }
}

#[test]
fn commits_carry_over_a_rebalance_and_reach_the_end() {
    let mut topics = Topics::new();
    let topic = topics.create("consumer-rebalance", PARTITIONS, &[]);
    let records: Vec<(String, String)> = (0..RECORDS)
        .map(|n| (format!("k{n}"), format!("v{n}")))
        .collect();
    write(&topic, &records);
    let observer = Observer::new(None);
    let ends = observer.end_offsets(&topic);
    let group = unique("consumer-group");
    let progress = Arc::new(Progress::default());

    let halves: BTreeMap<i32, i64> = ends.iter().map(|(&p, &end)| (p, end / 2)).collect();
    let first = Member::join(0, &topic, &group, Some(&halves), &progress);
    progress.wait_for("the first member to handle half of each partition", |s| {
        halves
            .iter()
            .all(|(&p, &half)| Progress::handled(s, 0, p) as i64 >= half)
    });
    // Only a revocation the second member causes lets the first one go on.
    progress.update(|s| s.second_joining = true);
    let second = Member::join(1, &topic, &group, None, &progress);
    progress.wait_for("every record handled", |s| {
        let handled: BTreeSet<(i32, i64)> = s
            .handled
            .iter()
            .flat_map(|((_, p), offsets)| offsets.iter().map(move |o| (*p, *o)))
            .collect();
        handled.len() == RECORDS
    });
    let group_observer = Observer::new(Some(&group));
    let partitions: Vec<i32> = ends.keys().copied().collect();
    wait_until("the committed offsets to reach the end", WAIT, || {
        group_observer
            .committed(&topic, &partitions)
            .into_iter()
            .collect::<BTreeMap<_, _>>()
            == ends
    });
    second.leave();
    // Stopped only once it holds every partition again: stopped while that assignment is on its
    // way, the engine can hand partitions out after it stopped (`Worker::run` fails on that).
    progress.wait_for("the first member to take every partition back", |s| {
        s.assigned.get(&0).map_or(0, BTreeSet::len) == PARTITIONS as usize
    });
    first.leave();

    let state = progress.state.lock().expect("progress lock");
    assert!(state.failures.is_empty(), "{:?}", state.failures);
    assert!(state.revoking, "the first member gave nothing up");
    // Each owner of a partition started where the group's commit stood: nothing committed by
    // one member was handled again by the other, and nothing before it was skipped.
    for start in &state.starts {
        assert_eq!(start.first, start.committed.unwrap_or(0), "{start:?}");
    }
    let second_starts: Vec<&Start> = state.starts.iter().filter(|s| s.member == 1).collect();
    assert!(
        !second_starts.is_empty(),
        "the second member handled nothing"
    );
    assert!(
        second_starts.iter().all(|s| s.first > 0),
        "the second member started a partition from its beginning: {second_starts:?}"
    );
    // Between its starts, a member handles a partition one record after the other.
    for ((member, partition), offsets) in &state.handled {
        for pair in offsets.windows(2) {
            assert!(
                pair[1] == pair[0] + 1
                    || state.starts.iter().any(|s| s.member == *member
                        && s.partition == *partition
                        && s.first == pair[1]),
                "member {member} skipped from {} to {} on partition {partition}",
                pair[0],
                pair[1]
            );
        }
    }
}

#[test]
fn a_member_stopped_while_an_assignment_is_on_its_way_hands_nothing_out_after() {
    let mut topics = Topics::new();
    let topic = topics.create("consumer-stop-in-rebalance", PARTITIONS, &[]);
    let group = unique("consumer-stop-group");
    let progress = Arc::new(Progress::default());
    let first = Member::join(0, &topic, &group, None, &progress);
    progress.wait_for("the first member to hold every partition", |s| {
        s.assigned.get(&0).map_or(0, BTreeSet::len) == PARTITIONS as usize
    });
    let second = Member::join(1, &topic, &group, None, &progress);
    progress.wait_for("the second member to hold a partition", |s| {
        s.assigned.get(&1).is_some_and(|held| !held.is_empty())
    });
    // The second member's leaving starts a rebalance: the first gives up all it holds (the
    // eager protocol), and stops while its new assignment is on its way. Closing its consumer
    // may deliver that assignment after the engine released every partition: `Worker::run`
    // fails on a partition still handed out after the stop.
    second.leave();
    progress.wait_for("the first member to give its partitions up", |s| {
        s.assigned.get(&0).is_some_and(BTreeSet::is_empty)
    });
    first.leave();
    let state = progress.state.lock().expect("progress lock");
    assert!(state.failures.is_empty(), "{:?}", state.failures);
}
