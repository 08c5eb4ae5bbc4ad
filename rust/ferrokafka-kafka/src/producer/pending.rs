//! A record in the AsyncProducer's care ([`Pending`]) and the ticket its caller waits on: the
//! vocabulary every room of the producer shares, its delivery-opaque packing (`in_flight`)
//! included, in a room of its own so that none of them imports another for it.

use crate::record::OutgoingRecord;

/// Identifies a record whose delivery result the caller wants back; 0 means "not tracked".
pub type Ticket = u64;

/// Set in the tickets of records whose caller wants only where each landed (a batch's delivery
/// report): their acknowledgements are `ProducerEvent::Acknowledged`, without a copy of the
/// record. Ticket numbers stay below it.
pub const POSITION_ONLY: Ticket = 1 << 45;

/// A record in the producer's care, with what is needed to report on it.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The record.
    pub record: OutgoingRecord,
    /// Hashing key for choosing the partition, when it differs from the record key.
    pub partition_key: Option<Vec<u8>>,
    /// Delivery-result ticket (0 = untracked).
    pub ticket: Ticket,
    /// Sends so far that librdkafka reported failed.
    pub failures: u32,
}
