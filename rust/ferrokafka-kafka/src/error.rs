//! The one error type of the Kafka engines, [`KafkaIoError`].
//!
//! It keeps librdkafka's error code and the retriable/fatal flags so the bindings can map each case
//! to the right Python exception without parsing messages.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::OnceLock;
use std::time::Duration;

use ferrokafka_core::CoreError;
use rdkafka::bindings as rdsys;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::types::RDKafkaConfRes;

use ferrokafka_core::redact::{REDACTED, is_sensitive_key};

/// librdkafka's code for a local timeout (`RD_KAFKA_RESP_ERR__TIMED_OUT`), which every
/// [`KafkaIoError::Timeout`] reports; the bindings export it as `ferrokafka._native.TIMED_OUT_CODE`.
pub const TIMED_OUT_CODE: i32 = RDKafkaErrorCode::OperationTimedOut as i32;
/// librdkafka's name of [`TIMED_OUT_CODE`] (`rd_kafka_err2name`; rdkafka's enum calls it
/// `OperationTimedOut`).
pub const TIMED_OUT_NAME: &str = "_TIMED_OUT";

/// librdkafka's default `message.max.bytes`, as the size refusals name it.
const CLIENT_LIMIT: &str = "1000000 by default";

/// Result alias for the Kafka engines.
pub type KafkaResult<T> = Result<T, KafkaIoError>;

/// Errors of the Kafka engines.
#[derive(Clone, Debug, thiserror::Error)]
pub enum KafkaIoError {
    /// The configuration was refused: an unknown key, a bad value, or a missing required setting.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An operation did not finish within its deadline.
    #[error(
        "{operation} timed out{}{}{}",
        after(.timeout),
        hint(.bootstrap),
        last_seen(.broker_error)
    )]
    Timeout {
        /// What was attempted, e.g. "list_topics".
        operation: String,
        /// The deadline that passed.
        timeout: Duration,
        /// The brokers that did not answer, if known.
        bootstrap: Option<String>,
        /// Why the client last could not reach a broker (librdkafka's description: a refused
        /// connection, a name that does not resolve, a connection the broker closed), if it
        /// said so during the wait: what tells a broker that is away from a wrong address.
        broker_error: Option<String>,
    },
    /// A Kafka or librdkafka error with its code.
    #[error("{operation} failed: {message}")]
    Broker {
        /// What was attempted.
        operation: String,
        /// librdkafka's numeric error code (negative for local errors).
        code: i32,
        /// The code's name, e.g. `TOPIC_ALREADY_EXISTS`.
        name: String,
        /// Human-readable detail.
        message: String,
        /// Whether retrying the same operation may succeed.
        retriable: bool,
        /// Whether the client instance is no longer usable.
        fatal: bool,
    },
    /// The engine was closed before or during the call.
    #[error("{0} is closed")]
    Closed(&'static str),
    /// An argument was refused before anything was sent.
    #[error("{0}")]
    InvalidArgument(String),
}

/// " after N s", or nothing when the deadline is not known (librdkafka's own timeouts, such as a
/// record's `message.timeout.ms`, reach the engines as a bare timeout code: "after 0.0 s" misled).
fn after(timeout: &Duration) -> String {
    if timeout.is_zero() {
        String::new()
    } else {
        format!(" after {:.1} s", timeout.as_secs_f64())
    }
}

fn hint(bootstrap: &Option<String>) -> String {
    match bootstrap {
        Some(servers) => format!(": no answer from bootstrap.servers={servers}"),
        None => String::new(),
    }
}

fn last_seen(broker_error: &Option<String>) -> String {
    match broker_error {
        Some(reason) => format!("; last broker error: {reason}"),
        None => String::new(),
    }
}

