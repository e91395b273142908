//! Waiting on an idle connection: its keep-alive deadline, the idle gauge, draining, and the
//! TLS close_notify sent before closing.

use std::future::poll_fn;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::client_io::ClientIo;
use crate::io::{Timer, timed};
use crate::worker::Worker;

/// Longest wait to send a TLS close_notify alert before closing.
const CLOSE_NOTIFY: Duration = Duration::from_secs(1);

/// Over TLS, ends the session with a close_notify alert before the connection closes, whoever
/// ends it and why. A client that sees the connection end without one treats the session as
/// truncated, and OpenSSL then refuses to resume it: every next connection would pay a full
/// handshake.
pub(super) async fn close_notify(io: &mut ClientIo, timer: &mut Timer) {
    if let ClientIo::Tls(tls) = io
        && !tls.get_ref().1.is_handshaking()
    {
        tls.get_mut().1.send_close_notify();
        let _ = timed(timer, CLOSE_NOTIFY, io.flush()).await;
    }
}

/// Waits until an idle connection has bytes to read, and reads them into `buf`. False when
/// it should close: the client closed it, it stayed idle for `keepalive`, or the worker is
/// draining.
pub(super) async fn wait_idle(
    w: &Worker,
    io: &mut ClientIo,
    buf: &mut BytesMut,
    timer: &mut Timer,
    idle_slot: &mut Option<usize>,
    listener: Option<usize>,
    keepalive: Duration,
) -> bool {
    let mut until = None;
    let mut idle = Idle::new(w, timer, idle_slot, listener, keepalive, &mut until);
    let mut read = pin!(io.read_buf(buf));
    poll_fn(|cx| match read.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(matches!(r, Ok(n) if n > 0)),
        Poll::Pending => idle.poll(cx),
    })
    .await
}

/// The rest of an idle wait, polled when the connection has nothing to read: the keep-alive
/// deadline (armed on the first wait), the idle gauge, and draining.
pub(super) struct Idle<'a> {
    w: &'a Worker,
    timer: &'a mut Timer,
    idle_slot: &'a mut Option<usize>,
    gauge: Option<&'a crate::metrics::ConnGauges>,
    keepalive: Duration,
    /// The wait's end, kept by the caller across waits that brought no request.
    until: &'a mut Option<Instant>,
    armed: bool,
}

impl<'a> Idle<'a> {
    pub(super) fn new(
        w: &'a Worker,
        timer: &'a mut Timer,
        idle_slot: &'a mut Option<usize>,
        listener: Option<usize>,
        keepalive: Duration,
        until: &'a mut Option<Instant>,
    ) -> Self {
        Idle {
            w,
            timer,
            idle_slot,
            gauge: listener.and_then(|l| w.metrics.shard.conns.get(l)),
            keepalive,
            until,
            armed: false,
        }
    }

    /// `Ready(false)`: stop waiting and close.
    #[inline]
    pub(super) fn poll(&mut self, cx: &mut std::task::Context<'_>) -> Poll<bool> {
        if self.w.draining.get() {
            // Closed after a grace, not at once (`worker::IDLE_GRACE`): a request already on
            // its way is answered, with `Connection: close`.
            let close_at = self.w.drain_idle_until.get().unwrap_or_else(Instant::now);
            if Instant::now() >= close_at {
                return Poll::Ready(false);
            }
            if self.until.is_none_or(|u| u > close_at) {
                *self.until = Some(close_at);
                if self.armed {
                    self.timer.arm(close_at);
                }
            }
        }
        self.w.register_idle(self.idle_slot, cx.waker());
        if !self.armed {
            let keepalive = self.keepalive;
            let at = *self.until.get_or_insert_with(|| Instant::now() + keepalive);
            self.timer.arm(at);
            self.armed = true;
            if let Some(g) = self.gauge {
                g.idle[0].add(1);
            }
        }
        match self.timer.poll_expired(cx) {
            Poll::Ready(()) => Poll::Ready(false),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        if self.armed
            && let Some(g) = self.gauge
        {
            g.idle[0].add(-1);
        }
    }
}
