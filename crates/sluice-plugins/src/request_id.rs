//! `request-id`: gives each request an id in `X-Request-Id` (kept when the client sent one),
//! passed upstream and, by default, returned to the client.
//!
//! `{header_name: X-Request-Id, include_in_response: true, algorithm: uuid, range_id}`;
//! `algorithm` is APISIX's: `uuid` (random version 4), `uuidv7` (time-ordered), `nanoid` (21
//! URL-safe characters), `ksuid` (27 base-62 characters, time-ordered) or `range_id`
//! (`range_id: {length: 16, char_set}`: `length` characters drawn from `char_set`; length at
//! least 6 and at most 1,024, char_set at least 6 characters, ASCII).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::http::RequestHead;
use sluice_core::plugin::{BuildCx, Phases, PluginFactory, ResponseView, parse_config};
use sluice_core::{Ctx, Flow, Plugin};

use crate::util::check_header_name;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct Config {
    header_name: String,
    include_in_response: bool,
    algorithm: String,
    range_id: RangeId,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct RangeId {
    length: crate::util::Num,
    char_set: String,
}

impl Default for RangeId {
    fn default() -> Self {
        // APISIX's default set (its "IGK" typo included: the same ids come out).
        RangeId {
            length: crate::util::Num::Whole(16),
            char_set: "abcdefghijklmnopqrstuvwxyzABCDEFGHIGKLMNOPQRSTUVWXYZ0123456789".into(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            header_name: "X-Request-Id".into(),
            include_in_response: true,
            algorithm: "uuid".into(),
            range_id: RangeId::default(),
        }
    }
}

/// Longest `range_id.length`: ids go in a header on every request.
const MAX_RANGE_LENGTH: u64 = 1024;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Algorithm {
    Uuid,
    UuidV7,
    Nanoid,
    Ksuid,
    Range,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("request-id", 12015, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let ok = v.field("header_name", |v| check_header_name(&c.header_name, v));
        let algorithm = match c.algorithm.as_str() {
            "uuid" => Algorithm::Uuid,
            "uuidv7" => Algorithm::UuidV7,
            "nanoid" => Algorithm::Nanoid,
            "ksuid" => Algorithm::Ksuid,
            "range_id" => Algorithm::Range,
            other => {
                v.error_at(
                    "algorithm",
                    format!(
                        "unknown algorithm \"{other}\", expected uuid, uuidv7, nanoid, ksuid or range_id"
                    ),
                );
                return None;
            }
        };
        let range = v.field("range_id", |v| {
            let length = v.field("length", |v| {
                crate::util::whole(c.range_id.length, 6, MAX_RANGE_LENGTH, "", v)
            });
            let set = &c.range_id.char_set;
            let chars = v.field("char_set", |v| {
                if !set.is_ascii() || set.len() < 6 {
                    v.error("must be at least 6 ASCII characters");
                    return None;
                }
                if set.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
                    v.error(
                        "must be visible characters (no spaces or controls: ids go in a header)",
                    );
                    return None;
                }
                Some(set.as_bytes().to_vec())
            });
            Some((length? as usize, chars?))
        });
        let (ok, Some((length, chars))) = (ok, range) else {
            return None;
        };
        ok.then(|| {
            Arc::new(RequestId {
                header: c.header_name,
                respond: c.include_in_response,
                algorithm,
                range_length: length,
                range_chars: chars,
            }) as Arc<dyn Plugin>
        })
    }
}

struct RequestId {
    header: String,
    respond: bool,
    algorithm: Algorithm,
    range_length: usize,
    range_chars: Vec<u8>,
}

impl RequestId {
    fn generate(&self) -> String {
        match self.algorithm {
            Algorithm::Uuid => uuid(),
            Algorithm::UuidV7 => uuid_v7(unix_millis()),
            Algorithm::Nanoid => nanoid(),
            Algorithm::Ksuid => ksuid(unix_millis() / 1000, fastrand::u128(..)),
            Algorithm::Range => (0..self.range_length)
                .map(|_| self.range_chars[fastrand::usize(..self.range_chars.len())] as char)
                .collect(),
        }
    }
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Formats 128 bits as a UUID (8-4-4-4-12 hex digits).
fn uuid_text(r: u128) -> String {
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

/// A version 7 UUID (RFC 9562): 48 bits of Unix milliseconds, then random bits.
fn uuid_v7(millis: u64) -> String {
    let r = fastrand::u128(..);
    let r = (u128::from(millis & 0xffff_ffff_ffff) << 80)
        | (0x7 << 76)
        | (r & (0xfff << 64))
        | (0b10 << 62)
        | (r & ((1 << 62) - 1));
    uuid_text(r)
}

/// A KSUID (segmentio/ksuid, what lua-resty-ksuid makes): 4 bytes of seconds since
/// 2014-05-13 16:53:20 UTC and 16 random bytes, as 27 base-62 digits (0-9, A-Z, a-z).
fn ksuid(unix_secs: u64, random: u128) -> String {
    const EPOCH: u64 = 1_400_000_000;
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut n = [0u8; 20];
    n[..4].copy_from_slice(&(unix_secs.saturating_sub(EPOCH) as u32).to_be_bytes());
    n[4..].copy_from_slice(&random.to_be_bytes());
    let mut out = [b'0'; 27];
    // Long division by 62, most significant digit last.
    for slot in out.iter_mut().rev() {
        let mut rem = 0u32;
        for b in n.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 62) as u8;
            rem = cur % 62;
        }
        *slot = DIGITS[rem as usize];
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A random version 4 UUID.
fn uuid() -> String {
    let r = fastrand::u128(..);
    let r = (r & !(0xf000 << 64) | (0x4000 << 64)) & !(0xc000 << 48) | (0x8000 << 48);
    uuid_text(r)
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
            let id = self.generate();
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

    #[test]
    fn ksuids_are_segmentio_s_encoding() {
        // segmentio/ksuid's README: the smallest and largest KSUIDs, and a known one
        // (0ujtsYcgvSTl8PAuAdqWYSMnLOv: timestamp 107608047, payload B5A1CD34B5F99D1154FB6853345C9735).
        assert_eq!(
            super::ksuid(1_400_000_000, 0),
            "000000000000000000000000000"
        );
        assert_eq!(
            super::ksuid(1_400_000_000 + u64::from(u32::MAX), u128::MAX),
            "aWgEPTl1tmebfsQzFP4bxwgy80V"
        );
        assert_eq!(
            super::ksuid(
                1_400_000_000 + 107_608_047,
                0xB5A1CD34B5F99D1154FB6853345C9735
            ),
            "0ujtsYcgvSTl8PAuAdqWYSMnLOv"
        );
    }

    #[test]
    fn every_apisix_algorithm_makes_ids_of_its_shape() {
        let shape = |conf: &str| {
            let b = build("request-id", conf, &[]);
            let mut cx = ctx(&b.consumers, CLIENT);
            let mut r = head("GET / HTTP/1.1\r\nHost: a\r\n\r\n");
            run(&*b.plugin, &mut r, &mut cx);
            String::from_utf8(r.header("x-request-id").unwrap().to_vec()).unwrap()
        };
        let k = shape("{algorithm: ksuid}");
        assert_eq!(k.len(), 27, "{k}");
        assert!(k.bytes().all(|c| c.is_ascii_alphanumeric()), "{k}");
        let u = shape("{algorithm: uuidv7}");
        assert_eq!((u.len(), &u[14..15]), (36, "7"), "{u}");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "variant: {u}");
        let ms = u64::from_str_radix(&u.replace('-', "")[..12], 16).unwrap();
        assert!(ms.abs_diff(super::unix_millis()) < 60_000, "{u}");
        let r = shape("{algorithm: range_id}");
        assert_eq!(r.len(), 16, "{r}");
        let r = shape("{algorithm: range_id, range_id: {length: 8, char_set: abcdef}}");
        assert_eq!(r.len(), 8);
        assert!(r.bytes().all(|c| (b'a'..=b'f').contains(&c)), "{r}");
    }

    #[test]
    fn range_id_bounds_are_checked_at_load() {
        for (conf, want) in [
            (
                "{algorithm: range_id, range_id: {length: 5}}",
                "range_id.length",
            ),
            (
                "{algorithm: range_id, range_id: {length: 100000}}",
                "range_id.length",
            ),
            (
                "{algorithm: range_id, range_id: {char_set: abc}}",
                "range_id.char_set",
            ),
            (
                "{algorithm: range_id, range_id: {char_set: \"ab cdef\"}}",
                "range_id.char_set",
            ),
            ("{algorithm: snowflake}", "algorithm"),
        ] {
            let e = check("request-id", conf, sluice_config::PluginScope::Route).join("\n");
            assert!(e.contains(want), "{conf}: {e}");
        }
    }
}
