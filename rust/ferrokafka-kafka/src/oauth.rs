//! OAUTHBEARER tokens from the application: confluent-kafka's `oauth_cb`.
//!
//! Managed clusters (AWS MSK with IAM, Confluent Cloud, Azure Event Hubs) sign in with a bearer
//! token that the application makes and renews. A [`TokenSource`] (set with
//! [`ClientSettings::with_token_source`](crate::ClientSettings::with_token_source)) is given to
//! every client a component creates. librdkafka asks for a token when a client starts and again
//! before each token expires, by an event on the client's main queue; every context of this
//! crate answers it through [`TokenRefresh::token`] (see [`answer_token_refresh!`]), on the
//! thread that polls that queue: a producer's polling thread (see
//! [`PolledProducer`](crate::polled_producer::PolledProducer)), a consumer's poll, or the
//! [`MainQueueWatcher`](crate::main_queue_watcher) of an admin client. A source that fails
//! makes librdkafka report "Failed to acquire SASL OAUTHBEARER token: <its error>" as an
//! authentication error, which the [`ConnectionWatch`](crate::connection_failure) of the
//! component keeps as the cause of the refused connection; librdkafka asks again 10 s later.
//!
//! rdkafka makes answering the event a property of the context type, not of the client. A
//! client without a source whose token librdkafka makes itself must therefore never pass the
//! event to its context: the built-in OIDC handler refreshes on librdkafka's background thread
//! already, and the unsecured-JWT handler (`enable.sasl.oauthbearer.unsecure.jwt`) is moved
//! there by [`create`] (librdkafka's SASL queue, forwarded to its background thread). Without
//! that, each of its refreshes would first fail in the context and be reported as a refused
//! connection.

use std::error::Error;
use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::client::OAuthToken;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, ClientContext};

use crate::error::{KafkaIoError, KafkaResult};

/// A bearer token and what librdkafka needs to know about it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    /// The token, sent to the broker as is.
    pub token: String,
    /// When it expires, in milliseconds since the Unix epoch; librdkafka asks for the next one
    /// at 80 % of its life.
    pub expires_at_ms: i64,
    /// The principal it identifies (librdkafka refuses an empty one).
    pub principal: String,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken")
            .field("token", &ferrokafka_core::redact::REDACTED)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("principal", &self.principal)
            .finish()
    }
}

/// Makes a token, given librdkafka's `sasl.oauthbearer.config` (None when not set); an error
/// is reported as the client's authentication failure. It is called on a thread that polls a
/// client, so it should not block for long.
pub type TokenSource = Arc<dyn Fn(Option<&str>) -> Result<BearerToken, String> + Send + Sync>;

/// librdkafka's setting that gives a client a SASL queue of its own (see [`create`]).
const SASL_QUEUE: &str = "enable_sasl_queue";

/// The token source of one client, held by its context.
#[derive(Clone, Default)]
pub(crate) struct TokenRefresh(Option<TokenSource>);

impl std::fmt::Debug for TokenRefresh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "TokenRefresh(oauth_cb)"
        } else {
            "TokenRefresh(None)"
        })
    }
}

impl TokenRefresh {
    pub(crate) fn new(source: Option<TokenSource>) -> Self {
        TokenRefresh(source)
    }

    /// The answer to librdkafka's token refresh event (rdkafka's `generate_oauth_token`). A
    /// panicking source is an error like any other: it must not take down the polling thread.
    pub(crate) fn token(&self, config: Option<&str>) -> Result<OAuthToken, Box<dyn Error>> {
        let Some(source) = &self.0 else {
            return Err(
                "no OAUTHBEARER token: give oauth_cb, sasl.oauthbearer.method=oidc or \
                 enable.sasl.oauthbearer.unsecure.jwt"
                    .into(),
            );
        };
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| source(config)))
            .unwrap_or_else(|_| Err("the token source panicked".to_owned()));
        let token = made.map_err(|e| format!("oauth_cb failed: {e}"))?;
        Ok(OAuthToken {
            token: token.token,
            principal_name: token.principal,
            lifetime_ms: token.expires_at_ms,
        })
    }
}

