//! [`Client`]: topic administration plus synchronous produce and read-back.
//!
//! Threading: every method blocks its calling thread for at most the given timeout (one deadline
//! for everything the call does) and is safe to call from several threads at once. Delivery
//! reports are routed back to their caller through a per-call slot carried as librdkafka's opaque
//! pointer, so concurrent `produce` calls never see each other's results. The admin client is
//! created with the client, the producer on first use.
//!
//! Refusals: the admin client and the producer share one [`ConnectionWatch`]; a refused TLS
//! handshake, SASL authentication or OAUTHBEARER token ends every wait at once with that cause,
//! and without `allow.auto.create.topics` a produce to a topic the brokers say does not exist
//! fails at once instead of after librdkafka's 30 s of `topic.metadata.propagation.max.ms`.
//!
//! Rooms: this file holds the [`Client`], its errors and its metadata requests, and the context
//! of consumers that read to a partition's end; `admin.rs` the topic administration and the
//! cluster's description; `produce.rs` the synchronous produce and its delivery routing;
//! `read.rs` reading a topic back.

mod admin;
mod admin_request;
mod produce;
mod read;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrokafka_core::PartitionKeyHashing;
use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::config::{ClientRole, ClientSettings};
use crate::connection_failure::{ConnectionWatch, Waited, log_as_rdkafka_does};
use crate::debug_form::debug_showing;
use crate::error::{KafkaIoError, KafkaResult};
use crate::main_queue_watcher::MainQueueWatcher;
use crate::oauth::{self, TokenContext, TokenRefresh, answer_token_refresh};
use crate::partitioner::PartitionCounts;
use crate::polled_producer::PolledProducer;

pub use admin::{BrokerInfo, ClusterInfo, NewTopicSpec, PartitionInfo, TopicInfo};
use admin_request::AdminHandle;
use produce::DeliveryRouter;

/// Pause between metadata attempts while no broker accepts connections.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// The longest one metadata attempt waits for a usable broker: librdkafka's wait for one cannot
/// be woken, so a refusal recorded meanwhile is seen after at most this long.
const METADATA_SLICE: Duration = Duration::from_millis(200);

/// Context of consumers that read to a partition's end on purpose (`enable.partition.eof`):
/// reaching it is how they know they are done, not an error worth logging.
pub(crate) struct EndIsExpected {
    /// Where the consumer's refused connections go, when someone waits on it.
    pub(crate) watch: Option<Arc<ConnectionWatch>>,
    pub(crate) tokens: TokenRefresh,
}

impl ClientContext for EndIsExpected {
    answer_token_refresh!(tokens);

    fn error(&self, error: KafkaError, reason: &str) {
        match &self.watch {
            Some(watch) => watch.observe_and_log(error, reason),
            None => log_unless_end(error, reason),
        }
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, line: &str) {
        if let Some(watch) = &self.watch {
            watch.observe_log(facility, line);
        }
        log_as_rdkafka_does(level, facility, line);
    }
}

/// Logs a client error, except the end-of-partition events of `enable.partition.eof`.
///
/// A broker's connection failure (a transport error, a refused TLS handshake or SASL login) is
/// logged at DEBUG only: librdkafka hands it to the error callback and logs the same text
/// itself (its FAIL line, at ERROR), so every refused connection was printed once more by each
/// client. A failure no broker reported (an OAUTHBEARER token that cannot be had) has no FAIL
/// line and stays at ERROR.
pub(crate) fn log_unless_end(error: KafkaError, reason: &str) {
    let code = error.rdkafka_error_code();
    if matches!(error, KafkaError::PartitionEOF(_)) || code == Some(RDKafkaErrorCode::PartitionEOF)
    {
        return;
    }
    let connection = matches!(
        code,
        Some(
            RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve
                | RDKafkaErrorCode::SSL
                | RDKafkaErrorCode::Authentication
        )
    );
    if connection && reported_by_a_broker(reason) {
        log::debug!("librdkafka: {error}: {reason}");
    } else {
        log::error!("librdkafka: {error}: {reason}");
    }
}

