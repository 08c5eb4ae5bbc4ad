//! Why a client cannot connect, known as soon as librdkafka says so.
//!
//! librdkafka reports a refused TLS handshake (untrusted CA, wrong host name, a plaintext
//! listener), a refused SASL
//! authentication (wrong password) or an OAUTHBEARER token it could not get (token endpoint
//! unreachable, malformed `sasl.oauthbearer.config`) as an error event, then keeps retrying: the
//! operation waiting on that client would only time out. Every client context hands its error
//! events to a [`ConnectionWatch`], which keeps the latest such failure and wakes the threads
//! waiting on the client, so a wait ends with the cause instead of at its deadline.
//!
//! librdkafka repeats an identical failure at most every 30 s per broker (an OAUTHBEARER one only
//! when it changes), so the watch keeps a failure until the client shows it works again (a
//! delivery, a metadata answer, a fetched record): a call that starts after the event still
//! learns the cause at once. rdkafka's `AdminClient` never polls its main queue, where these
//! events arrive; a [`MainQueueWatcher`](crate::main_queue_watcher::MainQueueWatcher) polls it
//! for the [`Client`](crate::Client). A client without error events (the admin client) only
//! logs a failed OAUTHBEARER token, so the `Client` also keeps its producer, which has them,
//! watching.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::Thread;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{Producer, ProducerContext};

use crate::config::{ClientSettings, REDACTED};
use crate::error::{KafkaIoError, KafkaResult};

/// librdkafka's sensitive property whose parse errors quote parts of its value.
const OAUTHBEARER_CONFIG: &str = "sasl.oauthbearer.config";

/// A refused TLS handshake or SASL authentication, with librdkafka's description (which names the
/// broker and the reason; configured secrets are cut out).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConnectionFailure {
    code: RDKafkaErrorCode,
    reason: String,
}

impl ConnectionFailure {
    /// The error of `operation`, which failed because of this.
    pub(crate) fn error(&self, operation: &str) -> KafkaIoError {
        KafkaIoError::from_code(operation, self.code, Some(self.reason.clone()))
    }
}

/// librdkafka's diagnosis of a TLS client at a plaintext listener, in its first failed handshake.
const PLAINTEXT_LISTENER: &str = "connecting to a PLAINTEXT broker listener?";

/// Whether an error event (`code`, `reason`) says the client cannot connect with its
/// configuration, which waiting will not change. A TLS client at a plaintext listener comes as a
/// transport error, as a broker that is away does, so only librdkafka's own diagnosis tells it.
fn is_connection_failure(code: RDKafkaErrorCode, reason: &str) -> bool {
    match code {
        RDKafkaErrorCode::SSL
        | RDKafkaErrorCode::Authentication
        | RDKafkaErrorCode::SaslAuthenticationFailed => true,
        RDKafkaErrorCode::BrokerTransportFailure => reason.contains(PLAINTEXT_LISTENER),
        _ => false,
    }
}

#[derive(Debug, Default)]
struct WatchState {
    failure: Option<ConnectionFailure>,
    /// Threads waiting on the client, woken when a failure is recorded.
    waiters: Vec<Thread>,
}

/// The latest connection failure of one client (or of the clients of one component), shared
/// between its librdkafka context and the threads that wait on it.
#[derive(Debug, Default)]
pub(crate) struct ConnectionWatch {
    state: Mutex<WatchState>,
    /// Whether a failure is recorded, so that [`ConnectionWatch::clear`] on every delivery takes
    /// no lock while the client works.
    refused: AtomicBool,
    /// The values of the client's secret settings, cut out of every recorded reason.
    secrets: Vec<String>,
}

/// How a wait on a client ended.
pub(crate) enum Waited<T> {
    /// What was waited for.
    Done(T),
    /// The client cannot connect: waiting longer would not help.
    Refused(ConnectionFailure),
    /// The deadline passed.
    TimedOut,
}

