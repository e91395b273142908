//! Configuration text (YAML, or JSON, which YAML reads too) → a generic value, with the checks
//! a generic parser skips: a key written twice in one mapping is an error with its path (YAML
//! parsers keep the last one silently, so `uri:` written twice would route on the second), and
//! a whole number too large for 64 bits is kept as a number (the field's own check then says
//! what it accepts) instead of failing the whole document with a parser message.

use sluice_core::check::{PathSeg, render};
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::{ConfigError, ConfigErrors};

/// Parses configuration text into a generic value. An empty text is an empty document (null).
/// Every duplicate key is reported, each with its path.
pub fn parse_text(text: &str) -> Result<Value, ConfigErrors> {
    let (value, dups) = parse_text_all(text)?;
    if dups.is_empty() {
        Ok(value)
    } else {
        Err(ConfigErrors(dups))
    }
}

/// Like [`parse_text`], but a key written twice does not stop the parse: the value (with the
/// first value of each repeated key) comes with those errors, so that the next
/// stages can still report theirs. Err: the text is not YAML.
pub fn parse_text_all(text: &str) -> Result<(Value, Vec<ConfigError>), ConfigErrors> {
    let mut dups = Vec::new();
    let mut path = Vec::new();
    let seed = Seed {
        path: &mut path,
        dups: &mut dups,
    };
    let value = seed
        .deserialize(yaml_serde::Deserializer::from_str(text))
        .map_err(|e| ConfigError::new("", format!("invalid YAML: {e}")))?;
    Ok((value, dups))
}

/// Parses a JSON text (an admin API body) with the same checks as [`parse_text`].
pub fn parse_json(text: &[u8]) -> Result<Value, ConfigErrors> {
    let mut dups = Vec::new();
    let mut path = Vec::new();
    let seed = Seed {
        path: &mut path,
        dups: &mut dups,
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    let value = seed
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| ConfigError::new("", format!("invalid JSON: {e}")))?;
    if dups.is_empty() {
        Ok(value)
    } else {
        Err(ConfigErrors(dups))
    }
}

/// Builds the value; the path to it is kept as a stack and written out only for an error, so
/// a well-formed document costs no more than a plain parse (the control plane reads files of
/// 100,000 routes with it).
struct Seed<'a> {
    path: &'a mut Vec<PathSeg>,
    dups: &'a mut Vec<ConfigError>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(i64::try_from(v)
            .map(Value::from)
            .unwrap_or_else(|_| float(v as f64)))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        Ok(u64::try_from(v)
            .map(Value::from)
            .unwrap_or_else(|_| float(v as f64)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            self.path.push(PathSeg::Index(out.len()));
            let seed = Seed {
                path: &mut *self.path,
                dups: &mut *self.dups,
            };
            let next = seq.next_element_seed(seed);
            self.path.pop();
            match next? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<KeyText>()? {
            self.path.push(PathSeg::Key(key.0));
            let value = map.next_value_seed(Seed {
                path: &mut *self.path,
                dups: &mut *self.dups,
            });
            // The key pushed above.
            let key = match self.path.pop() {
                Some(PathSeg::Key(key)) => key,
                _ => String::new(),
            };
            let value = value?;
            match out.entry(key) {
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(value);
                }
                serde_json::map::Entry::Occupied(slot) => {
                    self.path.push(PathSeg::Key(slot.key().clone()));
                    self.dups.push(ConfigError::new(
                        render(self.path),
                        "is written twice in the same mapping (remove one: which one applies is not obvious)",
                    ));
                    self.path.pop();
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// A float as a JSON number; NaN and infinities (YAML's `.nan`, `.inf`) cannot be JSON numbers
/// and are kept as text, which every numeric field then refuses.
fn float(v: f64) -> Value {
    Number::from_f64(v)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(v.to_string()))
}

/// A mapping key, as written: YAML allows numbers and booleans as keys (`1980: 1`, `1.50: x`);
/// they are taken as the text written (as a plain parse into JSON values did), not re-printed.
struct KeyText(String);

impl<'de> de::Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key: text or a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<KeyText, E> {
                Ok(KeyText(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".into()))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_errors_with_their_path() {
        let e = parse_text(
            "routes:\n  - uri: /a\n    uri: /b\n    upstream:\n      nodes:\n        \"127.0.0.1:80\": 1\n        \"127.0.0.1:80\": 2\n",
        )
        .unwrap_err();
        let lines: Vec<String> = e.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            vec![
                "routes[0].uri: is written twice in the same mapping (remove one: which one applies is not obvious)",
                "routes[0].upstream.nodes[\"127.0.0.1:80\"]: is written twice in the same mapping (remove one: which one applies is not obvious)",
            ]
        );
        let e = parse_json(br#"{"uri": "/a", "uri": "/b"}"#).unwrap_err();
        assert_eq!(e.0[0].path, "uri");
    }

    #[test]
    fn numbers_past_64_bits_stay_numbers() {
        let v = parse_text("priority: 99999999999999999999\nneg: -99999999999999999999\n")
            .expect("parses");
        assert!(v["priority"].as_f64().is_some_and(|f| f > 9e19));
        assert!(v["neg"].as_f64().is_some_and(|f| f < -9e19));
        assert_eq!(parse_text("").expect("empty"), Value::Null);
        assert_eq!(parse_text("1980: 1").expect("num key")["1980"], 1);
        let keys = parse_text("1.50: a\n0x10: b\n~: c\n").expect("keys as written");
        let keys: Vec<&String> = keys.as_object().expect("a mapping").keys().collect();
        assert_eq!(keys, ["1.50", "0x10", "~"]);
    }
}
