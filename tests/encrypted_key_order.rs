//! `TypedProducer` writes of an encrypted key, each polled once (put, then
//! delete) and then awaited out of order, land in the order they were first
//! polled. Such a write reads the topic's partition count (on a new
//! producer, and again each `topic.metadata.refresh.interval.ms`) on the
//! blocking pool before its records are handed over: it takes its place in
//! the producer's order before that, so a put polled before the delete of
//! its key never lands after it (which would leave the key live for every
//! reader, and after compaction).
#![cfg(feature = "kafka")]

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use common::kafka::{bootstrap, client_config, create_topic, fresh_topic};
use tombstone_crypt::kafka::TypedProducer;
use tombstone_crypt::{Bytes, DeterministicSerializer, KeyTemplate, Keyset};

/// Polls `f` once.
async fn poll_once<F: Future>(mut f: Pin<&mut F>) {
    std::future::poll_fn(|cx| {
        let _ = f.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_polled_before_the_delete_of_its_encrypted_key_never_lands_after_it() {
    let Some(bootstrap) = bootstrap() else {
        return;
    };
    let topic = fresh_topic("encrypted-order");
    create_topic(&bootstrap, &topic, 4);
    let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let rounds = 30;
    for round in 0..rounds {
        // A new producer: no partition count yet, as every producer
        // starts (and as each is again once its count is older than its
        // refresh interval).
        let p: TypedProducer<[u8], [u8], _, _> = TypedProducer::new(
            &client_config(&bootstrap),
            DeterministicSerializer::new(Bytes, keys.clone()),
            Bytes,
        )
        .unwrap();
        let key = format!("key-{round}");
        // The put is polled first, then the delete (each once), then
        // they are awaited out of order: put, then delete, all the same.
        let mut put = Box::pin(p.send(&topic, key.as_bytes(), Some(&b"put"[..])));
        let mut delete = Box::pin(p.send(&topic, key.as_bytes(), None));
        poll_once(put.as_mut()).await;
        poll_once(delete.as_mut()).await;
        delete.await.unwrap();
        put.await.unwrap();
    }
    let last = common::kafka::last_is_value(&bootstrap, &topic, 4);
    assert_eq!(last.len(), rounds, "one wire key per round");
    let live = last.values().filter(|v| **v).count();
    assert_eq!(
        live, 0,
        "{live} of {rounds} keys end live: the put polled first landed after the delete polled after it"
    );
}
