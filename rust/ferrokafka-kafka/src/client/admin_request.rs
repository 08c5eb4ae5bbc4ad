//! [`AdminHandle`]: the librdkafka client the [`Client`](super::Client)'s administration goes
//! through, and [`AdminRequest`]: one request (create or delete topics, describe a broker's
//! configuration) answered on the thread that waits for it.
//!
//! Why not rdkafka's `AdminClient`: it reads every result on a polling thread of its own, which
//! wakes every 100 ms to look at a stop flag, and its drop joins that thread. Every `Client`'s
//! drop (each CLI command, each `ferrokafka status`, each service that makes a client per
//! request) therefore waited for nothing: 50 ms measured, against 4 ms for confluent-kafka's
//! `AdminClient`. Here a request gets a result queue of its own; librdkafka calls back when the
//! result arrives (`rd_kafka_queue_cb_event_enable`), the callback unparks the thread that made
//! the request, and that thread reads the result, waiting in the client's
//! [`ConnectionWatch`](crate::connection_failure::ConnectionWatch) as every other wait of the
//! client does. Nothing is left running between requests, so the drop has nothing to join.
//!
//! A request abandoned at its deadline releases its queue: librdkafka holds a reference of its
//! own until it answers, and the answer is then dropped with it. The callback is turned off
//! first, under the queue's lock that librdkafka holds while it calls it, so it never runs with
//! a freed argument.

use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr::NonNull;
use std::thread::Thread;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::bindings as rdsys;
use rdkafka::client::Client as RdClient;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaType};

use super::NewTopicSpec;
use crate::oauth::NativeHandle;

/// A topic's outcome in a request: its name, or its name and why librdkafka refused it.
pub(super) type TopicOutcome = Result<String, (String, RDKafkaErrorCode)>;

/// The entries of a configuration, each a name and its value (`None` when unset or secret).
pub(super) type ConfigEntries = Vec<(String, Option<String>)>;

/// librdkafka's function sending an admin request about some objects (`rd_kafka_CreateTopics`
/// and the like): the handle, the objects, their count, the options, the result queue.
type RequestCall<O> = unsafe extern "C" fn(
    *mut rdsys::rd_kafka_t,
    *mut *mut O,
    usize,
    *const rdsys::rd_kafka_AdminOptions_t,
    *mut rdsys::rd_kafka_queue_t,
);

/// The administration's librdkafka client: a producer-type handle, as rdkafka's and
/// confluent-kafka's admin clients are, with no thread of its own (see the module docs).
pub(crate) struct AdminHandle<C: ClientContext>(RdClient<C>);

impl<C: ClientContext> FromClientConfigAndContext<C> for AdminHandle<C> {
    fn from_config_and_context(config: &ClientConfig, context: C) -> KafkaResult<Self> {
        let native = config.create_native_config()?;
        RdClient::new(config, native, RDKafkaType::RD_KAFKA_PRODUCER, context).map(AdminHandle)
    }
}

impl<C: ClientContext> NativeHandle for AdminHandle<C> {
    fn native(&self) -> *mut rdsys::rd_kafka_t {
        self.0.native_ptr()
    }
}

impl<C: ClientContext> AdminHandle<C> {
    /// The rdkafka client, for metadata requests and the main queue's watcher.
    pub(crate) fn inner(&self) -> &RdClient<C> {
        &self.0
    }

