//! What the limit plugins share: APISIX's key settings and the rejection they answer with.

use std::hash::Hasher;

use sluice_config::Validator;
use sluice_core::expr::{Key, Var};
use sluice_core::http::RequestHead;
use sluice_core::{Ctx, Response};

use crate::util::{KeyHasher, Num, check_status};

/// `key_type`, `key`, `rejected_code`, `rejected_msg` as APISIX spells them. (Each plugin
/// declares these fields itself: serde cannot flatten into a struct that rejects unknown
/// fields.)
#[derive(Debug, Clone)]
pub(crate) struct Common {
    pub(crate) key_type: String,
    pub(crate) key: String,
    pub(crate) rejected_code: Num,
    pub(crate) rejected_msg: Option<String>,
}

impl Common {
    pub(crate) fn default_key_type() -> String {
        "var".into()
    }

    pub(crate) fn default_key() -> String {
        "remote_addr".into()
    }

    pub(crate) fn default_rejected_code() -> Num {
        Num::Whole(503)
    }
}

/// The compiled key and rejection.
#[derive(Debug)]
pub(crate) struct Limiter {
    key: Key,
    rejected_code: u16,
    rejected_msg: String,
}

impl Limiter {
    /// True when the key reads the request body.
    pub(crate) fn needs_body(&self) -> bool {
        self.key.needs_body()
    }

    pub(crate) fn new(c: &Common, v: &mut Validator) -> Option<Limiter> {
        let key = match Key::parse(&c.key_type, &c.key) {
            Ok(k) => Some(k),
            Err(e) => {
                v.error_at(
                    if e.starts_with("unknown key_type") {
                        "key_type"
                    } else {
                        "key"
                    },
                    e,
                );
                None
            }
        };
        let code = v.field("rejected_code", |v| check_status(c.rejected_code, 200, v));
        let msg = c.rejected_msg.clone().unwrap_or_else(|| {
            sluice_core::http::write::default_reason(code.unwrap_or(503)).to_owned()
        });
        Some(Limiter {
            key: key?,
            rejected_code: code?,
            rejected_msg: msg,
        })
    }

    /// The request's key, hashed; falls back to the client address when a variable of the key
    /// is missing (as APISIX does).
    #[inline]
    pub(crate) fn key(&self, req: &RequestHead, cx: &Ctx<'_>) -> u64 {
        let mut h = KeyHasher::default();
        if !self.key.hash_into(req, cx, &mut h) {
            h = KeyHasher::default();
            Key::Var(Var::RemoteAddr).hash_into(req, cx, &mut h);
        }
        h.finish()
    }

    pub(crate) fn reject(&self) -> Response {
        Response::error(self.rejected_code, &self.rejected_msg)
    }
}

/// Per-key state of a limit, shared by every worker. Keys nobody uses any more are forgotten
/// in a sweep that runs only when the map has doubled since the last one (amortized: most
/// requests never sweep).
#[derive(Debug)]
pub(crate) struct KeyMap<V> {
    pub(crate) map: dashmap::DashMap<u64, V>,
    /// Size at which stale keys are swept next.
    sweep_at: std::sync::atomic::AtomicUsize,
}

impl<V> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap {
            map: dashmap::DashMap::new(),
            sweep_at: 1024.into(),
        }
    }
}

impl<V> KeyMap<V> {
    /// Keeps the entries `keep` says are still in use, if the map has grown enough.
    pub(crate) fn sweep(&self, mut keep: impl FnMut(&V) -> bool) {
        use std::sync::atomic::Ordering;
        if self.map.len() >= self.sweep_at.load(Ordering::Relaxed) {
            self.map.retain(|_, v| keep(v));
            self.sweep_at
                .store((self.map.len() * 2).max(1024), Ordering::Relaxed);
        }
    }
}
