//! `request-id`: gives each request an id in `X-Request-Id` (kept when the client sent one),
//! passed upstream and, by default, returned to the client.
//!
//! `{header_name: X-Request-Id, include_in_response: true, algorithm: uuid}`; `algorithm` is
//! `uuid` (random version 4) or `nanoid` (21 URL-safe characters).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, ResponseView, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use crate::util::check_header_name;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Config {
    header_name: String,
    include_in_response: bool,
    algorithm: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            header_name: "X-Request-Id".into(),
            include_in_response: true,
            algorithm: "uuid".into(),
        }
    }
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    fn name(&self) -> &'static str {
        "request-id"
    }

    fn priority(&self) -> i32 {
        12015
    }

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let ok = v.field("header_name", |v| check_header_name(&c.header_name, v));
        let nanoid = match c.algorithm.as_str() {
            "uuid" => false,
            "nanoid" => true,
            other => {
                v.error_at(
                    "algorithm",
                    format!("unknown algorithm \"{other}\", expected uuid or nanoid"),
                );
                return None;
            }
        };
        ok.then(|| {
            Arc::new(RequestId {
                header: c.header_name,
                respond: c.include_in_response,
                nanoid,
            }) as Arc<dyn Plugin>
        })
    }
}

struct RequestId {
    header: String,
    respond: bool,
    nanoid: bool,
}

/// A random version 4 UUID.
fn uuid() -> String {
    let r = fastrand::u128(..);
    let r = (r & !(0xf000 << 64) | (0x4000 << 64)) & !(0xc000 << 48) | (0x8000 << 48);
    let h = format!("{r:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn nanoid() -> String {
    const ALPHABET: &[u8] = b"_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    (0..21)
        .map(|_| ALPHABET[fastrand::usize(..64)] as char)
        .collect()
}

impl Plugin for RequestId {
    fn phases(&self) -> Phases {
        Phases::REWRITE.with(Phases::HEADER_FILTER)
    }

    fn rewrite(&self, req: &mut RequestHead, _cx: &mut Ctx<'_>) -> Flow {
        if req.header(&self.header).is_none() {
            let id = if self.nanoid { nanoid() } else { uuid() };
            req.set_header(&self.header, id.as_bytes());
        }
        Flow::Continue
    }

    fn header_filter(&self, req: &RequestHead, resp: ResponseView<'_>, cx: &mut Ctx<'_>) {
        if self.respond
            && resp.header(&self.header).is_none()
            && let Some(id) = req.header(&self.header)
        {
            cx.response.add_header(&self.header, id);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::tests::*;
    use sluice_core::plugin::ResponseView;

    #[test]
    fn an_id_is_generated_passed_upstream_and_returned() {
        let b = build("request-id", "{}", &[]);
        let mut req = head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut cx = ctx(&b.consumers, CLIENT);
        assert!(run(&*b.plugin, &mut req, &mut cx).is_none());
        let id = String::from_utf8(req.header("x-request-id").unwrap().to_vec()).unwrap();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4", "version 4: {id}");
        assert!(
            matches!(&id[19..20], "8" | "9" | "a" | "b"),
            "variant: {id}"
        );
        let resp = sluice_core::Response::new(200);
        b.plugin
            .header_filter(&req, ResponseView::Own(&resp), &mut cx);
        assert_eq!(
            String::from_utf8_lossy(cx.response.added_bytes()),
            format!("X-Request-Id: {id}\r\n")
        );
    }

    #[test]
    fn a_client_id_is_kept_and_ids_are_unique() {
        let b = build(
            "request-id",
            "{header_name: X-Trace, algorithm: nanoid}",
            &[],
        );
        let mut cx = ctx(&b.consumers, CLIENT);
        let mut req = head("GET / HTTP/1.1\r\nHost: a\r\nX-Trace: mine\r\n\r\n");
        run(&*b.plugin, &mut req, &mut cx);
        assert_eq!(req.header("x-trace"), Some(&b"mine"[..]));
        let ids: std::collections::HashSet<Vec<u8>> = (0..1000)
            .map(|_| {
                let mut r = head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
                run(&*b.plugin, &mut r, &mut cx);
                r.header("x-trace").unwrap().to_vec()
            })
            .collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|i| i.len() == 21));
    }
}
