//! The data plane's error: what failed, on which side, and the status it maps to, in one place.

use std::fmt;

/// What went wrong while proxying a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Connecting to a node took longer than the connect timeout.
    ConnectTimeout,
    /// Connecting to a node failed (refused, unreachable, reset).
    ConnectFailed,
    /// The node's TLS certificate failed verification (`tls.verify`, on by default, where
    /// APISIX does not verify): a connect failure, named so that operators see why.
    CertificateRejected,
    /// Writing the request upstream stalled past the send timeout.
    SendTimeout,
    /// Writing the request upstream failed.
    SendFailed,
    /// No response bytes within the read timeout.
    ReadTimeout,
    /// Reading the response failed.
    ReadFailed,
    /// The upstream closed the connection before a complete response head.
    UpstreamClosed,
    /// A new connection was closed or reset by the node before any response byte (NGINX's
    /// `error` of `proxy_next_upstream`): counted against the node like a refused connect.
    NoAnswer,
    /// The upstream sent something that is not a valid HTTP/1.1 response.
    InvalidResponse,
    /// Every node is out of rotation (weight 0 or recently failed).
    NoHealthyNode,
    /// The route has no upstream (its plugins answer it, and this request they let through).
    NoUpstream,
    /// The upstream's or the route's `max_inflight` is reached.
    Overloaded,
    /// The client stopped sending its request body.
    ClientTimeout,
    /// The client's chunked body is malformed.
    InvalidBody,
    /// The client's body is larger than the limit.
    BodyTooLarge,
    /// The client went away while the node had not answered yet (an HTTP/2 stream the client
    /// reset): nothing is answered, the node's connection is closed, and the request is
    /// logged with 499, NGINX's "client closed request".
    ClientGone,
}

/// Which side of the proxy caused an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Upstream,
    Downstream,
}

/// What an attempt's failure allows (Pingora carries the same on its errors): the lifecycle
/// in [`crate::upstream::select`] decides from it, for every protocol path alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The request may have had an effect, or the failure is the client's: answer it.
    No,
    /// Nothing reached a node's application: the next node may get the request (a connect
    /// failure; a reset before any response byte of a request that may be sent again).
    NextNode,
    /// A pooled connection was found closed before any response byte: the same node gets the
    /// request again on a new connection, without counting as a retry.
    SameNodeFresh,
}

/// An error on the request path. Carries its cause for the log; the client only sees the
/// status and a short generic message.
#[derive(Debug, Clone)]
pub(crate) struct Error {
    kind: Kind,
    retry: Retry,
    cause: Option<String>,
}

impl Error {
    pub(crate) fn new(kind: Kind) -> Self {
        Error {
            kind,
            retry: Self::default_retry(kind),
            cause: None,
        }
    }

    pub(crate) fn with_cause(kind: Kind, cause: impl fmt::Display) -> Self {
        Error {
            kind,
            retry: Self::default_retry(kind),
            cause: Some(cause.to_string()),
        }
    }

    /// A failure to connect never reached the node: always worth the next node.
    fn default_retry(kind: Kind) -> Retry {
        match kind {
            Kind::ConnectFailed | Kind::CertificateRejected | Kind::ConnectTimeout => {
                Retry::NextNode
            }
            _ => Retry::No,
        }
    }