/// librdkafka's name for an error code (`rd_kafka_err2name`: `_TRANSPORT`, `_MSG_TIMED_OUT`,
/// `TOPIC_ALREADY_EXISTS`), which confluent-kafka's `KafkaError.name()` shows too; rdkafka's
/// enum names differ for many (`BrokerTransportFailure`, `MessageTimedOut`).
pub fn code_name(code: RDKafkaErrorCode) -> String {
    static NAMES: OnceLock<HashMap<i32, &'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let mut descs: *const rdsys::rd_kafka_err_desc = std::ptr::null();
        let mut count = 0usize;
        // SAFETY: librdkafka hands out its static table of `count` descriptions; names are
        // static C strings, null in the table's gaps.
        unsafe {
            rdsys::rd_kafka_get_err_descs(&raw mut descs, &raw mut count);
            if descs.is_null() {
                return HashMap::new();
            }
            std::slice::from_raw_parts(descs, count)
                .iter()
                .filter(|desc| !desc.name.is_null())
                .filter_map(|desc| {
                    let name = CStr::from_ptr(desc.name).to_str().ok()?;
                    Some((desc.code as i32, name))
                })
                .collect()
        }
    });
    match names.get(&(code as i32)) {
        Some(name) => (*name).to_owned(),
        None => format!("ERR_{}", code as i32),
    }
}

/// Whether an error code describes a condition that may clear by itself.
fn is_retriable(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::BrokerTransportFailure
            | C::AllBrokersDown
            | C::OperationTimedOut
            | C::MessageTimedOut
            | C::RequestTimedOut
            | C::TimedOutQueue
            | C::QueueFull
            | C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::NotEnoughReplicas
            | C::NotEnoughReplicasAfterAppend
            | C::NetworkException
            | C::CoordinatorLoadInProgress
            | C::NotCoordinator
            | C::UnknownTopicOrPartition
    )
}

fn is_timeout(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::OperationTimedOut | C::MessageTimedOut | C::RequestTimedOut | C::TimedOutQueue
    )
}

impl KafkaIoError {
    /// `Ok` when `topic` is a legal topic name (the core's rule,
    /// [`require_topic_name`](ferrokafka_core::topic_name::require_topic_name)), else the
    /// refusal naming it and its role (`what`).
    pub fn check_topic(what: &str, topic: &str) -> KafkaResult<()> {
        ferrokafka_core::topic_name::require_topic_name(what, topic).map_err(|e| match e {
            CoreError::InvalidArgument(reason) => KafkaIoError::InvalidArgument(reason),
            other => KafkaIoError::InvalidArgument(other.to_string()),
        })
    }

    /// Whether the same operation may succeed later: a timeout, or a broker error flagged so.
    pub fn is_retriable(&self) -> bool {
        match self {
            KafkaIoError::Timeout { .. } => true,
            KafkaIoError::Broker { retriable, .. } => *retriable,
            _ => false,
        }
    }

    /// Builds the error for a failed `operation` from librdkafka's error code.
    pub fn from_code(operation: &str, code: RDKafkaErrorCode, detail: Option<String>) -> Self {
        KafkaIoError::Broker {
            operation: operation.to_owned(),
            code: code as i32,
            name: code_name(code),
            message: detail.unwrap_or_else(|| match code {
                // librdkafka words its own refusal as the broker's ("Broker: Message size too
                // large"): where the refusal's origin is not known, both limits are named.
                RDKafkaErrorCode::MessageSizeTooLarge => format!(
                    "MessageSizeTooLarge: the record is over the topic's max.message.bytes \
                     (1048588 by default) or this client's message.max.bytes ({CLIENT_LIMIT})"
                ),
                _ => code.to_string(),
            }),
            retriable: is_retriable(code),
            fatal: matches!(code, RDKafkaErrorCode::Fatal),
        }
    }

