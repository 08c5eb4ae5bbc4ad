//! librdkafka-style configuration, validated before any client exists.
//!
//! Users pass the same `{"bootstrap.servers": ...}` dicts they give confluent-kafka. Keys are
//! checked by librdkafka itself when a client is created, so an unknown key is reported with
//! librdkafka's own wording and the key's name. The broker addresses are checked here first:
//! librdkafka takes a malformed one (`http://host:9092`, `::::`, port 99999) and then only
//! fails to connect, so every call would time out instead of saying what is wrong.

use std::borrow::Cow;
use std::sync::{Arc, RwLock};

use rdkafka::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;

use crate::error::{KafkaIoError, KafkaResult};
use crate::oauth::{TokenRefresh, TokenSource};

pub use ferrokafka_core::redact::{REDACTED, is_sensitive_key};

/// The secret parts of every configuration value a client was created with in this process
/// (see `ferrokafka_core::redact::secrets_in_value`): librdkafka's log lines and errors carry
/// no client identity, so any of them may echo any client's secret. Kept for the process's
/// life; it grows only with distinct secret values.
static KNOWN_SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

fn remember_secrets(key: &str, value: &str) {
    let secrets = ferrokafka_core::redact::secrets_in_value(key, value);
    if secrets.is_empty() {
        return;
    }
    let mut known = KNOWN_SECRETS.write().unwrap_or_else(|p| p.into_inner());
    for secret in secrets {
        if !known.iter().any(|k| k == secret) {
            known.push(secret.to_owned());
        }
    }
}

/// `text` (a log line, an error message) without URL credentials, secret parameters or any
/// secret configuration value given to a client of this process.
pub fn redact(text: &str) -> Cow<'_, str> {
    let known = KNOWN_SECRETS.read().unwrap_or_else(|p| p.into_inner());
    match ferrokafka_core::redact::redact(text, &known) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(cut) => Cow::Owned(cut),
    }
}

/// The keys that list the bootstrap brokers.
const BOOTSTRAP_KEYS: &[&str] = &["bootstrap.servers", "metadata.broker.list"];

/// The listener protocols librdkafka accepts as a prefix of a broker address (`SSL://host:9093`).
const ADDRESS_PROTOCOLS: &[&str] = &["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"];

/// Checks one comma-separated broker list: each address is `[protocol://]host[:port]`, the host
/// a name or IPv4 address or a bracketed IPv6 address, the port 1 to 65535.
fn check_broker_list(key: &str, servers: &str) -> KafkaResult<()> {
    for address in servers.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        check_broker_address(address).map_err(|problem| {
            let shown = shown_address(address);
            KafkaIoError::Config(format!("{key}: broker address {shown:?} {problem}"))
        })?;
    }
    Ok(())
}

/// `address` as an error may quote it: whatever comes before an `@` (credentials written into
/// the address, with or without a scheme; the URL rule of `redact` only sees them after `://`)
/// is cut.
fn shown_address(address: &str) -> Cow<'_, str> {
    match address.rsplit_once('@') {
        Some((before, host)) => {
            let scheme = before.find("://").map_or("", |end| &before[..end + 3]);
            Cow::Owned(format!("{scheme}{REDACTED}@{host}"))
        }
        None => Cow::Borrowed(address),
    }
}

fn check_broker_address(address: &str) -> Result<(), String> {
    if address.contains('@') {
        return Err(
            "has credentials in it (user:password@): a Kafka broker address is \
                    [protocol://]host:port; give them as sasl.username and sasl.password"
                .to_owned(),
        );
    }
    let rest = match address.split_once("://") {
        Some((protocol, rest)) => {
            if !ADDRESS_PROTOCOLS.contains(&protocol.to_ascii_lowercase().as_str()) {
                return Err(format!(
                    "has the prefix {protocol}://, which is not a Kafka listener protocol \
                     (give host:port, optionally prefixed with PLAINTEXT://, SSL://, \
                     SASL_PLAINTEXT:// or SASL_SSL://)"
                ));
            }
            rest
        }
        None => address,
    };
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or("has an IPv6 address without its closing ']'")?;
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err("has no valid IPv6 address between '[' and ']'".to_owned());
        }
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or("has text after ']' that is not :port")?,
                ),
            ),
        }
    } else {
        match rest.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(
                    "has more than one ':' (write an IPv6 address as [addr]:port)".to_owned(),
                );
            }
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return Err("has no host".to_owned());
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'))
    {
        return Err("has a host name with characters no host name has".to_owned());
    }
    if let Some(port) = port {
        match port.parse::<u32>() {
            Ok(1..=65535) if port.chars().all(|c| c.is_ascii_digit()) => {}
            _ => return Err(format!("has port {port:?}, not a number from 1 to 65535")),
        }
    }
    Ok(())
}

