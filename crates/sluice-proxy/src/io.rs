//! Deadlines without a timer per operation.
//!
//! Each connection owns one pinned [`Sleep`]. An operation that completes on its first poll
//! (the common case on a busy proxy: data is already there, the socket buffer has room) never
//! touches the timer; only an operation that has to wait arms it. Moving a deadline later is a
//! lock-free store in tokio's timer, so re-arming costs little.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The operation did not finish in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Elapsed;

/// A connection's timer.
pub(crate) type Timer = Pin<Box<Sleep>>;

pub(crate) fn new_timer() -> Timer {
    Box::pin(tokio::time::sleep_until(
        Instant::now() + Duration::from_secs(3600),
    ))
}

/// Runs `fut` until it finishes or `dur` passes.
pub(crate) async fn timed<F: Future>(
    timer: &mut Timer,
    dur: Duration,
    fut: F,
) -> Result<F::Output, Elapsed> {
    within(timer, Deadline::After(dur), fut).await
}

/// Runs `fut` until it finishes or the absolute `deadline` passes.
pub(crate) async fn until<F: Future>(
    timer: &mut Timer,
    deadline: Instant,
    fut: F,
) -> Result<F::Output, Elapsed> {
    within(timer, Deadline::At(deadline), fut).await
}

enum Deadline {
    After(Duration),
    At(Instant),
}

async fn within<F: Future>(
    timer: &mut Timer,
    deadline: Deadline,
    fut: F,
) -> Result<F::Output, Elapsed> {
    let mut fut = pin!(fut);
    let mut armed = false;
    poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        if !armed {
            // The clock is read only once the operation has to wait.
            let at = match deadline {
                Deadline::After(d) => Instant::now() + d,
                Deadline::At(at) => at,
            };
            timer.as_mut().reset(at);
            armed = true;
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Moves what fits of `from` into a reader's `buf`.
#[inline]
pub(crate) fn give<B: bytes::Buf>(from: &mut B, buf: &mut tokio::io::ReadBuf<'_>) {
    let n = from.remaining().min(buf.remaining());
    buf.put_slice(&from.chunk()[..n]);
    from.advance(n);
}
