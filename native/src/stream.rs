//! One reading of a trace, several engines on their own threads.
//!
//! A replay's histories and a fleet's simulations never interact, so each group of them runs
//! on its own thread over the same batches of requests (shared, not copied). Batches travel
//! through bounded channels, so a slow engine holds the reading back instead of letting
//! batches pile up: memory stays the engines' state plus a few batches, whatever the trace's
//! length.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use kvreuse_core::trace::Request;

/// Batches that may wait for an engine's thread.
const QUEUED_BATCHES: usize = 2;

/// What handing over a batch returns when an engine's thread has stopped (on an error, which
/// the caller reports): the reading should stop too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped;

/// Runs each of `engines` on its own thread, pushing every request of the batches `read`
/// produces with `push`, until the reading ends or the engine fails. `read` runs on the
/// calling thread. Returns what the reading returned and each engine (or its error), in order.
pub(crate) fn fan_out<W: Send, E: Send, T, S>(
    engines: Vec<W>,
    push: fn(&mut W, &Request) -> Result<(), E>,
    read: impl FnOnce(&mut dyn FnMut(Vec<Request>) -> Result<(), Stopped>) -> Result<T, S>,
) -> (Result<T, S>, Vec<Result<W, E>>) {
    std::thread::scope(|scope| {
        let mut senders: Vec<SyncSender<Arc<Vec<Request>>>> = Vec::new();
        let mut handles = Vec::new();
        for engine in engines {
            let (send, receive) = sync_channel(QUEUED_BATCHES);
            senders.push(send);
            handles.push(scope.spawn(move || run(engine, push, receive)));
        }
        let mut hand = |batch: Vec<Request>| -> Result<(), Stopped> {
            let batch = Arc::new(batch);
            for send in &senders {
                // A thread that stopped (on an error) no longer listens; its error is
                // collected below.
                send.send(Arc::clone(&batch)).map_err(|_| Stopped)?;
            }
            Ok(())
        };
        let found = read(&mut hand);
        drop(senders);
        let done =
            handles.into_iter().map(|h| h.join().expect("an engine thread panicked")).collect();
        (found, done)
    })
}

/// An engine's thread: pushes every request it receives until the channel closes or the
/// engine refuses one.
fn run<W, E>(
    mut engine: W,
    push: fn(&mut W, &Request) -> Result<(), E>,
    batches: Receiver<Arc<Vec<Request>>>,
) -> Result<W, E> {
    for batch in batches {
        for request in batch.iter() {
            push(&mut engine, request)?;
        }
    }
    Ok(engine)
}

/// Item `i` of `items` goes to group `i % groups`: the groups, in order.
pub(crate) fn deal<T: Clone>(items: &[T], groups: usize) -> Vec<Vec<T>> {
    (0..groups).map(|g| items.iter().skip(g).step_by(groups).cloned().collect()).collect()
}

/// The inverse of [`deal`]: the groups' items back in their original order.
pub(crate) fn gather<T>(groups: Vec<Vec<T>>) -> Vec<T> {
    let n = groups.len();
    let total = groups.iter().map(Vec::len).sum();
    let mut slots: Vec<Option<T>> = std::iter::repeat_with(|| None).take(total).collect();
    for (g, items) in groups.into_iter().enumerate() {
        for (k, item) in items.into_iter().enumerate() {
            slots[g + k * n] = Some(item);
        }
    }
    slots.into_iter().map(|slot| slot.expect("every item has a place")).collect()
}