/// The kind of librdkafka client a configuration is given to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientRole {
    /// A producer; also the admin client, which librdkafka runs as a producer.
    Producer,
    /// A consumer.
    Consumer,
}

/// Properties librdkafka only knows for consumers ("C" in librdkafka 2.12's CONFIGURATION.md);
/// a producer given one logs a CONFWARN line and ignores it.
const CONSUMER_ONLY: &[&str] = &[
    "group.id",
    "group.instance.id",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "group.protocol.type",
    "group.protocol",
    "group.remote.assignor",
    "coordinator.query.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.commit",
    "auto.commit.enable",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "fetch.wait.max.ms",
    "fetch.queue.backoff.ms",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.error.backoff.ms",
    "offset.store.method",
    "offset.store.path",
    "offset.store.sync.interval.ms",
    "isolation.level",
    "enable.partition.eof",
    "check.crcs",
    "auto.offset.reset",
    "consume.callback.max.messages",
];

/// Properties librdkafka only knows for producers ("P" in the same table).
const PRODUCER_ONLY: &[&str] = &[
    "transactional.id",
    "transaction.timeout.ms",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.ms",
    "linger.ms",
    "message.send.max.retries",
    "retries",
    "queue.buffering.backpressure.threshold",
    "compression.codec",
    "compression.type",
    "compression.level",
    "batch.num.messages",
    "batch.size",
    "delivery.report.only.error",
    "sticky.partitioning.linger.ms",
    "request.required.acks",
    "acks",
    "request.timeout.ms",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "queuing.strategy",
    "produce.offset.report",
    "partitioner",
];

/// librdkafka's statistics interval: only contexts that read the statistics may set it.
const STATISTICS_INTERVAL: &str = "statistics.interval.ms";

/// The CA location settings of the brokers' TLS and of HTTPS (the OIDC token endpoint), each
/// with the settings that say which CA certificates to trust instead.
const TRUSTED_CA_KEYS: &[(&str, &[&str])] = &[
    (
        "ssl.ca.location",
        &["ssl.ca.location", "ssl.ca.pem", "ssl.ca.certificate.stores"],
    ),
    ("https.ca.location", &["https.ca.location", "https.ca.pem"]),
];

/// An ordered list of librdkafka properties, and where OAUTHBEARER tokens come from when the
/// application makes them. Its `Debug` form hides sensitive values.
#[derive(Clone, Default)]
pub struct ClientSettings {
    entries: Vec<(String, String)>,
    token_source: Option<TokenSource>,
}

impl PartialEq for ClientSettings {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
            && match (&self.token_source, &other.token_source) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for ClientSettings {}

impl std::fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(key, value)| {
                (
                    key,
                    if is_sensitive_key(key) {
                        REDACTED
                    } else {
                        value
                    },
                )
            }))
            .finish()
    }
}

impl ClientSettings {
    /// Builds settings from key/value pairs; a later duplicate key wins.
    pub fn new(entries: impl IntoIterator<Item = (String, String)>) -> KafkaResult<Self> {
        let mut settings = ClientSettings::default();
        for (key, value) in entries {
            if key.trim().is_empty() {
                return Err(KafkaIoError::Config("empty configuration key".to_owned()));
            }
            // librdkafka takes C strings ("FFI nul error" otherwise). The value is not shown: it
            // may be a secret.
            if key.contains('\0') {
                return Err(KafkaIoError::Config(format!(
                    "configuration key {key:?} contains a NUL byte"
                )));
            }
            if value.contains('\0') {
                return Err(KafkaIoError::Config(format!(
                    "the value of {key:?} contains a NUL byte"
                )));
            }
            if BOOTSTRAP_KEYS.contains(&key.as_str()) {
                check_broker_list(&key, &value)?;
            }
            settings.set(key, value);
        }
        Ok(settings)
    }