    /// Asks the brokers to create `specs`, each bounded by `timeout`.
    pub(super) fn create_topics(
        &self,
        specs: &[NewTopicSpec],
        timeout: Duration,
    ) -> KafkaResult<AdminRequest<Vec<TopicOutcome>>> {
        let mut topics =
            Owned::<rdsys::rd_kafka_NewTopic_t>::array(rdsys::rd_kafka_NewTopic_destroy);
        for spec in specs {
            let name = c_string(&spec.name)?;
            let mut reason = ErrorText::new();
            // SAFETY: a NUL-terminated name and a buffer of the size given; the topic is owned
            // by `topics` from here on.
            let topic = unsafe {
                rdsys::rd_kafka_NewTopic_new(
                    name.as_ptr(),
                    spec.num_partitions,
                    spec.replication_factor,
                    reason.buffer(),
                    ErrorText::SIZE,
                )
            };
            let topic = topics.push(topic).ok_or_else(|| reason.admin_error())?;
            for (key, value) in &spec.config {
                let (key, value) = (c_string(key)?, c_string(value)?);
                // SAFETY: a live topic and NUL-terminated strings, which librdkafka copies.
                let code = unsafe {
                    rdsys::rd_kafka_NewTopic_set_config(topic, key.as_ptr(), value.as_ptr())
                };
                if code != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    return Err(KafkaError::AdminOpCreation(format!(
                        "topic {:?}: config {:?}: {}",
                        spec.name,
                        key,
                        RDKafkaErrorCode::from(code)
                    )));
                }
            }
        }
        self.send(
            rdsys::rd_kafka_CreateTopics,
            &mut topics,
            timeout,
            created_topics,
        )
    }

    /// Asks the brokers to delete `names`, bounded by `timeout`.
    pub(super) fn delete_topics(
        &self,
        names: &[&str],
        timeout: Duration,
    ) -> KafkaResult<AdminRequest<Vec<TopicOutcome>>> {
        let mut topics =
            Owned::<rdsys::rd_kafka_DeleteTopic_t>::array(rdsys::rd_kafka_DeleteTopic_destroy);
        for name in names {
            let c_name = c_string(name)?;
            // SAFETY: a NUL-terminated name, which librdkafka copies.
            let topic = unsafe { rdsys::rd_kafka_DeleteTopic_new(c_name.as_ptr()) };
            topics.push(topic).ok_or_else(|| {
                KafkaError::AdminOpCreation(format!("cannot delete topic {name:?}"))
            })?;
        }
        self.send(
            rdsys::rd_kafka_DeleteTopics,
            &mut topics,
            timeout,
            deleted_topics,
        )
    }

    /// Asks broker `broker` for its configuration, bounded by `timeout`.
    pub(super) fn describe_broker(
        &self,
        broker: i32,
        timeout: Duration,
    ) -> KafkaResult<AdminRequest<ConfigEntries>> {
        let name = c_string(&broker.to_string())?;
        let mut resources = Owned::<rdsys::rd_kafka_ConfigResource_t>::array(
            rdsys::rd_kafka_ConfigResource_destroy,
        );
        // SAFETY: a NUL-terminated name, which librdkafka copies.
        let resource = unsafe {
            rdsys::rd_kafka_ConfigResource_new(
                rdsys::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_BROKER,
                name.as_ptr(),
            )
        };
        resources.push(resource).ok_or_else(|| {
            KafkaError::AdminOpCreation(format!("cannot describe broker {broker}"))
        })?;
        self.send(
            rdsys::rd_kafka_DescribeConfigs,
            &mut resources,
            timeout,
            described_configs,
        )
    }

    /// Sends `objects` with `call` (librdkafka's function for that request), bounded by
    /// `timeout`; `read` reads the answer.
    fn send<O, T>(
        &self,
        call: RequestCall<O>,
        objects: &mut Owned<O>,
        timeout: Duration,
        read: unsafe fn(*mut rdsys::rd_kafka_event_t) -> KafkaResult<T>,
    ) -> KafkaResult<AdminRequest<T>> {
        let options = self.options(timeout)?;
        let request = AdminRequest::new(self.0.native_ptr(), read)?;
        // SAFETY: live objects, options and queue; librdkafka copies what it keeps of each.
        unsafe {
            call(
                self.0.native_ptr(),
                objects.pointers(),
                objects.len(),
                options.get(),
                request.queue.as_ptr(),
            );
        }
        Ok(request)
    }

    /// Options bounding a request by `timeout`, both the request and the brokers' operation:
    /// librdkafka's own request timeout is `socket.timeout.ms` (60 s) otherwise.
    fn options(&self, timeout: Duration) -> KafkaResult<Options> {
        // SAFETY: a live handle; the options are destroyed by `Options`' drop.
        let options = NonNull::new(unsafe {
            rdsys::rd_kafka_AdminOptions_new(
                self.0.native_ptr(),
                rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_ANY,
            )
        })
        .map(Options)
        .ok_or_else(|| KafkaError::AdminOpCreation("librdkafka made no admin options".into()))?;
        let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        for set in [
            rdsys::rd_kafka_AdminOptions_set_request_timeout,
            rdsys::rd_kafka_AdminOptions_set_operation_timeout,
        ] {
            let mut reason = ErrorText::new();
            // SAFETY: live options and a buffer of the size given.
            let code = unsafe { set(options.get(), millis, reason.buffer(), ErrorText::SIZE) };
            if code != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(reason.admin_error());
            }
        }
        Ok(options)
    }
}

/// One request on its way (see the module docs): its result queue, and the thread that
/// librdkafka's callback unparks when the result arrives. `T` is what its answer says.
pub(super) struct AdminRequest<T> {
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// The callback's argument: owned here, freed after the callback is turned off.
    waiter: NonNull<Thread>,
    /// Reads the answer (a live event of this request, without a request-level error).
    read: unsafe fn(*mut rdsys::rd_kafka_event_t) -> KafkaResult<T>,
}