/// Whether `reason` is a broker's failure, as librdkafka words those (and logs them as FAIL):
/// the broker's name first, `[protocol://]host:port/id: ...`.
fn reported_by_a_broker(reason: &str) -> bool {
    reason
        .split_once(": ")
        .is_some_and(|(name, _)| !name.contains(' ') && name.contains('/'))
}

impl rdkafka::consumer::ConsumerContext for EndIsExpected {}

impl EndIsExpected {
    /// A consumer of `settings` plus `extra` that only assigns partitions and reads them to
    /// their end on purpose; its refused connections go to `watch`. It joins no group: librdkafka
    /// wants a `group.id` all the same (`group`), and it commits nothing there.
    pub(crate) fn reader(
        settings: &ClientSettings,
        group: &str,
        extra: &[(&str, &str)],
        watch: Option<Arc<ConnectionWatch>>,
    ) -> KafkaResult<BaseConsumer<EndIsExpected>> {
        let mut reader = settings.for_plain_consumer();
        reader.set("group.id", group);
        // A static member id would fence a group member made of the same settings.
        reader.remove("group.instance.id");
        reader.set("enable.partition.eof", "true");
        reader.set("enable.auto.commit", "false");
        for (key, value) in extra {
            reader.set(*key, *value);
        }
        oauth::create_client(
            &reader.to_client_config(),
            EndIsExpected {
                watch,
                tokens: reader.token_refresh(),
            },
            "create consumer",
        )
    }
}

/// A general-purpose client: administration, synchronous produce, and reading a topic back.
pub struct Client {
    settings: ClientSettings,
    /// Reads the admin client's error events; declared before `admin` so it stops first.
    _admin_errors: MainQueueWatcher,
    admin: AdminHandle<TokenContext>,
    producer: OnceLock<PolledProducer<DeliveryRouter>>,
    partitions: PartitionCounts,
    /// The connection failure of the admin client, the producer or `read_topic`'s consumer.
    watch: Arc<ConnectionWatch>,
    /// Topics the brokers said exist, so `produce` asks about each only once.
    existing_topics: Mutex<HashSet<String>>,
    /// The brokers' `auto.create.topics.enable`, once asked.
    brokers_create_topics: Mutex<Option<bool>>,
}

debug_showing!(Client, settings);

impl Client {
    /// Creates a client; librdkafka validates every key now, so a typo fails here.
    pub fn new(settings: ClientSettings) -> KafkaResult<Self> {
        settings.bootstrap()?;
        let mut admin_settings = settings.for_role(ClientRole::Producer);
        // Its metadata requests (list_topics, read_topic's lookup) must not create the topic
        // they ask about, as a producer's would on brokers with auto.create.topics.enable.
        admin_settings.set("allow.auto.create.topics", "false");
        let admin: AdminHandle<TokenContext> = oauth::create_client(
            &admin_settings.to_client_config(),
            TokenContext::new(settings.token_refresh()),
            "create client",
        )?;
        let watch = Arc::new(ConnectionWatch::new(&settings));
        let admin_errors = MainQueueWatcher::start(admin.inner(), Arc::clone(&watch))
            .map_err(|e| KafkaIoError::Config(format!("cannot start a client thread: {e}")))?;
        Ok(Client {
            settings,
            _admin_errors: admin_errors,
            admin,
            producer: OnceLock::new(),
            partitions: PartitionCounts::default(),
            watch,
            existing_topics: Mutex::default(),
            brokers_create_topics: Mutex::default(),
        })
    }

    /// This client with its partition keys hashed by `hashing` (by default as WaterDrop does).
    pub fn with_partition_key_hashing(mut self, hashing: PartitionKeyHashing) -> Self {
        self.partitions = PartitionCounts::new(hashing);
        self
    }

    fn bootstrap(&self) -> Option<&str> {
        self.settings.bootstrap().ok()
    }

    fn error(&self, operation: &str, err: KafkaError, timeout: Duration) -> KafkaIoError {
        self.explain(KafkaIoError::from_rdkafka(
            operation,
            err,
            timeout,
            self.bootstrap(),
        ))
    }

