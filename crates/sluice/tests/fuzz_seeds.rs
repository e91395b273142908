//! The fuzz targets' checks (fuzz/src, one module per target) on stable Rust, as part of the
//! README's test command: every seed in `fuzz/corpus/<target>/` (found crashes are kept there,
//! so each is a regression test), then a short mutation run per target: seeds changed at
//! random (bytes flipped, inserted, removed, repeated, spliced with another seed, HTTP tokens
//! dropped in). Not coverage-guided, so no replacement for `fuzz/run.sh` under libFuzzer; it
//! catches a change that breaks a property on inputs near the seeds, in seconds, on every run.
//! `SLUICE_FUZZ_MS` sets the time per target (default 1500), `SLUICE_FUZZ_SEED` the seed of
//! the random mutations (default fixed, so a run repeats). A failing input is written to
//! `fuzz/artifacts/<target>/` and named in the failure.

#![allow(clippy::unwrap_used)]

#[path = "../../../fuzz/src/lib.rs"]
#[allow(dead_code, unreachable_pub)]
mod sluice_fuzz;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.display().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Runs `check` on `input`; on a panic, keeps the input and says where.
fn run(target: &str, check: fn(&[u8]), input: &[u8], what: &str) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(|| check(input))) {
        Ok(()) => Ok(()),
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            let dir = fuzz_dir().join("artifacts").join(target);
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join(format!("seedtest-{:016x}", fnv(input)));
            let _ = std::fs::write(&file, input);
            Err(format!(
                "{target}: {what} failed: {msg}\n  input kept in {} ({} bytes): {:?}",
                file.display(),
                input.len(),
                String::from_utf8_lossy(&input[..input.len().min(200)])
            ))
        }
    }
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3)
    })
}

/// xorshift64*: enough randomness for mutations, repeatable from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Tokens that matter to the parsers under test, dropped in whole.
const TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\n",
    b"\r",
    b"\0",
    b" ",
    b"\t",
    b":",
    b"%",
    b"%2",
    b"/",
    b"/..",
    b"*",
    b"?",
    b"chunked",
    b"Transfer-Encoding: chunked\r\n",
    b"Content-Length: 0\r\n",
    b"0\r\n\r\n",
    b"\xff",
    b"\"",
    b"$",
    b"{",
    b"}",
    b"[",
    b"]",
    b"-1",
    b"18446744073709551616",
    b"1e400",
    b"HTTP/1.1",
    b"\xc4\xb1",
];

fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => v.insert(at, rng.next() as u8),
            2 if at < v.len() => {
                let end = (at + 1 + rng.below(8)).min(v.len());
                v.drain(at..end);
            }
            3 if at < v.len() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                let piece = v[at..end].to_vec();
                v.splice(at..at, piece);
            }
            4 if !other.is_empty() => {
                let from = rng.below(other.len());
                let end = (from + 1 + rng.below(32)).min(other.len());
                v.splice(at..at, other[from..end].iter().copied());
            }
            5 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                v.splice(at..at, t.iter().copied());
            }
            _ if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = [0u8, 0x7f, 0x80, 0xff, b'0', b'9', b'a'][rng.below(7)];
            }
            _ => {}
        }
    }
    v
}

#[test]
fn every_target_has_seeds_and_passes_them() {
    let targets: Vec<&str> = sluice_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    // Each target of fuzz/Cargo.toml is here, and the other way round.
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
    let bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "sluice-fuzz" && *n != "sluice_fuzz")
        .collect();
    let mut sorted = bins.clone();
    sorted.sort();
    assert_eq!(
        sorted, targets,
        "fuzz/Cargo.toml's targets and TARGETS differ"
    );
    assert!(targets.len() >= 15, "{} targets", targets.len());
    let mut failures = Vec::new();
    for (name, check) in sluice_fuzz::TARGETS {
        let seeds = seeds(name);
        assert!(!seeds.is_empty(), "{name} has no seeds");
        for (file, data) in &seeds {
            if let Err(e) = run(name, *check, data, file) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn mutations_of_the_seeds_keep_every_property() {
    let ms: u64 = std::env::var("SLUICE_FUZZ_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let seed: u64 = std::env::var("SLUICE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_2701);
    // The checks' panics are expected to be caught here: keep their messages quiet.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for (name, check) in sluice_fuzz::TARGETS {
        let seeds = seeds(name);
        let mut rng = Rng(seed ^ fnv(name.as_bytes()) | 1);
        let until = Instant::now() + Duration::from_millis(ms);
        let mut runs = 0u64;
        while Instant::now() < until {
            let a = &seeds[rng.below(seeds.len())].1;
            let b = &seeds[rng.below(seeds.len())].1;
            let input = mutate(&mut rng, a, b);
            runs += 1;
            if let Err(e) = run(name, *check, &input, "a mutation") {
                failures.push(e);
                break;
            }
        }
        report.push(format!("{name} {runs}"));
    }
    std::panic::set_hook(hook);
    eprintln!("mutation runs per target: {}", report.join(", "));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