    /// The error of a record librdkafka refused as it was handed over (`rd_kafka_produce`),
    /// before any broker saw it, when it was over this client's `message.max.bytes`: said to
    /// be that, not the broker's refusal librdkafka's wording makes of it. `None` for any other
    /// refusal, which the caller explains as usual.
    pub(crate) fn over_client_limit(operation: &str, err: &KafkaError) -> Option<Self> {
        let code = err.rdkafka_error_code()?;
        (code == RDKafkaErrorCode::MessageSizeTooLarge).then(|| {
            let detail = format!(
                "MessageSizeTooLarge: the record is over this client's message.max.bytes \
                 ({CLIENT_LIMIT}), so it was not sent: raise message.max.bytes (and the \
                 topic's max.message.bytes, 1048588 by default, if it is smaller)"
            );
            Self::from_code(operation, code, Some(detail))
        })
    }

    /// The error of a record the broker refused again when it was sent alone, after its batch
    /// was refused (`producer/isolation.rs`): the record's own fault, said with its usual
    /// causes. Any other error is kept as it is.
    pub(crate) fn refused_alone(self) -> Self {
        use RDKafkaErrorCode as C;
        let KafkaIoError::Broker {
            operation, code, ..
        } = &self
        else {
            return self;
        };
        let (code, detail) = if *code == C::InvalidRecord as i32 {
            let detail = "InvalidRecord: the broker refused this record when it was sent alone \
                          (a keyless record on a compacted topic, or a timestamp outside the \
                          topic's message.timestamp.before.max.ms or after.max.ms, say)";
            (C::InvalidRecord, detail)
        } else if *code == C::MessageSizeTooLarge as i32 {
            let detail = "MessageSizeTooLarge: the broker refused this record when it was sent \
                          alone: it is over the topic's max.message.bytes (1048588 by default)";
            (C::MessageSizeTooLarge, detail)
        } else {
            return self;
        };
        Self::from_code(operation, code, Some(detail.to_owned()))
    }

    /// `operation` got no answer within `timeout` from the brokers at `bootstrap`.
    pub fn timed_out(operation: &str, timeout: Duration, bootstrap: Option<&str>) -> Self {
        KafkaIoError::Timeout {
            operation: operation.to_owned(),
            timeout,
            bootstrap: bootstrap.map(str::to_owned),
            broker_error: None,
        }
    }

    fn from_rdkafka_code(
        operation: &str,
        code: RDKafkaErrorCode,
        timeout: Duration,
        bootstrap: Option<&str>,
    ) -> Self {
        if is_timeout(code) {
            Self::timed_out(operation, timeout, bootstrap)
        } else {
            KafkaIoError::from_code(operation, code, None)
        }
    }

