//! Acknowledged processing with redelivery (the KMQ pattern): [`QueueConsumer`] and
//! [`RedeliveryTracker`].
//!
//! A queue consumer reads the queue topic. Before it hands out a batch it writes one START marker
//! per message (message id = queue partition + offset, redelivery deadline, and the message's
//! key, value and headers) to the markers topic, waits until every marker is acknowledged, and
//! only then commits the queue offsets. `ack` writes an END marker, `keepalive` a KEEPALIVE with
//! a later deadline, and `nack` a KEEPALIVE whose deadline is now (redeliver at once).
//!
//! Invariants:
//! - Every marker of one queue message goes to markers partition
//!   [`markers_partition`]`(queue partition)`, so the tracker sees them in the order written.
//! - A message is committed on the queue topic only after its START is durable; a failed START
//!   write rewinds the consumer to the batch, so no message is lost between the two topics.
//! - The tracker redelivers nothing from a markers partition before it has read that partition
//!   to its end (a restart does not redeliver what was acknowledged after its last commit), and
//!   commits a markers partition only up to its smallest open START
//!   ([`MarkersQueue::smallest_open_marker_offset`]), so a restart never forgets an open message.
//! - A due message is re-produced to its original queue partition with the
//!   [`REDELIVERY_COUNT_HEADER`](crate::headers::REDELIVERY_COUNT_HEADER) incremented, or, once the count reached `max_redeliveries`,
//!   produced to the dead-letter topic (or, without one, logged at error level and counted as
//!   dropped); only when that write is acknowledged is its END written. A failed write is
//!   retried with exponential backoff. Delivery is at-least-once: a tracker killed between the
//!   re-produce and the END redelivers that message again after its restart.
//! - Tracker clock, per markers partition: the newest marker timestamp plus the monotonic time
//!   since that marker was read (immune to skew between hosts; a marker read late never sets it
//!   back, so it is the largest such sum over the markers read), or the wall clock when no marker
//!   was read for `use_now_if_no_marker_seen`.
//!
//! Threading: [`QueueConsumer`] methods are called from any thread. The consumer owns three
//! threads: the START prefetch and the commit thread (`start_prefetch/`: read, mark and
//! commit the next batches while the caller handles this one) and the keepalive
//! (`marker_writer.rs`). The tracker runs
//! on one daemon thread (`daemon::Daemon`);
//! librdkafka callbacks only record events. No Python runs here.
//!
//! Rooms: `options.rs` the settings of both; `headers.rs` the headers of redelivered and
//! dead-lettered messages (and the dead letter itself); `queue_consumer.rs` the consuming side;
//! `start_prefetch/` its START prefetch and commit threads; `marker_writer.rs` its END and
//! KEEPALIVE markers and the keepalive thread; `release.rs` what a closing consumer puts back
//! on the queue; `tracker/` the tracker daemon.
//!
//! [`MarkersQueue::smallest_open_marker_offset`]:
//!     ferrokafka_core::markers::MarkersQueue::smallest_open_marker_offset

mod headers;
mod marker_writer;
mod options;
mod queue_consumer;
mod release;
mod start_prefetch;
mod tracker;

pub use headers::{dead_letter_headers, redelivery_count};
pub use marker_writer::markers_partition;
pub use options::{QueueConsumerOptions, RedeliveryOptions};
pub use queue_consumer::{QueueConsumer, QueueConsumerStats};
pub use start_prefetch::{Refused, Taken};
pub use tracker::{RedeliveryTracker, TrackerPartitionStatus};
