//! What `sluice --version` and `sluice_build_info` say of this build: the commit it was built
//! from (with its date) and the build's date. Outside a git checkout (a source tarball) the
//! commit is `unknown`. `SOURCE_DATE_EPOCH` (reproducible builds) sets the build date.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

#[path = "src/civil.rs"]
mod civil;

/// `YYYY-MM-DD` of a Unix time (UTC).
fn date(secs: u64) -> String {
    let (year, month, day) = civil::civil((secs / 86_400) as i64);
    format!("{year:04}-{month:02}-{day:02}")
}

fn main() {
    let commit = git(&["rev-parse", "--short=10", "HEAD"]);
    let commit_date = git(&["log", "-1", "--format=%cs"]);
    let built = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    println!(
        "cargo:rustc-env=SLUICE_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    println!(
        "cargo:rustc-env=SLUICE_COMMIT_DATE={}",
        commit_date.as_deref().unwrap_or("unknown")
    );
    println!("cargo:rustc-env=SLUICE_BUILD_DATE={}", date(built));
    // Again when HEAD moves (a commit, a checkout), not on every build. Only files that exist
    // are named (cargo runs this again on every build for one that does not).
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && std::path::Path::new(&path).exists()
        {
            let path = std::fs::canonicalize(&path).unwrap_or_else(|_| path.into());
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
}
