//! The `Client`'s administration: requests answered on the caller's thread, each through a
//! result queue of its own (`client/admin_request.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use ferrokafka_kafka::{Client, KafkaIoError, NewTopicSpec};

use crate::common::{WAIT, settings, unique};

fn spec(name: &str) -> NewTopicSpec {
    NewTopicSpec {
        name: name.to_owned(),
        num_partitions: 1,
        replication_factor: -1,
        config: Vec::new(),
    }
}

/// A request given up at its deadline releases its result queue while librdkafka still owes it
/// an answer, which then goes nowhere: the client's next requests get their own answers, and the
/// client closes normally.
#[test]
fn requests_given_up_at_their_deadline_leave_the_client_answering_its_next_ones() {
    let client = Client::new(settings(&[])).expect("client");
    let names: Vec<String> = (0..5).map(|_| unique("given-up")).collect();
    let mut given_up = 0;
    for name in &names {
        match client.create_topics(&[spec(name)], false, Duration::from_millis(1)) {
            Err(KafkaIoError::Timeout { .. }) => given_up += 1,
            Ok(_) => {}
            Err(other) => panic!("a 1 ms create_topics failed otherwise: {other}"),
        }
    }
    assert!(given_up > 0, "no request was given up at its 1 ms deadline");

    let specs: Vec<NewTopicSpec> = names.iter().map(|name| spec(name)).collect();
    let created: BTreeSet<String> = client
        .create_topics(&specs, true, WAIT)
        .expect("create_topics after the given-up ones")
        .into_iter()
        .collect();
    assert!(
        created.iter().all(|name| names.contains(name)),
        "{created:?} are not among {names:?}"
    );
    let listed: BTreeSet<String> = client
        .list_topics(None, WAIT)
        .expect("list_topics")
        .topics
        .into_iter()
        .map(|topic| topic.name)
        .collect();
    for name in &names {
        assert!(listed.contains(name), "{name} was not created");
    }
    client.delete_topics(&names, WAIT).expect("delete_topics");
    let Err(again) = client.delete_topics(&names[..1], WAIT) else {
        panic!("deleting a deleted topic succeeded");
    };
    assert!(again.to_string().contains(&names[0]), "{again}");
}
