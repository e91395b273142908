//! Deadlines without a timer per operation.
//!
//! Each connection owns one [`Timer`]: a pinned [`Sleep`] and the deadline of the operation
//! waiting now. An operation that completes on its first poll (the common case on a busy
//! proxy: data is already there, the socket buffer has room) never touches it; only an
//! operation that has to wait arms it. Arming for a later deadline than the sleep's moves
//! nothing: the sleep fires at the earlier one, finds the wait's deadline later, and only
//! then moves (as NGINX leaves a timer that would move by less than
//! `NGX_TIMER_LAZY_DELAY`). A stream that waits for every chunk re-arms at every chunk, and
//! moving the sleep each time cost about 130 instructions (tokio converts the deadline to
//! its wheel's ticks and swaps it in); now it moves once per timeout's length. A wait still
//! ends at its own deadline, never earlier.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The operation did not finish in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Elapsed;

/// A connection's timer.
pub(crate) struct Timer {
    sleep: Pin<Box<Sleep>>,
    /// When the wait armed last must end. The sleep is armed at or before it.
    deadline: Instant,
}

pub(crate) fn new_timer() -> Timer {
    let far = Instant::now() + Duration::from_secs(3600);
    Timer {
        sleep: Box::pin(tokio::time::sleep_until(far)),
        deadline: far,
    }
}

impl Timer {
    /// The wait polled next ends at `at`. The sleep moves only when it would fire after `at`.
    #[inline]
    pub(crate) fn arm(&mut self, at: Instant) {
        self.deadline = at;
        if self.sleep.deadline() > at {
            self.sleep.as_mut().reset(at);
        }
    }

    /// Ready once the deadline armed last has passed; the waker is woken then (and, once per
    /// timeout's length, when the sleep fires for an earlier deadline and moves on).
    #[inline]
    pub(crate) fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if self.sleep.deadline() >= self.deadline {
                return Poll::Ready(());
            }
            self.sleep.as_mut().reset(self.deadline);
        }
    }
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
            timer.arm(match deadline {
                Deadline::After(d) => Instant::now() + d,
                Deadline::At(at) => at,
            });
            armed = true;
        }
        match timer.poll_expired(cx) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Arms `timer` for `first` around an operation that finishes at once, then waits
    /// `then` for one that never does: how long that wait took, checked to end at its own
    /// deadline (never earlier) and not seconds late.
    async fn wait_after(first: Duration, then: Duration) {
        let mut timer = new_timer();
        let quick = timed(&mut timer, first, tokio::task::yield_now());
        assert_eq!(quick.await, Ok(()));
        let start = Instant::now();
        let r = timed(&mut timer, then, std::future::pending::<()>()).await;
        let took = start.elapsed();
        assert_eq!(r, Err(Elapsed));
        assert!(took >= then, "ended early: {took:?} of {then:?}");
        assert!(took < Duration::from_secs(5), "ended late: {took:?}");
    }

    /// The sleep is left armed for an earlier wait; a later wait with a longer timeout ends at
    /// its own deadline, not at the sleep's (the sleep fires, finds the deadline later, moves).
    #[tokio::test]
    async fn a_wait_ends_at_its_own_deadline_not_an_earlier_waits() {
        wait_after(Duration::from_millis(30), Duration::from_millis(150)).await;
    }

    /// A shorter wait after a longer one moves the sleep earlier at once.
    #[tokio::test]
    async fn a_shorter_wait_after_a_longer_one_ends_in_time() {
        wait_after(Duration::from_secs(60), Duration::from_millis(40)).await;
    }

    /// A wait whose operation finishes is not cut by the sleep left from an earlier wait, and
    /// a deadline in the past ends the next wait at once.
    #[tokio::test]
    async fn an_absolute_deadline_in_the_past_ends_the_wait() {
        let mut timer = new_timer();
        let slow = timed(&mut timer, Duration::from_millis(200), async {
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
        assert_eq!(slow.await, Ok(()));
        let past = Instant::now() - Duration::from_millis(1);
        let r = until(&mut timer, past, std::future::pending::<()>()).await;
        assert_eq!(r, Err(Elapsed));
    }
}
