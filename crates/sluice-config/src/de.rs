//! Value types with friendly YAML forms: durations (`10`, `"1.5s"`, `"500ms"`), sizes (`8192`,
//! `"8k"`, `"1MiB"`), ids (string or integer), worker counts and node addresses.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

// === impl Dur ===

/// A duration: a number of seconds (`10`, `0.5`) or a string with a unit (`"500ms"`, `"10s"`,
/// `"2m"`, `"1h"`), as APISIX writes timeouts in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dur(pub Duration);

impl Dur {
    /// `secs` whole seconds.
    pub const fn secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }

    /// `ms` milliseconds.
    pub const fn millis(ms: u64) -> Self {
        Self(Duration::from_millis(ms))
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

fn seconds_to_dur<E: de::Error>(secs: f64) -> Result<Dur, E> {
    if !secs.is_finite() || !(0.0..=31_536_000.0).contains(&secs) {
        return Err(E::custom(format!(
            "must be a duration from 0 to 31536000 seconds (one year), got {}",
            crate::parse::short_number(&secs.to_string())
        )));
    }
    Ok(Dur(Duration::from_secs_f64(secs)))
}

/// Parses `"500ms"`, `"10s"`, `"1.5s"`, `"2m"`, `"1h"` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Dur, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration \"{s}\": expected a number with ms, s, m or h"))?;
    let secs = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration \"{s}\": expected a number with ms, s, m or h"
            ));
        }
    };
    seconds_to_dur::<de::value::Error>(secs).map_err(|e| e.to_string())
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration: seconds as a number, or a string like \"500ms\" or \"10s\"",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                seconds_to_dur(v as f64)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                seconds_to_dur(v as f64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                seconds_to_dur(v)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

// === impl Size ===

/// A size in bytes: a number, or a string with a binary unit (`"8k"`, `"8KiB"`, `"1m"`, `"1MiB"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
            write!(f, "{}MiB", b >> 20)
        } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
            write!(f, "{}KiB", b >> 10)
        } else {
            write!(f, "{b} bytes")
        }
    }
}

/// Parses `"512"`, `"8k"`, `"8KiB"`, `"1m"`, `"1MiB"`, `"1g"`.
pub fn parse_size(s: &str) -> Result<Size, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let err = || format!("invalid size \"{s}\": expected bytes, or a number with k, m or g");
    let n: u64 = num.parse().map_err(|_| err())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(err()),
    };
    n.checked_mul(1 << shift).map(Size).ok_or_else(err)
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: bytes as a number, or a string like \"8k\" or \"1MiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("invalid size {v}: must be >= 0")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

// === impl Id ===

/// A resource id, written as a string or an integer (`id: 1` in the APISIX benchmark configs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id(pub String);

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an id: a string or an integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                Ok(Id(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Checks a resource id against APISIX's rule, for the file and the admin API alike: 1 to 64
/// letters, digits, `-`, `_` and `.` (ids appear in URLs, etcd keys and log lines).
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("must not be empty".into());
    }
    let ok = id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid id \"{}\": use 1 to 64 letters, digits, \"-\", \"_\" and \".\"",
            id.escape_debug()
        ))
    }
}

/// Checks a consumer's username against APISIX's rule: 1 to 256 letters, digits, `-` and `_`.
pub fn check_username(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is required".into());
    }
    let ok = name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid username \"{}\": use 1 to 256 letters, digits, \"-\" and \"_\"",
            name.escape_debug()
        ))
    }
}

// === impl Workers ===

/// How many worker threads serve traffic: `auto` (one per core) or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Workers {
    /// One worker per available core.
    #[default]
    Auto,
    /// Exactly this many workers.
    Count(usize),
}

impl Workers {
    /// The number of workers to start on this machine.
    pub fn resolve(self) -> usize {
        match self {
            Workers::Count(n) => n,
            Workers::Auto => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        }
    }
}

impl<'de> Deserialize<'de> for Workers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const MSG: &str = "must be \"auto\" or a number from 1 to 1024";
        impl Visitor<'_> for V {
            type Value = Workers;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(MSG)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Workers, E> {
                if (1..=1024).contains(&v) {
                    Ok(Workers::Count(v as usize))
                } else {
                    Err(E::custom(MSG))
                }
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Workers, E> {
                Err(E::custom(MSG))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Workers, E> {
                Err(E::custom(MSG))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Workers, E> {
                match v {
                    "auto" => Ok(Workers::Auto),
                    s => match s.parse::<u64>() {
                        Ok(n) => self.visit_u64(n),
                        Err(_) => Err(E::custom(MSG)),
                    },
                }
            }
        }
        d.deserialize_any(V)
    }
}

// === impl OneOrMany ===

/// A value written either alone or as a list (`listen: 127.0.0.1:9080` or `listen: [..]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl<T> Default for OneOrMany<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a value or a list of values")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(OneOrMany(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|v| OneOrMany(vec![v]))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                T::deserialize(de::value::StrDeserializer::<E>::new(v)).map(|v| OneOrMany(vec![v]))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                T::deserialize(de::value::U64Deserializer::<E>::new(v)).map(|v| OneOrMany(vec![v]))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

// === JSON schemas (for the admin API's OpenAPI document) ===

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

impl JsonSchema for Dur {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Seconds as a number, or a string with a unit: \"500ms\", \"10s\", \"2m\", \"1h\".",
            "oneOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": "^[0-9.]+(ms|s|m|h)?$"}]
        })
    }
}

impl JsonSchema for Size {
    fn schema_name() -> Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Bytes as a number, or a string with a binary unit: \"8k\", \"1MiB\".",
            "oneOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]
        })
    }
}

impl JsonSchema for Id {
    fn schema_name() -> Cow<'static, str> {
        "Id".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"description": "An id: a string or an integer.", "oneOf": [{"type": "string"}, {"type": "integer"}]})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_numbers_and_units() {
        assert_eq!(parse_duration("500ms"), Ok(Dur::millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Dur::secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Dur::millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Dur::secs(120)));
        assert_eq!(parse_duration("3"), Ok(Dur::secs(3)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn sizes_accept_binary_units() {
        assert_eq!(parse_size("8k"), Ok(Size(8192)));
        assert_eq!(parse_size("8KiB"), Ok(Size(8192)));
        assert_eq!(parse_size("1m"), Ok(Size(1 << 20)));
        assert_eq!(parse_size("512"), Ok(Size(512)));
        assert!(parse_size("1t").is_err());
        assert!(parse_size("-1").is_err());
    }
}
