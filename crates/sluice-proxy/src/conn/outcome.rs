//! What a request's exchange ended with: what the connection does next, and what its log
//! line and metrics need.

/// What happens to the connection after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Read the next request.
    KeepAlive,
    /// Close; the response told the client (or the exchange broke).
    Close,
    /// Close after draining unread request bytes (an error response was sent mid-request).
    Linger,
}

impl Next {
    /// After a response sent whole: keep the connection when it may be kept (`keep`), else close
    /// it, after draining the request's unread body when it was not read whole.
    pub(crate) fn after(keep: bool, request_done: bool) -> Next {
        if keep {
            Next::KeepAlive
        } else if request_done {
            Next::Close
        } else {
            Next::Linger
        }
    }
}

/// What the access log needs from an exchange.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) next: Next,
    pub(crate) status: u16,
    /// Response body bytes sent.
    pub(crate) bytes: u64,
    /// The upstream (index in the snapshot) and node used.
    pub(crate) node: Option<(u32, u32)>,
    /// The upstream tried (index in the snapshot), even when no node answered.
    pub(crate) upstream: Option<u32>,
    /// The node's answer: its status and the time to its head.
    pub(crate) answer: crate::metrics::Answer,
    /// Request body bytes received.
    pub(crate) bytes_in: u64,
    /// The consumer an auth plugin identified (index in the snapshot).
    pub(crate) consumer: Option<u32>,
    /// What the request's context hands its log line (trace id, `request_id`, token payload).
    pub(crate) carried: sluice_core::ctx::Carried,
}

impl Outcome {
    pub(crate) fn new(next: Next, status: u16) -> Self {
        Outcome {
            next,
            status,
            bytes: 0,
            node: None,
            upstream: None,
            answer: None,
            bytes_in: 0,
            consumer: None,
            carried: Default::default(),
        }
    }
}