/// The two items of a `ClientContext` impl that answer librdkafka's token refresh events with
/// the [`TokenRefresh`] at `$field` of the context.
macro_rules! answer_token_refresh {
    ($($field:ident).+) => {
        const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

        fn generate_oauth_token(
            &self,
            config: Option<&str>,
        ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
            self.$($field).+.token(config)
        }
    };
}
pub(crate) use answer_token_refresh;

/// The `ClientContext` most of our clients need: token refreshes answered from `$field` (see
/// [`answer_token_refresh`]), errors logged by [`log_unless_end`](crate::client::log_unless_end)
/// (rdkafka's default logs every error at ERROR, the broker failures librdkafka logs itself
/// too).
macro_rules! plain_client_context {
    ($context:ty, $($field:ident).+) => {
        impl rdkafka::ClientContext for $context {
            $crate::oauth::answer_token_refresh!($($field).+);

            fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
                $crate::client::log_unless_end(error, reason);
            }
        }
    };
}
pub(crate) use plain_client_context;

/// Answers a token refresh `event` polled from the main queue of `rk`, whose context is
/// `context`, outside rdkafka (the admin client's main queue, which rdkafka never polls) as
/// rdkafka's own poll answers it for the other clients.
///
/// # Safety
/// `rk` must be a live handle and `event` an event polled from its main queue, not destroyed.
pub(crate) unsafe fn answer_refresh_event<C: ClientContext>(
    rk: *mut rdsys::rd_kafka_t,
    context: &C,
    event: *mut rdsys::rd_kafka_event_t,
) {
    if !C::ENABLE_REFRESH_OAUTH_TOKEN {
        return;
    }
    // SAFETY: the caller's contract; librdkafka copies every string it is given.
    unsafe {
        let config = rdsys::rd_kafka_event_config_string(event);
        let config = (!config.is_null()).then(|| CStr::from_ptr(config).to_string_lossy());
        let failure = match context.generate_oauth_token(config.as_deref()) {
            Ok(token) => match (
                CString::new(token.token),
                CString::new(token.principal_name),
            ) {
                (Ok(value), Ok(principal)) => {
                    let mut reason = [0 as std::ffi::c_char; 512];
                    let code = rdsys::rd_kafka_oauthbearer_set_token(
                        rk,
                        value.as_ptr(),
                        token.lifetime_ms,
                        principal.as_ptr(),
                        std::ptr::null_mut(),
                        0,
                        reason.as_mut_ptr(),
                        reason.len(),
                    );
                    if code == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                        return;
                    }
                    CStr::from_ptr(reason.as_ptr())
                        .to_string_lossy()
                        .into_owned()
                }
                _ => "the token or its principal holds a NUL character".to_owned(),
            },
            Err(e) => e.to_string(),
        };
        let failure = CString::new(failure.replace('\0', " ")).unwrap_or_default();
        rdsys::rd_kafka_oauthbearer_set_token_failure(rk, failure.as_ptr());
    }
}

/// The context of a client that needs nothing else (the admin client, a plain consumer).
pub(crate) struct TokenContext {
    tokens: TokenRefresh,
}

impl TokenContext {
    pub(crate) fn new(tokens: TokenRefresh) -> Self {
        TokenContext { tokens }
    }
}

plain_client_context!(TokenContext, tokens);

impl rdkafka::consumer::ConsumerContext for TokenContext {}

/// The rdkafka clients whose librdkafka handle [`create`] reaches.
pub(crate) trait NativeHandle {
    fn native(&self) -> *mut rdsys::rd_kafka_t;
}