    /// A timeout becomes the refused TLS handshake or SASL authentication behind it, if any, or
    /// names why no broker could be reached (see [`ConnectionWatch::explain_timeout`]).
    fn explain(&self, error: KafkaIoError) -> KafkaIoError {
        self.watch.explain_timeout(error)
    }

    fn timed_out(&self, operation: &str, timeout: Duration) -> KafkaIoError {
        self.explain(KafkaIoError::timed_out(
            operation,
            timeout,
            self.bootstrap(),
        ))
    }

    /// Asks `client` for metadata until a broker answers, a connection is refused or `deadline`
    /// passes. librdkafka fails at once when every broker refuses the connection; a broker that
    /// is still starting should not be an error while the caller is willing to wait.
    fn fetch_metadata<C: ClientContext>(
        &self,
        operation: &str,
        client: &rdkafka::client::Client<C>,
        topic: Option<&str>,
        deadline: Instant,
        timeout: Duration,
    ) -> KafkaResult<rdkafka::metadata::Metadata> {
        // Until a broker took a request, each attempt waits at most METADATA_SLICE for one.
        let mut slice = METADATA_SLICE;
        loop {
            if let Some(failure) = self.watch.failure() {
                return Err(failure.error(operation));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out(operation, timeout));
            }
            let err = match client.fetch_metadata(topic, left.min(slice)) {
                Ok(metadata) => {
                    self.watch.clear();
                    return Ok(metadata);
                }
                Err(err) => err,
            };
            match self.error(operation, err, timeout) {
                // A broker took the request and did not answer in the slice: wait for the
                // answer to a new one with all the time left.
                KafkaIoError::Timeout { .. } => slice = left,
                KafkaIoError::Broker {
                    retriable: true, ..
                } => {
                    let pause = (Instant::now() + RETRY_PAUSE).min(deadline);
                    if let Waited::Refused(failure) = self.watch.wait_until(pause, || None::<()>) {
                        return Err(failure.error(operation));
                    }
                }
                other => return Err(other),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::settings_of;

    #[test]
    fn broker_failures_are_told_from_the_others_by_their_wording() {
        assert!(reported_by_a_broker(
            "sasl_plaintext://127.0.0.1:19100/bootstrap: SASL PLAIN mechanism handshake failed"
        ));
        assert!(reported_by_a_broker(
            "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"
        ));
        assert!(!reported_by_a_broker(
            "Failed to acquire SASL OAUTHBEARER token: Failed to retrieve OIDC token from \
             \"https://idp/token\": connect refused"
        ));
        assert!(!reported_by_a_broker("1/1 brokers are down"));
    }

    #[test]
    fn unknown_config_key_is_refused_with_its_name() {
        let settings = settings_of(&[("bootstrap.servers", "127.0.0.1:1"), ("no.such.key", "1")]);
        let err = Client::new(settings).unwrap_err();
        assert!(matches!(err, KafkaIoError::Config(_)), "{err:?}");
        assert!(err.to_string().contains("no.such.key"), "{err}");
    }

    #[test]
    fn refused_secret_values_are_named_but_never_shown() {
        for (key, value) in [("sasl.passwrd", "hunter2"), ("ssl.key.pem", "hunter2")] {
            let settings = settings_of(&[
                ("bootstrap.servers", "127.0.0.1:1"),
                // With TLS in use librdkafka parses the key and refuses one that is not PEM.
                ("security.protocol", "SSL"),
                (key, value),
            ]);
            let err = Client::new(settings).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(shown.contains(key), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }

    #[test]
    fn missing_bootstrap_is_a_config_error() {
        let err = Client::new(ClientSettings::default()).unwrap_err();
        assert!(err.to_string().contains("bootstrap.servers"), "{err}");
    }

    #[test]
    fn unreachable_broker_times_out_within_the_deadline() {
        let settings = settings_of(&[("bootstrap.servers", "127.0.0.1:1")]);
        let client = Client::new(settings).unwrap();
        let err = client
            .list_topics(None, Duration::from_millis(300))
            .unwrap_err();
        assert!(matches!(err, KafkaIoError::Timeout { .. }), "{err:?}");
    }
}
