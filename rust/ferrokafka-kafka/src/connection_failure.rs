//! Why a client cannot connect, for errors that would otherwise only say "timed out".
//!
//! librdkafka reports a refused TLS handshake (wrong CA, wrong host name) or a refused SASL
//! authentication (wrong password) as an error event on the client's main queue, then keeps
//! retrying: the operation itself only times out. rdkafka's `AdminClient` never polls that queue,
//! so the [`Client`](crate::Client) reads the events itself when an operation fails.

use rdkafka::bindings as rdsys;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::types::RDKafkaRespErr;

/// The latest TLS or authentication failure among the events waiting on the main queue of
/// `client`, with librdkafka's description (which names the broker and the reason, never a
/// configured secret). Reading takes the waiting events off the queue.
pub(crate) fn latest_connection_failure<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
) -> Option<(RDKafkaErrorCode, String)> {
    let mut latest = None;
    // SAFETY: `client` owns a live librdkafka handle for the whole call; the queue reference is
    // released below, and each event is destroyed after its description was copied.
    unsafe {
        let queue = rdsys::rd_kafka_queue_get_main(client.native_ptr());
        if queue.is_null() {
            return None;
        }
        loop {
            let event = rdsys::rd_kafka_queue_poll(queue, 0);
            if event.is_null() {
                break;
            }
            if rdsys::rd_kafka_event_type(event) == rdsys::RD_KAFKA_EVENT_ERROR {
                let code = rdsys::rd_kafka_event_error(event);
                if matches!(
                    code,
                    RDKafkaRespErr::RD_KAFKA_RESP_ERR__SSL
                        | RDKafkaRespErr::RD_KAFKA_RESP_ERR__AUTHENTICATION
                ) {
                    let text = rdsys::rd_kafka_event_error_string(event);
                    let text = if text.is_null() {
                        String::new()
                    } else {
                        std::ffi::CStr::from_ptr(text)
                            .to_string_lossy()
                            .into_owned()
                    };
                    latest = Some((code.into(), text));
                }
            }
            rdsys::rd_kafka_event_destroy(event);
        }
        rdsys::rd_kafka_queue_destroy(queue);
    }
    latest
}