impl<C: rdkafka::producer::ProducerContext<P>, P: rdkafka::producer::Partitioner> NativeHandle
    for crate::polled_producer::PolledProducer<C, P>
{
    fn native(&self) -> *mut rdsys::rd_kafka_t {
        rdkafka::producer::Producer::client(self).native_ptr()
    }
}

impl<C: rdkafka::consumer::ConsumerContext> NativeHandle for rdkafka::consumer::BaseConsumer<C> {
    fn native(&self) -> *mut rdsys::rd_kafka_t {
        rdkafka::consumer::Consumer::client(self).native_ptr()
    }
}

/// Whether librdkafka makes this client's tokens itself on the main queue (the unsecured-JWT
/// handler), which the contexts' answer to the refresh event must not see.
fn builtin_refresh_on_main_queue(config: &ClientConfig) -> bool {
    config
        .get("sasl.mechanisms")
        .or(config.get("sasl.mechanism"))
        .is_some_and(|m| m.eq_ignore_ascii_case("OAUTHBEARER"))
        && config
            .get("enable.sasl.oauthbearer.unsecure.jwt")
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1"))
}

/// Creates a client from `config` with `context`; the unsecured-JWT handler's refreshes go to
/// librdkafka's background thread (see the module docs).
pub(crate) fn create<T, C>(config: &ClientConfig, context: C) -> Result<T, KafkaError>
where
    C: ClientContext,
    T: FromClientConfigAndContext<C> + NativeHandle,
{
    if !builtin_refresh_on_main_queue(config) {
        return config.create_with_context(context);
    }
    let mut config = config.clone();
    config.set(SASL_QUEUE, "true");
    let client: T = config.create_with_context(context)?;
    // SAFETY: a live handle; the returned error, if any, is destroyed once read.
    unsafe {
        let error = rdsys::rd_kafka_sasl_background_callbacks_enable(client.native());
        if !error.is_null() {
            let reason = CStr::from_ptr(rdsys::rd_kafka_error_string(error))
                .to_string_lossy()
                .into_owned();
            rdsys::rd_kafka_error_destroy(error);
            return Err(KafkaError::ClientCreation(format!(
                "cannot refresh OAUTHBEARER tokens in the background: {reason}"
            )));
        }
    }
    Ok(client)
}

/// [`create`], its failure the engines' error saying `what` was being done: how every
/// component makes its clients.
pub(crate) fn create_client<T, C>(config: &ClientConfig, context: C, what: &str) -> KafkaResult<T>
where
    C: ClientContext,
    T: FromClientConfigAndContext<C> + NativeHandle,
{
    create(config, context).map_err(|e| KafkaIoError::from_rdkafka(what, e, Duration::ZERO, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_or_panicking_source_is_an_error_naming_it() {
        let failing: TokenSource = Arc::new(|_| Err("no credentials".to_owned()));
        let Err(err) = TokenRefresh::new(Some(failing)).token(None) else {
            panic!("a failing source gave a token")
        };
        assert_eq!(err.to_string(), "oauth_cb failed: no credentials");
        let panicking: TokenSource = Arc::new(|_| panic!("boom"));
        let Err(err) = TokenRefresh::new(Some(panicking)).token(None) else {
            panic!("a panicking source gave a token")
        };
        assert!(err.to_string().contains("panicked"), "{err}");
        let Err(none) = TokenRefresh::default().token(None) else {
            panic!("no source gave a token")
        };
        assert!(none.to_string().contains("oauth_cb"), "{none}");
    }

    #[test]
    fn the_source_gets_the_oauthbearer_config() {
        let source: TokenSource = Arc::new(|config| {
            Ok(BearerToken {
                token: format!("t-{}", config.unwrap_or("")),
                expires_at_ms: 7,
                principal: "p".to_owned(),
            })
        });
        let token = TokenRefresh::new(Some(source))
            .token(Some("scope=x"))
            .unwrap();
        assert_eq!(token.token, "t-scope=x");
        assert_eq!(token.lifetime_ms, 7);
        assert_eq!(token.principal_name, "p");
    }
}