    /// The same error, with what it allows.
    pub(crate) fn retry_as(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    pub(crate) fn retry(&self) -> Retry {
        self.retry
    }

    /// Says the node is unreachable (counts as a TCP failure in its health): it refused or
    /// timed out a connection, or closed or reset one before any response byte.
    pub(crate) fn is_tcp_failure(&self) -> bool {
        matches!(
            self.kind,
            Kind::ConnectFailed | Kind::CertificateRejected | Kind::ConnectTimeout | Kind::NoAnswer
        )
    }

    /// The connection closed or failed before any response byte: what that allows, for every
    /// path alike. On a pooled connection (`reused`) it was probably stale: the same node on a
    /// new connection. On a new one the node failed (counted against it, as NGINX's
    /// `proxy_next_upstream error`): the next node. Either only when the request may be sent
    /// again (`replayable`: idempotent, all of it still at hand).
    pub(crate) fn before_answer(self, reused: bool, replayable: bool) -> Self {
        if reused {
            return if replayable {
                self.retry_as(Retry::SameNodeFresh)
            } else {
                self
            };
        }
        Error {
            kind: Kind::NoAnswer,
            retry: if replayable {
                Retry::NextNode
            } else {
                Retry::No
            },
            cause: Some(self.to_string()),
        }
    }

    /// Counts as a timeout in the node's health.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self.kind, Kind::SendTimeout | Kind::ReadTimeout)
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn side(&self) -> Side {
        match self.kind {
            Kind::ClientTimeout | Kind::InvalidBody | Kind::BodyTooLarge | Kind::ClientGone => {
                Side::Downstream
            }
            _ => Side::Upstream,
        }
    }

    /// The status the client gets: timeouts 504, no node 503, other upstream failures 502,
    /// client faults 4xx.
    pub(crate) fn status(&self) -> u16 {
        match self.kind {
            Kind::ConnectTimeout | Kind::SendTimeout | Kind::ReadTimeout => 504,
            Kind::NoHealthyNode | Kind::NoUpstream | Kind::Overloaded => 503,
            Kind::ClientTimeout => 408,
            Kind::InvalidBody => 400,
            Kind::BodyTooLarge => 413,
            Kind::ClientGone => 499,
            _ => 502,
        }
    }

    /// The message in the JSON body sent to the client: generic, no addresses.
    pub(crate) fn public_message(&self) -> &'static str {
        match self.kind {
            Kind::ConnectTimeout | Kind::SendTimeout | Kind::ReadTimeout => "upstream timed out",
            Kind::NoHealthyNode => "no healthy upstream node",
            Kind::NoUpstream => "missing upstream configuration in Route or Service",
            Kind::Overloaded => "too many requests in flight, retry later",
            Kind::ClientTimeout => "request body timeout",
            Kind::InvalidBody => "invalid chunked request body",
            Kind::BodyTooLarge => "request body too large",
            Kind::ConnectFailed => "cannot connect to upstream",
            Kind::CertificateRejected => {
                "upstream TLS certificate not trusted: give its CA in the upstream's tls.ca, or set tls.verify: false"
            }
            _ => "invalid response from upstream",
        }
    }
}

impl Error {
    /// The answer the client gets: status, a short JSON message, and `Retry-After` when
    /// trying again soon may work (load shedding).
    pub(crate) fn response(&self) -> sluice_core::Response {
        let r = sluice_core::Response::error(self.status(), self.public_message());
        if self.kind == Kind::Overloaded {
            r.header("retry-after", b"1")
        } else {
            r
        }
    }
}

impl Side {
    /// The side in the log's words.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Side::Upstream => "upstream",
            Side::Downstream => "client",
        }
    }
}

impl Error {
    /// What failed, in words, without the cause (failures of one kind are summarised together
    /// in the error log).
    pub(crate) fn kind_text(&self) -> &'static str {
        match self.kind {
            Kind::ConnectTimeout => "connect timed out",
            Kind::ConnectFailed => "connect failed",
            Kind::CertificateRejected => {
                "the node's TLS certificate failed verification (the upstream's tls.verify is true: give its CA in tls.ca, or set tls.verify: false)"
            }
            Kind::SendTimeout => "sending the request timed out",
            Kind::SendFailed => "sending the request failed",
            Kind::ReadTimeout => "reading the response timed out",
            Kind::ReadFailed => "reading the response failed",
            Kind::UpstreamClosed => "upstream closed the connection before a complete response",
            Kind::NoAnswer => "the node closed or reset the connection before any response byte",
            Kind::InvalidResponse => "invalid response",
            Kind::NoHealthyNode => "no healthy node",
            Kind::NoUpstream => "the route has no upstream, nor has its service",
            Kind::Overloaded => "max_inflight reached: request shed",
            Kind::ClientTimeout => "client request body timed out",
            Kind::InvalidBody => "invalid chunked request body",
            Kind::BodyTooLarge => "request body larger than the limit",
            Kind::ClientGone => "the client went away before the answer",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = self.kind_text();
        match &self.cause {
            Some(c) => write!(f, "{what}: {c}"),
            None => f.write_str(what),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_mapped_in_one_place() {
        assert_eq!(Error::new(Kind::ConnectTimeout).status(), 504);
        assert_eq!(Error::new(Kind::ReadTimeout).status(), 504);
        assert_eq!(Error::new(Kind::ConnectFailed).status(), 502);
        assert_eq!(Error::new(Kind::InvalidResponse).status(), 502);
        assert_eq!(Error::new(Kind::NoHealthyNode).status(), 503);
        assert_eq!(Error::new(Kind::BodyTooLarge).side(), Side::Downstream);
        assert_eq!(
            Error::with_cause(Kind::ConnectFailed, "connection refused").to_string(),
            "connect failed: connection refused"
        );
    }
}
