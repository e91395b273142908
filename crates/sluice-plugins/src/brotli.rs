//! `brotli`: compresses responses with Brotli for clients that accept it, as APISIX's
//! `brotli`: `{types: ["text/html"], min_length: 20, mode: 0, comp_level: 6, lgwin: 19,
//! lgblock: 0, http_version: 1.1, vary}`. When a response is compressed, and how, is
//! `compress.rs`'s; with `gzip` on the same route, a client that accepts both gets Brotli
//! (its priority is higher). The `brotli` crate (Dropbox's port of Google's encoder).

use std::io::Write as _;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use sluice_config::Validator;
use sluice_core::Plugin;
use sluice_core::plugin::{BuildCx, PluginFactory, parse_config};

use crate::compress::{Codec, Compressor, Encoder, When};
use crate::util::{Num, whole, whole_field};

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    types: Option<Value>,
    #[serde(default)]
    min_length: Option<Num>,
    #[serde(default)]
    mode: Option<Num>,
    #[serde(default)]
    comp_level: Option<Num>,
    #[serde(default)]
    lgwin: Option<Num>,
    #[serde(default)]
    lgblock: Option<Num>,
    #[serde(default)]
    http_version: Option<Value>,
    #[serde(default)]
    vary: Option<bool>,
}

pub(crate) struct Factory;

impl PluginFactory for Factory {
    crate::util::describe!("brotli", 996, Config);

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
        let mode = whole_field("mode", c.mode, 0, (0, 2), "", v);
        let quality = whole_field("comp_level", c.comp_level, 6, (0, 11), "", v);
        // APISIX's lists: 0 (the encoder's choice), or 10 to 24 (16 to 24 for lgblock).
        let pick = |field: &str, n: Option<Num>, default: u64, lo: u64, v: &mut Validator| {
            let n = n.unwrap_or(Num::Whole(i128::from(default)));
            v.field(field, |v| {
                if n.whole() == Some(0) {
                    return Some(0);
                }
                let got = whole(n, lo, 24, "", v)?;
                Some(got)
            })
        };
        let lgwin = pick("lgwin", c.lgwin, 19, 10, v);
        let lgblock = pick("lgblock", c.lgblock, 0, 16, v);
        let mode = match mode? {
            1 => brotli::enc::backward_references::BrotliEncoderMode::BROTLI_MODE_TEXT,
            2 => brotli::enc::backward_references::BrotliEncoderMode::BROTLI_MODE_FONT,
            _ => brotli::enc::backward_references::BrotliEncoderMode::BROTLI_MODE_GENERIC,
        };
        let params = brotli::enc::BrotliEncoderParams {
            quality: quality? as i32,
            // 0 is the smallest window, as Brotli's C encoder reads it.
            lgwin: (lgwin?.max(10)) as i32,
            lgblock: lgblock? as i32,
            mode,
            ..Default::default()
        };
        Some(Arc::new(Compressor {
            when: when?,
            codec: Brotli(params),
        }))
    }
}

struct Brotli(brotli::enc::BrotliEncoderParams);

impl Codec for Brotli {
    const NAME: &'static str = "br";

    fn encoder(&self) -> Box<dyn Encoder> {
        Box::new(BrotliEncoder(Some(brotli::CompressorWriter::with_params(
            Vec::new(),
            4096,
            &self.0,
        ))))
    }
}

struct BrotliEncoder(Option<brotli::CompressorWriter<Vec<u8>>>);

impl Encoder for BrotliEncoder {
    fn encode(&mut self, input: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
        let Some(w) = self.0.as_mut() else {
            return Ok(());
        };
        w.write_all(input)?;
        w.flush()?;
        out.append(w.get_mut());
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        if let Some(w) = self.0.take() {
            out.extend_from_slice(&w.into_inner());
        }
        Ok(())
    }
}
