//! `gzip`: compresses responses with gzip for clients that accept it, as APISIX's `gzip`
//! (NGINX's gzip filter): `{types: ["text/html"], min_length: 20, comp_level: 1,
//! http_version: 1.1, buffers: {number: 32, size: 4096}, vary}`. When a response is
//! compressed, and how, is `compress.rs`'s. zlib's algorithm, from `flate2` over `zlib-rs`.
//! `buffers` is accepted as APISIX has it (NGINX's output buffers; the encoder here writes
//! each chunk's output at once).

use std::io::Write as _;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::Plugin;
use sluice_core::plugin::{BuildCx, PluginFactory, parse_config};

use crate::compress::{Codec, Compressor, Encoder, When};
use crate::util::{Num, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    types: Option<Value>,
    #[serde(default)]
    min_length: Option<Num>,
    #[serde(default)]
    comp_level: Option<Num>,
    #[serde(default)]
    http_version: Option<Value>,
    #[serde(default)]
    buffers: Option<Buffers>,
    #[serde(default)]
    vary: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Buffers {
    #[serde(default)]
    number: Option<Num>,
    #[serde(default)]
    size: Option<Num>,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("gzip", 995, Config);

    fn build(
        &self,
        config: &Value,
        _cx: &mut BuildCx<'_>,
        v: &mut Validator,
    ) -> Option<Arc<dyn Plugin>> {
        let c: Config = parse_config(config, v)?;
        let when = When::parse(
            c.types.as_ref(),
            c.min_length,
            c.http_version.as_ref(),
            c.vary,
            v,
        );
        let level = whole_field("comp_level", c.comp_level, 1, (1, 9), "", v);
        if let Some(b) = &c.buffers {
            v.field("buffers", |v| {
                whole_field("number", b.number, 32, (1, 1 << 20), "", v);
                whole_field("size", b.size, 4096, (1, 1 << 30), " bytes", v);
            });
        }
        Some(Arc::new(Compressor {
            when: when?,
            codec: Gzip(flate2::Compression::new(level? as u32)),
        }))
    }
}

struct Gzip(flate2::Compression);

impl Codec for Gzip {
    const NAME: &'static str = "gzip";

    fn encoder(&self) -> Box<dyn Encoder> {
        Box::new(GzipEncoder(flate2::write::GzEncoder::new(Vec::new(), self.0)))
    }
}

struct GzipEncoder(flate2::write::GzEncoder<Vec<u8>>);

impl Encoder for GzipEncoder {
    fn encode(&mut self, input: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        self.0.write_all(input)?;
        // A sync flush: what was compressed so far goes out with this chunk.
        self.0.flush()?;
        out.append(self.0.get_mut());
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        self.0.try_finish()?;
        out.append(self.0.get_mut());
        Ok(())
    }
}
