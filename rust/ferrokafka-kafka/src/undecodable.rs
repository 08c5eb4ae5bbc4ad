//! A fetched batch that librdkafka cannot decode: a compressed batch whose records inflate past
//! `receive.message.max.bytes` (a 120 MB zstd value is 4 KB on the wire, and Kafka's default
//! topic takes it), or a corrupt one.
//!
//! librdkafka reports it as a consume error carrying only a code (`_BAD_COMPRESSION`,
//! `_BAD_MSG`), fetches the same batch again and again and reads nothing behind it, so the
//! error never clears by itself: every reader names the partition and offset where it knows
//! them, librdkafka's own detail, and the way out, and the readers that hand records to a
//! caller raise it rather than returning nothing for ever.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::{KafkaIoError, code_name};

/// What a reader says after librdkafka's detail: the setting that reads an oversized batch.
const WAY_OUT: &str = "librdkafka fetches this batch again and reads nothing behind it: raise \
     receive.message.max.bytes (100000000 by default) if its records inflate past it; a \
     corrupt batch never decodes (move the group's offset past it)";

/// The code of a consume error that is a batch librdkafka cannot decode, if `err` is one.
pub(crate) fn undecodable_code(err: &KafkaError) -> Option<RDKafkaErrorCode> {
    match err {
        KafkaError::MessageConsumption(
            code @ (RDKafkaErrorCode::BadCompression | RDKafkaErrorCode::BadMessage),
        ) => Some(*code),
        _ => None,
    }
}

/// The error a reader reports for `err`, a consume error, when it is such a batch: `place` says
/// where the reader knows it is (a topic).
pub(crate) fn undecodable_error(
    operation: &str,
    place: &str,
    err: &KafkaError,
) -> Option<KafkaIoError> {
    let code = undecodable_code(err)?;
    Some(undecodable_batch(operation, code, place, &err.to_string()))
}

/// The error a reader reports for such a batch: `place` says where it is (a topic, or a
/// partition and offset), `detail` is librdkafka's description of it.
pub(crate) fn undecodable_batch(
    operation: &str,
    code: RDKafkaErrorCode,
    place: &str,
    detail: &str,
) -> KafkaIoError {
    KafkaIoError::Broker {
        operation: operation.to_owned(),
        code: code as i32,
        name: code_name(code),
        message: format!("cannot decode the batch at {place}: {detail}; {WAY_OUT}"),
        retriable: false,
        fatal: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_batches_that_cannot_be_decoded_are_undecodable() {
        let compression = KafkaError::MessageConsumption(RDKafkaErrorCode::BadCompression);
        assert_eq!(
            undecodable_code(&compression),
            Some(RDKafkaErrorCode::BadCompression)
        );
        let transport = KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure);
        assert_eq!(undecodable_code(&transport), None);
        assert_eq!(undecodable_code(&KafkaError::PartitionEOF(0)), None);
        assert!(undecodable_error("poll", "topic \"t\"", &compression).is_some());
        assert!(undecodable_error("poll", "topic \"t\"", &transport).is_none());
    }

    #[test]
    fn the_error_names_the_place_the_detail_and_the_setting() {
        let err = undecodable_batch(
            "consume",
            RDKafkaErrorCode::BadCompression,
            "orders [2] at offset 41",
            "Decompression (codec 0x4) of message at 41 of 3871 bytes failed",
        );
        let said = err.to_string();
        assert!(
            said.starts_with(
                "consume failed: cannot decode the batch at orders [2] at offset 41: Decompression"
            ),
            "{said}"
        );
        assert!(said.contains("receive.message.max.bytes"), "{said}");
        assert!(matches!(err, KafkaIoError::Broker { ref name, .. } if name == "_BAD_COMPRESSION"));
    }
}