impl<T> AdminRequest<T> {
    fn new(
        rk: *mut rdsys::rd_kafka_t,
        read: unsafe fn(*mut rdsys::rd_kafka_event_t) -> KafkaResult<T>,
    ) -> KafkaResult<Self> {
        // SAFETY: a live handle; the queue is destroyed by the drop, before the handle can be.
        let queue = NonNull::new(unsafe { rdsys::rd_kafka_queue_new(rk) }).ok_or_else(|| {
            KafkaError::AdminOpCreation("librdkafka made no result queue".to_owned())
        })?;
        let waiter = NonNull::from(Box::leak(Box::new(std::thread::current())));
        // SAFETY: a live queue; `waiter` outlives the callback, which the drop turns off
        // before it frees it.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(
                queue.as_ptr(),
                Some(unpark_waiter),
                waiter.as_ptr().cast(),
            );
        }
        Ok(AdminRequest {
            queue,
            waiter,
            read,
        })
    }

    /// What librdkafka answered, `None` while it has not; the error when the request as a
    /// whole failed (its timeout, a broker that refused it).
    pub(super) fn outcome(&self) -> Option<KafkaResult<T>> {
        // SAFETY: a live queue; the event is destroyed once read.
        let event = NonNull::new(unsafe { rdsys::rd_kafka_queue_poll(self.queue.as_ptr(), 0) })?;
        // SAFETY: a live event of this request, destroyed right after and not used after that.
        let outcome = unsafe {
            match rdsys::rd_kafka_event_error(event.as_ptr()) {
                rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => {
                    (self.read)(event.as_ptr())
                }
                code => Err(KafkaError::AdminOp(code.into())),
            }
        };
        // SAFETY: as above.
        unsafe { rdsys::rd_kafka_event_destroy(event.as_ptr()) };
        Some(outcome)
    }
}

impl<T> Drop for AdminRequest<T> {
    fn drop(&mut self) {
        // SAFETY: the queue and the callback's argument made in `new`, each released once: the
        // callback is off (librdkafka turns it off under the lock it calls it under) before
        // its argument is freed.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(self.queue.as_ptr(), None, std::ptr::null_mut());
            rdsys::rd_kafka_queue_destroy(self.queue.as_ptr());
            drop(Box::from_raw(self.waiter.as_ptr()));
        }
    }
}

/// A request's answer of a kind other than asked: librdkafka's mistake, said as one.
fn unexpected_answer(event: *mut rdsys::rd_kafka_event_t) -> KafkaError {
    // SAFETY: a live event (every reader's contract).
    let kind = unsafe { rdsys::rd_kafka_event_type(event) };
    KafkaError::AdminOpCreation(format!("librdkafka answered with an event of kind {kind}"))
}

/// Reads a CreateTopics answer.
///
/// # Safety
/// `event` must be a live event.
unsafe fn created_topics(event: *mut rdsys::rd_kafka_event_t) -> KafkaResult<Vec<TopicOutcome>> {
    let accessors: TopicsAnswer = (
        rdsys::rd_kafka_event_CreateTopics_result,
        rdsys::rd_kafka_CreateTopics_result_topics,
    );
    // SAFETY: the caller's contract.
    unsafe { topics_answer(event, accessors) }
}

/// Reads a DeleteTopics answer.
///
/// # Safety
/// `event` must be a live event.
unsafe fn deleted_topics(event: *mut rdsys::rd_kafka_event_t) -> KafkaResult<Vec<TopicOutcome>> {
    let accessors: TopicsAnswer = (
        rdsys::rd_kafka_event_DeleteTopics_result,
        rdsys::rd_kafka_DeleteTopics_result_topics,
    );
    // SAFETY: the caller's contract.
    unsafe { topics_answer(event, accessors) }
}

/// librdkafka's accessors of a create or delete answer: its result, and the result's topics.
type TopicsAnswer = (
    unsafe extern "C" fn(*mut rdsys::rd_kafka_event_t) -> *const rdsys::rd_kafka_event_t,
    unsafe extern "C" fn(
        *const rdsys::rd_kafka_event_t,
        *mut usize,
    ) -> *mut *const rdsys::rd_kafka_topic_result_t,
);

/// The topics of a create or delete answer, each with its outcome.
///
/// # Safety
/// `event` must be a live event.
unsafe fn topics_answer(
    event: *mut rdsys::rd_kafka_event_t,
    (result_of, topics_of): TopicsAnswer,
) -> KafkaResult<Vec<TopicOutcome>> {
    // SAFETY: the caller's contract; the result and its topics live as long as the event, and
    // `i` stays below the count librdkafka gave.
    unsafe {
        let result = result_of(event);
        if result.is_null() {
            return Err(unexpected_answer(event));
        }
        let mut count = 0;
        let topics = topics_of(result, &mut count);
        Ok((0..count)
            .map(|i| {
                let topic = *topics.add(i);
                let name = text(rdsys::rd_kafka_topic_result_name(topic)).unwrap_or_default();
                match rdsys::rd_kafka_topic_result_error(topic) {
                    rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => Ok(name),
                    code => Err((name, code.into())),
                }
            })
            .collect())
    }
}

