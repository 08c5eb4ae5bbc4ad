//! Mixed scheduler workload on `DeadlineQueue` vs `std::collections::BinaryHeap` with lazy
//! deletion (a map of live entries; updated or cancelled entries stay in the heap as stale
//! copies and are skipped when they surface).
//!
//! One iteration = the clock advances one step, `pop_due(now, 1)`, one push; every 4th step also
//! updates a random id's deadline, every 8th cancels a random id and schedules it again. Sizes:
//! 10k, 100k and 1M pending entries, deadlines uniform over `pending * STEP_MS` ahead (so about
//! one entry falls due per step and the size stays steady).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use ferrokafka_benches::Rng;
use ferrokafka_core::DeadlineQueue;
use rustc_hash::FxHashMap;

const STEP_MS: u64 = 10;

/// The operations both queues must support for the workload.
trait Scheduler {
    fn schedule(&mut self, id: u64, deadline: u64, sequence: u64);
    fn reschedule(&mut self, id: u64, deadline: u64, sequence: u64);
    fn cancel(&mut self, id: u64);
    fn pop_one_due(&mut self, now: u64) -> Option<u64>;
}

impl Scheduler for DeadlineQueue<u64, u64> {
    fn schedule(&mut self, id: u64, deadline: u64, sequence: u64) {
        let _ = self.push(id, deadline, sequence, id);
    }
    fn reschedule(&mut self, id: u64, deadline: u64, _sequence: u64) {
        self.update(&id, deadline);
    }
    fn cancel(&mut self, id: u64) {
        self.remove(&id);
    }
    fn pop_one_due(&mut self, now: u64) -> Option<u64> {
        self.pop_if_due(now).map(|(_, item)| item)
    }
}

/// The baseline: a binary heap of `(deadline, sequence, id)` plus the live version of each id.
#[derive(Default)]
struct LazyHeap {
    heap: BinaryHeap<Reverse<(u64, u64, u64)>>,
    live: FxHashMap<u64, (u64, u64)>,
}

impl Scheduler for LazyHeap {
    fn schedule(&mut self, id: u64, deadline: u64, sequence: u64) {
        self.live.insert(id, (deadline, sequence));
        self.heap.push(Reverse((deadline, sequence, id)));
    }
    fn reschedule(&mut self, id: u64, deadline: u64, sequence: u64) {
        if let Some(version) = self.live.get_mut(&id) {
            *version = (deadline, sequence);
            self.heap.push(Reverse((deadline, sequence, id)));
        }
    }
    fn cancel(&mut self, id: u64) {
        self.live.remove(&id);
    }
    fn pop_one_due(&mut self, now: u64) -> Option<u64> {
        while let Some(&Reverse((deadline, sequence, id))) = self.heap.peek() {
            if deadline > now {
                return None;
            }
            self.heap.pop();
            if self.live.get(&id) == Some(&(deadline, sequence)) {
                self.live.remove(&id);
                return Some(id);
            }
        }
        None
    }
}

/// Workload state shared by both implementations (same seed, same operations).
struct Workload {
    rng: Rng,
    now: u64,
    next_id: u64,
    window: u64,
    pending: u64,
}

impl Workload {
    fn fill<S: Scheduler>(scheduler: &mut S, pending: u64) -> Self {
        let mut workload = Self {
            rng: Rng::new(42),
            now: 0,
            next_id: 0,
            window: pending * STEP_MS,
            pending,
        };
        for _ in 0..pending {
            workload.push_new(scheduler);
        }
        workload
    }

    fn push_new<S: Scheduler>(&mut self, scheduler: &mut S) {
        let deadline = self.now + 1 + self.rng.below(self.window);
        scheduler.schedule(self.next_id, deadline, self.next_id);
        self.next_id += 1;
    }

    fn recent_id(&mut self) -> u64 {
        self.next_id - 1 - self.rng.below(self.pending)
    }

    fn step<S: Scheduler>(&mut self, scheduler: &mut S) -> Option<u64> {
        self.now += STEP_MS;
        let popped = scheduler.pop_one_due(self.now);
        self.push_new(scheduler);
        if self.next_id & 3 == 0 {
            let id = self.recent_id();
            let deadline = self.now + 1 + self.rng.below(self.window);
            scheduler.reschedule(id, deadline, self.next_id);
        }
        if self.next_id & 7 == 0 {
            let id = self.recent_id();
            scheduler.cancel(id);
            let deadline = self.now + 1 + self.rng.below(self.window);
            scheduler.schedule(id, deadline, self.next_id);
        }
        popped
    }
}

/// Fills `queue` with `pending` entries once (not per sample: the closure keeps stepping the
/// same queue) and benches the workload's steps on it; the queue is dropped before the next.
fn bench_filled<S: Scheduler>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    mut queue: S,
    pending: u64,
) {
    let mut workload = Workload::fill(&mut queue, pending);
    group.bench_with_input(BenchmarkId::new(name, pending), &pending, |b, _| {
        b.iter(|| black_box(workload.step(&mut queue)));
    });
}

fn mixed_workload(c: &mut Criterion) {
    let mut group = c.benchmark_group("deadline_queue_mixed");
    for pending in [10_000u64, 100_000, 1_000_000] {
        let queue = DeadlineQueue::<u64, u64>::with_capacity(pending as usize + 16);
        bench_filled(&mut group, "DeadlineQueue", queue, pending);
        bench_filled(&mut group, "BinaryHeap+lazy", LazyHeap::default(), pending);
    }
    group.finish();
}

criterion_group!(benches, mixed_workload);
criterion_main!(benches);
