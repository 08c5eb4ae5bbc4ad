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

use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
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

/// librdkafka's guess when its first request to a broker times out (see [`unanswered_told`]).
const OLD_BROKER_GUESS: &str =
    ": probably due to broker version < 0.10 (see api.version.request configuration)";

/// `reason` (a failure of a connection to a broker, or librdkafka's log line of it) told as a
/// hung broker when it is librdkafka's first request timing out; `None` for any other.
///
/// A broker that accepts connections and never answers (a process stopped or hung in a pause,
/// a network that drops the answers) times out librdkafka's first request, its API version
/// request; librdkafka then guesses a broker older than 0.10 (2016, which no supported client
/// talks to) and names `api.version.request`, which sends users the wrong way. The guess is
/// dropped and the likely cause said instead, in the error and in the log line alike.
pub(crate) fn unanswered_told(reason: &str) -> Option<String> {
    if !reason.contains("in state APIVERSION_QUERY") || !reason.contains("Timed out") {
        return None;
    }
    Some(format!(
        "{}: the broker accepted the connection and did not answer its first request: a broker \
         process that hangs, or a network that drops its answers",
        reason.replace(OLD_BROKER_GUESS, "")
    ))
}

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

/// Whether an error event says a broker could not be reached this time (nothing listening, a name
/// that does not resolve, a connection closed), which may change while a call waits.
fn is_unreachable(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::Resolve
    )
}

#[derive(Debug, Default)]
struct WatchState {
    failure: Option<ConnectionFailure>,
    /// Why a broker could not be reached, last time one could not (a refused connection, a name
    /// that does not resolve, a connection the broker closed): not a reason to stop waiting, as
    /// a broker that is away may come back, but the cause a timeout names.
    unreachable: Option<String>,
    /// Threads waiting on the client, woken when a failure is recorded.
    waiters: Vec<Thread>,
}