/// Reads a DescribeConfigs answer: each entry (name, value) of each resource described; a
/// resource the brokers refused to describe adds none.
///
/// # Safety
/// `event` must be a live event.
unsafe fn described_configs(event: *mut rdsys::rd_kafka_event_t) -> KafkaResult<ConfigEntries> {
    // SAFETY: the caller's contract; resources and entries live as long as the event.
    unsafe {
        let result = rdsys::rd_kafka_event_DescribeConfigs_result(event);
        if result.is_null() {
            return Err(unexpected_answer(event));
        }
        let mut count = 0;
        let resources = rdsys::rd_kafka_DescribeConfigs_result_resources(result, &mut count);
        let mut entries = Vec::new();
        for i in 0..count {
            let resource = *resources.add(i);
            if rdsys::rd_kafka_ConfigResource_error(resource)
                != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                continue;
            }
            let mut configs = 0;
            let config = rdsys::rd_kafka_ConfigResource_configs(resource, &mut configs);
            for j in 0..configs {
                let entry = *config.add(j);
                if let Some(name) = text(rdsys::rd_kafka_ConfigEntry_name(entry)) {
                    entries.push((name, text(rdsys::rd_kafka_ConfigEntry_value(entry))));
                }
            }
        }
        Ok(entries)
    }
}

/// A string librdkafka owns, copied; `None` for null.
///
/// # Safety
/// `pointer` must be null or a live NUL-terminated string.
unsafe fn text(pointer: *const c_char) -> Option<String> {
    // SAFETY: the caller's contract.
    (!pointer.is_null()).then(|| {
        unsafe { CStr::from_ptr(pointer) }
            .to_string_lossy()
            .into_owned()
    })
}

/// librdkafka's callback when a request's result arrives (on one of its threads).
unsafe extern "C" fn unpark_waiter(_rk: *mut rdsys::rd_kafka_t, waiter: *mut c_void) {
    // SAFETY: the `Thread` an `AdminRequest` owns, freed only after this callback is off.
    unsafe { (*waiter.cast::<Thread>()).unpark() }
}

/// A name or config value as librdkafka takes it.
fn c_string(text: &str) -> KafkaResult<CString> {
    CString::new(text)
        .map_err(|_| KafkaError::AdminOpCreation(format!("{text:?} contains a NUL byte")))
}

/// librdkafka's objects of one kind made for a request, destroyed together after it.
struct Owned<T> {
    pointers: Vec<*mut T>,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Owned<T> {
    fn array(destroy: unsafe extern "C" fn(*mut T)) -> Self {
        Owned {
            pointers: Vec::new(),
            destroy,
        }
    }

    /// Takes `pointer` (from a librdkafka constructor); `None` when the constructor failed.
    fn push(&mut self, pointer: *mut T) -> Option<*mut T> {
        (!pointer.is_null()).then(|| {
            self.pointers.push(pointer);
            pointer
        })
    }

    fn pointers(&mut self) -> *mut *mut T {
        self.pointers.as_mut_ptr()
    }

    fn len(&self) -> usize {
        self.pointers.len()
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        for &pointer in &self.pointers {
            // SAFETY: each made by its librdkafka constructor and destroyed once, here.
            unsafe { (self.destroy)(pointer) };
        }
    }
}

/// A request's admin options, destroyed after the request is made (librdkafka copies them).
struct Options(NonNull<rdsys::rd_kafka_AdminOptions_t>);

impl Options {
    fn get(&self) -> *mut rdsys::rd_kafka_AdminOptions_t {
        self.0.as_ptr()
    }
}

impl Drop for Options {
    fn drop(&mut self) {
        // SAFETY: made by rd_kafka_AdminOptions_new, destroyed once.
        unsafe { rdsys::rd_kafka_AdminOptions_destroy(self.0.as_ptr()) }
    }
}

/// The buffer librdkafka writes a refusal's reason into.
struct ErrorText([c_char; ErrorText::SIZE]);

impl ErrorText {
    const SIZE: usize = 512;

    fn new() -> Self {
        ErrorText([0; Self::SIZE])
    }

    fn buffer(&mut self) -> *mut c_char {
        self.0.as_mut_ptr()
    }

    fn admin_error(&self) -> KafkaError {
        // SAFETY: librdkafka NUL-terminates what it writes, and the buffer starts zeroed.
        let text = unsafe { CStr::from_ptr(self.0.as_ptr()) };
        KafkaError::AdminOpCreation(text.to_string_lossy().into_owned())
    }
}