    /// Sets `key` to `value`, replacing an earlier value.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// These settings with OAUTHBEARER tokens made by `source` (confluent-kafka's `oauth_cb`),
    /// for every client created with them. librdkafka's own token makers would never ask it, so
    /// `sasl.oauthbearer.method=oidc` and `enable.sasl.oauthbearer.unsecure.jwt` are refused.
    pub fn with_token_source(mut self, source: TokenSource) -> KafkaResult<Self> {
        let own_maker = if self
            .get("sasl.oauthbearer.method")
            .is_some_and(|m| m.eq_ignore_ascii_case("oidc"))
        {
            Some("sasl.oauthbearer.method=oidc")
        } else if self
            .get("enable.sasl.oauthbearer.unsecure.jwt")
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1"))
        {
            Some("enable.sasl.oauthbearer.unsecure.jwt")
        } else {
            None
        };
        if let Some(setting) = own_maker {
            return Err(KafkaIoError::Config(format!(
                "oauth_cb and {setting} both make OAUTHBEARER tokens: give one of them"
            )));
        }
        self.token_source = Some(source);
        Ok(self)
    }

    /// The token source of these settings' clients, for their contexts.
    pub(crate) fn token_refresh(&self) -> TokenRefresh {
        TokenRefresh::new(self.token_source.clone())
    }

    /// Removes `key`, e.g. a producer-only setting before creating a consumer.
    pub fn remove(&mut self, key: &str) {
        self.entries.retain(|(k, _)| k != key);
    }

    /// Sets `key` only when the user did not.
    pub fn set_default(&mut self, key: &str, value: &str) {
        if self.get(key).is_none() {
            self.entries.push((key.to_owned(), value.to_owned()));
        }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The values of the secret settings (see [`is_sensitive_key`]), to cut out of texts that
    /// may quote them.
    pub(crate) fn secret_values(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|(key, value)| is_sensitive_key(key) && !value.is_empty())
            .map(|(_, value)| value.clone())
            .collect()
    }

    /// `bootstrap.servers`, which every client needs.
    pub fn bootstrap(&self) -> KafkaResult<&str> {
        self.get("bootstrap.servers")
            .or_else(|| self.get("metadata.broker.list"))
            .filter(|servers| !servers.trim().is_empty())
            .ok_or_else(|| {
                KafkaIoError::Config("missing required key 'bootstrap.servers'".to_owned())
            })
    }