    /// The error of a consumer's failed `subscribe` to `what`, named `topics`. librdkafka
    /// refuses a subscription only locally, before any broker is asked (a name starting with
    /// `^` is a regular expression, and an invalid one is refused), so it is a bad argument.
    pub(crate) fn subscribing<'a>(
        what: &'a str,
        topics: &'a [&'a str],
    ) -> impl FnOnce(KafkaError) -> Self + 'a {
        move |e| match e {
            KafkaError::Subscription(reason) => KafkaIoError::InvalidArgument(format!(
                "cannot subscribe to {what} {topics:?} (a name starting with '^' is a regular \
                 expression): {reason}"
            )),
            other => {
                Self::from_rdkafka(&format!("subscribe to {what}"), other, Duration::ZERO, None)
            }
        }
    }

    /// Converts an rdkafka error of `operation`, turning deadline codes into [`KafkaIoError::Timeout`].
    pub fn from_rdkafka(
        operation: &str,
        err: KafkaError,
        timeout: Duration,
        bootstrap: Option<&str>,
    ) -> Self {
        match err {
            KafkaError::ClientConfig(result, description, key, value) => {
                // An unknown key may be a misspelt secret ("sasl.passwrd"), and librdkafka may
                // quote the value in its description: a hidden value is cut out of both.
                let hidden =
                    is_sensitive_key(&key) || result == RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN;
                if hidden {
                    let description = if value.is_empty() {
                        description
                    } else {
                        description.replace(&value, REDACTED)
                    };
                    KafkaIoError::Config(format!("{key}={REDACTED}: {description}"))
                } else {
                    KafkaIoError::Config(format!("{key}={value:?}: {description}"))
                }
            }
            KafkaError::ClientCreation(message) => KafkaIoError::Config(message),
            // A transaction call that timed out (init_transactions with the broker away): a
            // timeout as any other, not a broker's answer.
            KafkaError::Transaction(rd) if !rd.is_fatal() && is_timeout(rd.code()) => {
                Self::timed_out(operation, timeout, bootstrap)
            }
            KafkaError::Transaction(rd) => {
                let code = rd.code();
                KafkaIoError::Broker {
                    operation: operation.to_owned(),
                    code: code as i32,
                    name: code_name(code),
                    message: rd.string(),
                    retriable: rd.is_retriable(),
                    fatal: rd.is_fatal(),
                }
            }
            // rdkafka keeps an admin operation's code out of `rdkafka_error_code`.
            KafkaError::AdminOp(code) => {
                Self::from_rdkafka_code(operation, code, timeout, bootstrap)
            }
            other => match other.rdkafka_error_code() {
                Some(code) => Self::from_rdkafka_code(operation, code, timeout, bootstrap),
                None => KafkaIoError::Broker {
                    operation: operation.to_owned(),
                    code: -1,
                    name: "_UNKNOWN".to_owned(),
                    message: other.to_string(),
                    retriable: false,
                    fatal: false,
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admin_operation_that_timed_out_is_a_timeout() {
        let err = KafkaIoError::from_rdkafka(
            "delete_topics",
            KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut),
            Duration::from_secs(3),
            Some("b:9092"),
        );
        assert!(matches!(err, KafkaIoError::Timeout { .. }), "{err:?}");
    }

    #[test]
    fn a_size_refusal_names_the_limit_that_refused_it() {
        let too_large = || KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let local = KafkaIoError::over_client_limit("produce", &too_large()).map(|e| e.to_string());
        let local = local.unwrap_or_default();
        assert!(
            local.contains("over this client's message.max.bytes"),
            "{local}"
        );
        assert!(!local.contains("Broker:"), "{local}");
        let unknown = KafkaIoError::from_rdkafka("produce", too_large(), Duration::ZERO, None);
        let unknown = unknown.to_string();
        assert!(
            unknown.contains("the topic's max.message.bytes"),
            "{unknown}"
        );
        assert!(
            unknown.contains("this client's message.max.bytes"),
            "{unknown}"
        );
        let other = KafkaError::MessageProduction(RDKafkaErrorCode::InvalidRecord);
        assert!(KafkaIoError::over_client_limit("produce", &other).is_none());
    }

    #[test]
    fn the_timeout_code_is_librdkafkas() {
        assert_eq!(TIMED_OUT_CODE, -185);
    }

    #[test]
    fn code_names_are_librdkafkas() {
        assert_eq!(code_name(RDKafkaErrorCode::SSL), "_SSL");
        assert_eq!(
            code_name(RDKafkaErrorCode::BrokerTransportFailure),
            "_TRANSPORT"
        );
        assert_eq!(
            code_name(RDKafkaErrorCode::MessageTimedOut),
            "_MSG_TIMED_OUT"
        );
        assert_eq!(
            code_name(RDKafkaErrorCode::OperationTimedOut),
            TIMED_OUT_NAME
        );
        assert_eq!(code_name(RDKafkaErrorCode::PartitionEOF), "_PARTITION_EOF");
        assert_eq!(
            code_name(RDKafkaErrorCode::UnsupportedSASLMechanism),
            "UNSUPPORTED_SASL_MECHANISM"
        );
        assert_eq!(
            code_name(RDKafkaErrorCode::TopicAlreadyExists),
            "TOPIC_ALREADY_EXISTS"
        );
    }
}