/// The latest connection failure of one client (or of the clients of one component), shared
/// between its librdkafka context and the threads that wait on it.
#[derive(Debug, Default)]
pub(crate) struct ConnectionWatch {
    state: Mutex<WatchState>,
    /// Whether a failure or an unreachable broker is recorded, so that
    /// [`ConnectionWatch::clear`] on every delivery takes no lock while the client works.
    noted: AtomicBool,
    /// The values of the client's secret settings, cut out of every recorded reason.
    secrets: Vec<String>,
    /// Whether the client speaks plaintext (`security.protocol` plaintext or sasl_plaintext),
    /// which makes a connection closed at its first request a sign of a TLS listener.
    plaintext: bool,
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
        let protocol = settings
            .get("security.protocol")
            .unwrap_or("plaintext")
            .to_ascii_lowercase();
        ConnectionWatch {
            state: Mutex::default(),
            noted: AtomicBool::new(false),
            secrets: settings.secret_values(),
            plaintext: !protocol.ends_with("ssl"),
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

    /// Takes note of an error event of the client and logs it (see
    /// [`log_unless_end`](crate::client::log_unless_end)) without the client's secrets.
    pub(crate) fn observe_and_log(&self, error: KafkaError, reason: &str) {
        self.observe(&error, reason);
        crate::client::log_unless_end(error, &self.redact(reason));
    }

    /// Takes note of a librdkafka log line of the client. A broker's FAIL line is the only word
    /// librdkafka gives of a connection the broker closed (a TLS listener hanging up on a
    /// plaintext client, a broker going away): it sends error events only for failures it logs
    /// at ERROR, and a closed connection is logged at WARNING or INFO.
    pub(crate) fn observe_log(&self, facility: &str, line: &str) {
        if facility == "FAIL" {
            // The line starts with the thread's name, `[thrd:host:port/id]: `, then the reason
            // as an error event words it.
            let reason = line
                .strip_prefix("[thrd:")
                .and_then(|rest| rest.split_once("]: "))
                .map_or(line, |(_, reason)| reason);
            self.note_unreachable(reason);
        }
    }

    fn note_unreachable(&self, reason: &str) {
        let reason = self.diagnose(self.redact(reason));
        self.lock().unreachable = Some(reason);
        self.noted.store(true, Ordering::Release);
    }

    /// Takes note of an error event's code and description: a connection failure ends the waits
    /// on the client; a broker that could not be reached is remembered for the timeout to name.
    pub(crate) fn record(&self, code: RDKafkaErrorCode, reason: &str) {
        if !is_connection_failure(code, reason) {
            if is_unreachable(code) {
                self.note_unreachable(reason);
            }
            return;
        }
        let reason = self.redact(reason);
        let waiters = {
            let mut state = self.lock();
            state.failure = Some(ConnectionFailure { code, reason });
            self.noted.store(true, Ordering::Release);
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
            _ => self.explain_timeout(KafkaIoError::from_rdkafka(
                operation,
                err,
                Duration::ZERO,
                None,
            )),
        }
    }

    /// A plaintext client whose connection the broker closed at its first request (librdkafka's
    /// API version request) most likely reached a TLS listener; librdkafka says so only in some
    /// cases (not when the broker closes the connection without a word, as Kafka's TLS listener
    /// does), so the reason gets that diagnosis here. That first request timing out instead is
    /// a hung broker ([`unanswered_told`]).
    fn diagnose(&self, reason: String) -> String {
        if !reason.contains("in state APIVERSION_QUERY") || reason.contains("security.protocol") {
            reason
        } else if let Some(told) = unanswered_told(&reason) {
            told
        } else if self.plaintext {
            format!(
                "{reason}: the broker closed the connection at the first request, as a TLS \
                 listener does to a plaintext client: check security.protocol"
            )
        } else {
            reason
        }
    }

    /// The client works again: a failure seen before is over.
    pub(crate) fn clear(&self) {
        if self.noted.load(Ordering::Acquire) {
            let mut state = self.lock();
            state.failure = None;
            state.unreachable = None;
            self.noted.store(false, Ordering::Release);
        }
    }

    /// What a wait that ended at its deadline (`error`, any error) tells: the refused
    /// connection behind a timeout, if any (a wrong CA or password is not something waiting
    /// longer would fix); else the timeout, naming why a broker could not be reached, if the
    /// client said so.
    pub(crate) fn explain_timeout(&self, error: KafkaIoError) -> KafkaIoError {
        let KafkaIoError::Timeout {
            operation,
            timeout,
            bootstrap,
            broker_error,
        } = error
        else {
            return error;
        };
        let state = self.lock();
        match &state.failure {
            Some(failure) => failure.error(&operation),
            None => KafkaIoError::Timeout {
                operation,
                timeout,
                bootstrap,
                broker_error: broker_error.or_else(|| state.unreachable.clone()),
            },
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

/// The `error` and `log` methods of a `ClientContext` whose client's connection failures and
/// unreachable brokers go to the [`ConnectionWatch`] at `self.<path>`; errors are logged as
/// [`log_unless_end`](crate::client::log_unless_end) does, log lines as rdkafka's default does.
macro_rules! watch_connection {
    ($($field:ident).+) => {
        fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
            self.$($field).+.observe_and_log(error, reason);
        }

        fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, line: &str) {
            self.$($field).+.observe_log(facility, line);
            $crate::connection_failure::log_as_rdkafka_does(level, facility, line);
        }
    };
}
pub(crate) use watch_connection;

/// Logs a librdkafka log line as rdkafka's default `ClientContext::log` does (a first request
/// that timed out told as [`unanswered_told`] says).
pub(crate) fn log_as_rdkafka_does(level: RDKafkaLogLevel, facility: &str, line: &str) {
    match (facility, unanswered_told(line)) {
        ("FAIL", Some(told)) => DefaultClientContext.log(level, facility, &told),
        _ => DefaultClientContext.log(level, facility, line),
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
            return Err(watch.explain_timeout(KafkaIoError::from_rdkafka(
                "init_transactions",
                e,
                timeout,
                bootstrap,
            )));
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

    fn timed_out_explained(watch: &ConnectionWatch) -> String {
        let timeout =
            KafkaIoError::timed_out("list_topics", Duration::from_secs(3), Some("b:9092"));
        watch.explain_timeout(timeout).to_string()
    }

    #[test]
    fn a_timeout_names_why_a_broker_could_not_be_reached_until_the_client_works() {
        let watch = watch_with_secrets();
        assert_eq!(
            timed_out_explained(&watch),
            "list_topics timed out after 3.0 s: no answer from bootstrap.servers=b:9092"
        );
        watch.record(
            RDKafkaErrorCode::BrokerTransportFailure,
            "b:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused \
             (after 0ms in state CONNECT)",
        );
        watch.record(RDKafkaErrorCode::AllBrokersDown, "1/1 brokers are down");
        assert_eq!(
            timed_out_explained(&watch),
            "list_topics timed out after 3.0 s: no answer from bootstrap.servers=b:9092; last \
             broker error: b:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection \
             refused (after 0ms in state CONNECT)"
        );
        watch.clear();
        assert!(!timed_out_explained(&watch).contains("last broker error"));
        // A refused connection is the error itself, not a timeout.
        watch.record(RDKafkaErrorCode::SSL, "certificate verify failed");
        assert_eq!(
            timed_out_explained(&watch),
            "list_topics failed: certificate verify failed"
        );
    }

    #[test]
    fn a_plaintext_client_cut_off_at_its_first_request_is_told_to_check_security_protocol() {
        let closed = "b:9093/bootstrap: Disconnected: connection closed by peer: receive 0 after \
                      POLLIN (after 2ms in state APIVERSION_QUERY)";
        let plaintext = watch_with_secrets();
        plaintext.record(RDKafkaErrorCode::BrokerTransportFailure, closed);
        let told = timed_out_explained(&plaintext);
        assert!(told.contains(closed), "{told}");
        assert!(
            told.ends_with("as a TLS listener does to a plaintext client: check security.protocol"),
            "{told}"
        );
        let tls = ConnectionWatch::new(&settings_of(&[
            ("bootstrap.servers", "b:9093"),
            ("security.protocol", "SASL_SSL"),
        ]));
        tls.record(RDKafkaErrorCode::BrokerTransportFailure, closed);
        assert!(timed_out_explained(&tls).ends_with("in state APIVERSION_QUERY)"));
    }

    #[test]
    fn a_first_request_without_an_answer_is_told_as_a_hung_broker_not_a_tls_listener() {
        let unanswered = "b:9093/1: ApiVersionRequest failed: Local: Timed out: probably due \
                          to broker version < 0.10 (see api.version.request configuration) \
                          (after 10009ms in state APIVERSION_QUERY)";
        let plaintext = watch_with_secrets();
        plaintext.record(RDKafkaErrorCode::BrokerTransportFailure, unanswered);
        let told = timed_out_explained(&plaintext);
        let without_guess = "b:9093/1: ApiVersionRequest failed: Local: Timed out \
                             (after 10009ms in state APIVERSION_QUERY)";
        assert!(told.contains(without_guess), "{told}");
        assert!(!told.contains("0.10"), "{told}");
        assert!(
            told.ends_with("a broker process that hangs, or a network that drops its answers"),
            "{told}"
        );
        assert!(!told.contains("TLS"), "{told}");
    }

    #[test]
    fn librdkafkas_log_line_of_an_unanswered_first_request_says_hung_broker_not_old_broker() {
        let line = "[thrd:b:9092/bootstrap]: b:9092/bootstrap: ApiVersionRequest failed: Local: \
                    Timed out: probably due to broker version < 0.10 (see api.version.request \
                    configuration) (after 10012ms in state APIVERSION_QUERY, 1 identical \
                    error(s) suppressed)";
        let told = unanswered_told(line).expect("a first request that timed out");
        assert!(
            told.starts_with(
                "[thrd:b:9092/bootstrap]: b:9092/bootstrap: ApiVersionRequest failed: Local: \
                 Timed out (after 10012ms in state APIVERSION_QUERY"
            ),
            "{told}"
        );
        assert!(
            !told.contains("0.10") && !told.contains("api.version.request"),
            "{told}"
        );
        assert!(told.ends_with("a network that drops its answers"), "{told}");
        let refused = "[thrd:b:9092/bootstrap]: b:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 \
                       failed: Connection refused (after 0ms in state CONNECT)";
        assert_eq!(unanswered_told(refused), None);
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