    /// These settings without the properties librdkafka only knows for the other role, so one
    /// config dict can serve every client a component creates without CONFWARN lines.
    ///
    /// A producer (or admin client) never gets `statistics.interval.ms`: no producer context
    /// reads librdkafka's statistics, so they would only reach rdkafka's default handler, which
    /// logs the whole document at INFO once per interval. A consumer gets a 10 ms
    /// `fetch.queue.backoff.ms` unless configured ([`FETCH_QUEUE_BACKOFF_MS`]); every client
    /// learns the cluster's metadata every 30 s unless configured ([`METADATA_REFRESH_MS`]).
    pub fn for_role(&self, role: ClientRole) -> ClientSettings {
        let other_only: &[&str] = match role {
            ClientRole::Producer => CONSUMER_ONLY,
            ClientRole::Consumer => PRODUCER_ONLY,
        };
        let unread: &[&str] = match role {
            ClientRole::Producer => &[STATISTICS_INTERVAL],
            ClientRole::Consumer => &[],
        };
        let mut settings = ClientSettings {
            entries: self
                .entries
                .iter()
                .filter(|(key, _)| !other_only.contains(&key.as_str()))
                .filter(|(key, _)| !unread.contains(&key.as_str()))
                .cloned()
                .collect(),
            token_source: self.token_source.clone(),
        };
        if role == ClientRole::Consumer {
            settings.set_default("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
        }
        settings.set_default("topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS);
        settings
    }

    /// These settings for a consumer whose context reads no statistics (a reader that joins no
    /// group, a prefetching consumer): without `statistics.interval.ms`, for the reason given
    /// at [`ClientSettings::for_role`].
    pub(crate) fn for_plain_consumer(&self) -> ClientSettings {
        let mut consumer = self.for_role(ClientRole::Consumer);
        consumer.remove(STATISTICS_INTERVAL);
        consumer
    }

    /// These settings for a producer that writes outside the component's transactions (state
    /// reports, markers): the producer's, without `transactional.id`.
    pub(crate) fn for_plain_producer(&self) -> ClientSettings {
        let mut producer = self.for_role(ClientRole::Producer);
        producer.remove("transactional.id");
        producer
    }

    /// The rdkafka configuration holding these settings.
    pub fn to_client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (key, value) in &self.entries {
            remember_secrets(key, value);
            config.set(key, value);
        }
        // The bundled OpenSSL looks for CA certificates in its build-time directory, which is
        // not where the system keeps them: "probe" makes librdkafka search the usual system
        // locations, so a cluster (or an OIDC token endpoint) with a public CA just works.
        for (location, overrides) in TRUSTED_CA_KEYS {
            if overrides.iter().all(|key| self.get(key).is_none()) {
                config.set(*location, "probe");
            }
        }
        // rdkafka asks librdkafka only for the lines the `librdkafka` logger shows at creation
        // (WARNING when Python's logging is not configured); a connection the broker closed is
        // said only in an INFO line, which the client's connection watch needs to name a
        // timeout's cause (`ConnectionWatch::observe_log`). The logger still drops what it does
        // not show; a user's own `log_level` wins.
        if self.get("log_level").is_none()
            && (config.log_level as i32) < RDKafkaLogLevel::Info as i32
        {
            config.set_log_level(RDKafkaLogLevel::Info);
        }
        config
    }
}

/// How long librdkafka leaves a partition unfetched once its prefetch queue holds
/// `queued.min.messages` records (or `queued.max.messages.kbytes`), for every consumer the
/// components create: librdkafka's own default is 1,000 ms. The engines bound what they take from
/// librdkafka themselves (a full buffer is simply not polled; a daemon loads while it dispatches),
/// so that queue fills whenever the reader pauses, and a reader faster than `queued.min.messages`
/// per second then empties it before the second is over and waits for the rest of it: with
/// `queued.min.messages=20000`, 1M records on 6 partitions showed 1.2-1.4 s holes per partition
/// in the `Consumer` and ran at 0.35-0.5x the speed they had with 10 ms (benches/RESULTS.md).
/// 10 ms re-checks a full partition a hundred times a second at most; 0 would have librdkafka's
/// broker thread re-check it without pause. A user's own value wins.
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// How often every client the components create asks for the cluster's metadata again:
/// librdkafka's default is 5 minutes, so partitions added to a topic were read by the consumers
/// and daemons only 5 minutes later (dispatched as late by the Scheduler) and could not be
/// produced to explicitly until then. 30 s, as the partition-key count is learnt again (the
/// partitioner's cache, as WaterDrop's), costs one small request per client and interval. A
/// user's own value wins.
const METADATA_REFRESH_MS: &str = "30000";

/// Settings holding `pairs`, for the tests.
#[cfg(test)]
pub(crate) fn settings_of(pairs: &[(&str, &str)]) -> ClientSettings {
    let entries = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    ClientSettings::new(entries).unwrap()
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_role_keeps_shared_settings_and_drops_the_other_roles() {
        let settings = settings_of(&[
            ("bootstrap.servers", "b:9092"),
            ("group.id", "g"),
            ("auto.offset.reset", "earliest"),
            ("linger.ms", "5"),
            ("transactional.id", "t"),
            ("security.protocol", "plaintext"),
        ]);
        let producer = settings.for_role(super::ClientRole::Producer);
        assert_eq!(producer.get("group.id"), None);
        assert_eq!(producer.get("auto.offset.reset"), None);
        assert_eq!(producer.get("linger.ms"), Some("5"));
        assert_eq!(producer.get("transactional.id"), Some("t"));
        let consumer = settings.for_role(super::ClientRole::Consumer);
        assert_eq!(consumer.get("group.id"), Some("g"));
        assert_eq!(consumer.get("linger.ms"), None);
        assert_eq!(consumer.get("transactional.id"), None);
        for role in [super::ClientRole::Producer, super::ClientRole::Consumer] {
            let kept = settings.for_role(role);
            assert_eq!(kept.get("bootstrap.servers"), Some("b:9092"));
            assert_eq!(kept.get("security.protocol"), Some("plaintext"));
        }
    }

    use super::*;

    #[test]
    fn every_consumer_refetches_a_full_partition_soon_unless_configured() {
        let backoff = |s: ClientSettings| s.get("fetch.queue.backoff.ms").map(str::to_owned);
        let defaults = settings_of(&[("bootstrap.servers", "b:9092")]);
        assert_eq!(
            backoff(defaults.for_role(ClientRole::Consumer)).as_deref(),
            Some("10")
        );
        assert_eq!(
            backoff(defaults.for_plain_consumer()).as_deref(),
            Some("10")
        );
        assert_eq!(backoff(defaults.for_role(ClientRole::Producer)), None);
        let own = settings_of(&[
            ("bootstrap.servers", "b:9092"),
            ("fetch.queue.backoff.ms", "250"),
        ]);
        assert_eq!(
            backoff(own.for_role(ClientRole::Consumer)).as_deref(),
            Some("250")
        );
    }

    #[test]
    fn every_client_learns_added_partitions_within_30_s_unless_configured() {
        let refresh = |s: ClientSettings| {
            s.get("topic.metadata.refresh.interval.ms")
                .map(str::to_owned)
        };
        let defaults = settings_of(&[("bootstrap.servers", "b:9092")]);
        for role in [ClientRole::Producer, ClientRole::Consumer] {
            assert_eq!(refresh(defaults.for_role(role)).as_deref(), Some("30000"));
        }
        assert_eq!(
            refresh(defaults.for_plain_consumer()).as_deref(),
            Some("30000")
        );
        let own = settings_of(&[
            ("bootstrap.servers", "b:9092"),
            ("topic.metadata.refresh.interval.ms", "5000"),
        ]);
        assert_eq!(
            refresh(own.for_role(ClientRole::Consumer)).as_deref(),
            Some("5000")
        );
    }

    #[test]
    fn only_a_consumer_that_reads_statistics_keeps_their_interval() {
        let settings = settings_of(&[
            ("bootstrap.servers", "b:9092"),
            ("statistics.interval.ms", "100"),
        ]);
        let interval = |s: ClientSettings| s.get("statistics.interval.ms").map(str::to_owned);
        assert_eq!(interval(settings.for_role(ClientRole::Producer)), None);
        assert_eq!(interval(settings.for_plain_consumer()), None);
        assert_eq!(
            interval(settings.for_role(ClientRole::Consumer)).as_deref(),
            Some("100")
        );
    }

    #[test]
    fn system_ca_certificates_are_probed_unless_a_ca_is_given() {
        let mut settings = settings_of(&[("security.protocol", "SSL")]);
        let config = settings.to_client_config();
        assert_eq!(config.get("ssl.ca.location"), Some("probe"));
        assert_eq!(config.get("https.ca.location"), Some("probe"));
        assert!(config.create::<rdkafka::producer::BaseProducer>().is_ok());
        settings.set("https.ca.pem", "-----BEGIN CERTIFICATE-----");
        assert_eq!(settings.to_client_config().get("https.ca.location"), None);
        settings.set("ssl.ca.pem", "-----BEGIN CERTIFICATE-----");
        assert_eq!(settings.to_client_config().get("ssl.ca.location"), None);
        settings.remove("ssl.ca.pem");
        settings.set("ssl.ca.location", "/etc/my-ca.pem");
        assert_eq!(
            settings.to_client_config().get("ssl.ca.location"),
            Some("/etc/my-ca.pem")
        );
    }

    #[test]
    fn malformed_broker_addresses_are_refused_naming_the_problem() {
        for (servers, problem) in [
            ("::::", "more than one ':'"),
            ("http://host:9092", "http://"),
            ("host:99999", "port \"99999\""),
            ("host:-5", "port \"-5\""),
            ("a:9092,b:0", "port \"0\""),
            (":9092", "no host"),
            ("[::1", "closing ']'"),
            ("host/path:9092", "host name"),
        ] {
            let err = ClientSettings::new([("bootstrap.servers".to_owned(), servers.to_owned())])
                .unwrap_err();
            assert!(matches!(err, KafkaIoError::Config(_)), "{servers}: {err:?}");
            let shown = err.to_string();
            assert!(
                shown.contains(problem) && shown.contains("bootstrap.servers"),
                "{servers}: {shown}"
            );
        }
        for servers in [
            "127.0.0.1:9092",
            "broker-1.example.com:9093, broker_2:9094",
            "SSL://host:9093",
            "[::1]:9092",
            "[fe80::1]",
            "localhost",
        ] {
            assert!(
                ClientSettings::new([("bootstrap.servers".to_owned(), servers.to_owned())]).is_ok(),
                "{servers}"
            );
        }
    }

    #[test]
    fn debug_form_hides_sensitive_values_only() {
        let settings = settings_of(&[
            ("bootstrap.servers", "127.0.0.1:1"),
            ("sasl.password", "hunter2"),
        ]);
        let shown = format!("{settings:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("sasl.password") && shown.contains("127.0.0.1:1"),
            "{shown}"
        );
    }

    #[test]
    fn secrets_of_a_client_config_are_cut_from_any_text() {
        let settings = settings_of(&[
            ("sasl.password", "wonderland-9"),
            (
                "sasl.oauthbearer.token.endpoint.url",
                "https://idp.example:8443/token",
            ),
        ]);
        assert_eq!(redact("echo: wonderland-9"), "echo: wonderland-9");
        let _ = settings.to_client_config();
        assert_eq!(redact("echo: wonderland-9"), format!("echo: {REDACTED}"));
        let url = "https://idp.example:8443/token";
        assert!(matches!(redact(url), Cow::Borrowed(_)));
    }
}