impl ConnectionWatch {
    /// A watch for a client created with `settings`.
    pub(crate) fn new(settings: &ClientSettings) -> Self {
        ConnectionWatch {
            state: Mutex::default(),
            refused: AtomicBool::new(false),
            secrets: settings.secret_values(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes note of an error event of the client (what `ClientContext::error` receives); only
    /// connection failures are kept.
    pub(crate) fn observe(&self, error: &KafkaError, reason: &str) {
        if let Some(code) = error.rdkafka_error_code() {
            self.record(code, reason);
        }
    }

    /// Takes note of an error event's code and description; only connection failures are kept.
    pub(crate) fn record(&self, code: RDKafkaErrorCode, reason: &str) {
        if !is_connection_failure(code, reason) {
            return;
        }
        let reason = self.redact(reason);
        let waiters = {
            let mut state = self.lock();
            state.failure = Some(ConnectionFailure { code, reason });
            self.refused.store(true, Ordering::Release);
            std::mem::take(&mut state.waiters)
        };
        for waiter in waiters {
            waiter.unpark();
        }
    }

    /// `reason` without the client's secret values. librdkafka quotes the part of
    /// `sasl.oauthbearer.config` it cannot parse, so what follows that name is cut off as well.
    pub(crate) fn redact(&self, reason: &str) -> String {
        let mut reason = self.secrets.iter().fold(reason.to_owned(), |text, secret| {
            text.replace(secret.as_str(), REDACTED)
        });
        if let Some(at) = reason.find(OAUTHBEARER_CONFIG) {
            reason.truncate(at + OAUTHBEARER_CONFIG.len());
            reason.push_str(": ");
            reason.push_str(REDACTED);
        }
        reason
    }

    /// The error of `operation` for `err`, an error librdkafka handed back: a refused
    /// connection keeps the description this watch recorded, which names the cause.
    pub(crate) fn explain(&self, operation: &str, err: KafkaError) -> KafkaIoError {
        match self.failure() {
            Some(failure) if err.rdkafka_error_code() == Some(failure.code) => {
                failure.error(operation)
            }
            _ => KafkaIoError::from_rdkafka(operation, err, Duration::ZERO, None),
        }
    }

    /// The client works again: a failure seen before is over.
    pub(crate) fn clear(&self) {
        if self.refused.load(Ordering::Acquire) {
            let mut state = self.lock();
            state.failure = None;
            self.refused.store(false, Ordering::Release);
        }
    }

    /// The failure recorded since the client last worked, if any.
    pub(crate) fn failure(&self) -> Option<ConnectionFailure> {
        self.lock().failure.clone()
    }

    /// Waits until `ready` gives a value, a connection failure is recorded or `deadline` passes.
    /// `ready` is asked again whenever the thread is unparked: whatever it waits for must unpark
    /// the waiting thread when it happens (an admin request's callback does).
    pub(crate) fn wait_until<T>(
        &self,
        deadline: Instant,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Waited<T> {
        loop {
            if let Some(value) = ready() {
                return Waited::Done(value);
            }
            {
                let mut state = self.lock();
                if let Some(failure) = &state.failure {
                    return Waited::Refused(failure.clone());
                }
                let current = std::thread::current();
                if !state.waiters.iter().any(|t| t.id() == current.id()) {
                    state.waiters.push(current);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Waited::TimedOut;
            }
            std::thread::park_timeout(deadline - now);
        }
    }
}

/// Longest one `init_transactions` call blocks, so that a refused connection is noticed.
const INIT_TRANSACTIONS_STEP: Duration = Duration::from_millis(200);

/// librdkafka's `init_transactions` on `producer`, whose context feeds `watch`, within `timeout`:
/// a refused connection (a wrong password, an untrusted CA) ends it with its cause as soon as
/// librdkafka reports it, instead of a bare timeout at the end. librdkafka lets a timed-out
/// `init_transactions` (or any retriable failure of it) be called again, and the call resumes
/// where the last one stopped.
pub(crate) fn init_transactions<C: ProducerContext>(
    producer: &impl Producer<C>,
    watch: &ConnectionWatch,
    timeout: Duration,
    bootstrap: Option<&str>,
) -> KafkaResult<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let step = deadline
            .saturating_duration_since(Instant::now())
            .min(INIT_TRANSACTIONS_STEP);
        let Err(e) = producer.init_transactions(step) else {
            return Ok(());
        };
        if let Some(failure) = watch.failure() {
            return Err(failure.error("init_transactions"));
        }
        // A timeout of one step, or a coordinator still loading, says to call again.
        let retriable = matches!(&e, KafkaError::Transaction(rd) if rd.is_retriable());
        if !retriable || Instant::now() >= deadline {
            return Err(KafkaIoError::from_rdkafka(
                "init_transactions",
                e,
                timeout,
                bootstrap,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::settings_of;

    fn watch_with_secrets() -> ConnectionWatch {
        let settings = settings_of(&[
            ("bootstrap.servers", "b:9092"),
            ("sasl.password", "hunter2"),
            (OAUTHBEARER_CONFIG, "principal=p scope=secret-scope"),
        ]);
        ConnectionWatch::new(&settings)
    }

    #[test]
    fn only_connection_failures_are_kept_until_the_client_works() {
        let watch = watch_with_secrets();
        watch.record(
            RDKafkaErrorCode::BrokerTransportFailure,
            "connection refused",
        );
        assert_eq!(watch.failure(), None);
        watch.record(
            RDKafkaErrorCode::Authentication,
            "SASL authentication error",
        );
        let failure = watch.failure().unwrap();
        assert_eq!(failure.code, RDKafkaErrorCode::Authentication);
        watch.clear();
        assert_eq!(watch.failure(), None);
    }

    #[test]
    fn a_transport_error_is_kept_only_with_librdkafkas_plaintext_listener_diagnosis() {
        let watch = watch_with_secrets();
        watch.record(
            RDKafkaErrorCode::BrokerTransportFailure,
            "b:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused",
        );
        assert_eq!(watch.failure(), None);
        watch.record(
            RDKafkaErrorCode::BrokerTransportFailure,
            "ssl://b:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection closed \
             by peer: connecting to a PLAINTEXT broker listener? (after 12ms in state \
             SSL_HANDSHAKE)",
        );
        let failure = watch.failure().unwrap();
        assert_eq!(failure.code, RDKafkaErrorCode::BrokerTransportFailure);
    }

    #[test]
    fn init_transactions_without_an_answer_is_a_timeout() {
        use rdkafka::ClientConfig;
        use rdkafka::producer::BaseProducer;

        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("transactional.id", "init-timeout")
            .set("log_level", "0")
            .create()
            .unwrap();
        let watch = watch_with_secrets();
        let err = init_transactions(
            &producer,
            &watch,
            Duration::from_millis(300),
            Some("127.0.0.1:1"),
        )
        .unwrap_err();
        assert!(matches!(err, KafkaIoError::Timeout { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("no answer from bootstrap.servers=127.0.0.1:1"),
            "{err}"
        );
    }

    #[test]
    fn recorded_reasons_show_no_secret() {
        let watch = watch_with_secrets();
        watch.record(RDKafkaErrorCode::Authentication, "password hunter2 refused");
        assert_eq!(
            watch.failure().unwrap().reason,
            "password [redacted] refused"
        );
        watch.record(
            RDKafkaErrorCode::Authentication,
            "Failed to acquire SASL OAUTHBEARER token: Unrecognized sasl.oauthbearer.config \
             beginning at: scope=secret-scope",
        );
        let reason = watch.failure().unwrap().reason;
        assert!(!reason.contains("secret-scope"), "{reason}");
        assert!(
            reason.contains("Unrecognized sasl.oauthbearer.config"),
            "{reason}"
        );
    }

    #[test]
    fn a_failure_ends_a_wait_at_once() {
        let watch = Arc::new(watch_with_secrets());
        let recorder = Arc::clone(&watch);
        let started = Instant::now();
        let reporter = std::thread::spawn(move || {
            recorder.record(RDKafkaErrorCode::SSL, "certificate verify failed");
        });
        let waited = watch.wait_until(started + Duration::from_secs(10), || None::<()>);
        reporter.join().unwrap();
        assert!(matches!(waited, Waited::Refused(_)));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
