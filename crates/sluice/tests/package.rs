//! The Debian package (`packaging/deb/build.sh`), built from this test's binary, installed on
//! this machine with `dpkg -i`, run as its service user with the configuration it ships,
//! rotated with logrotate, removed and purged. It changes the machine (a user, files under
//! /usr, /etc and /var), so it needs root or `sudo -n`, and refuses to run where a `sluice`
//! package is installed already.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// `program` as root: itself when the test is root, else through `sudo -n`.
fn as_root(program: &str) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.arg("-n").arg(program);
        c
    }
}

/// The test changes the machine: it needs root, or `sudo -n`.
fn require_root(what: &str) {
    assert!(
        is_root()
            || Command::new("sudo")
                .args(["-n", "true"])
                .status()
                .is_ok_and(|s| s.success()),
        "this test {what}: run it as root, or where `sudo -n` works"
    );
}

fn run(mut c: Command) -> Output {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(c: Command) -> String {
    String::from_utf8(run(c).stdout).unwrap()
}

fn root_cmd(program: &str, args: &[&str]) -> Command {
    let mut c = as_root(program);
    c.args(args);
    c
}

/// Purges the package when the test ends, passed or not: the machine is left as it was.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = root_cmd("dpkg", &["--purge", "sluice"]).output();
    }
}

/// Stops the service's process when the test ends.
struct Service(Child);

impl Drop for Service {
    fn drop(&mut self) {
        let _ = root_cmd("kill", &["-TERM", &self.0.id().to_string()]).output();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = root_cmd("kill", &["-KILL", &self.0.id().to_string()]).output();
        let _ = self.0.wait();
    }
}

fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A file's text, read as root (the package's directories are not world-readable).
fn read_root(path: &str) -> String {
    stdout(root_cmd("cat", &[path]))
}

/// Waits until `path` (read as root) contains `needle`.
fn wait_for_text(path: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = root_cmd("cat", &[path])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never had {needle:?}; it has:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn build_package(out: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/deb/build.sh");
    let mut c = Command::new(script);
    c.args(["--fast", "--binary", BIN, "--out"]).arg(out);
    let deb = stdout(c).trim().to_owned();
    assert!(deb.ends_with(".deb"), "build.sh printed {deb:?}");
    PathBuf::from(deb)
}

#[test]
fn the_debian_package_installs_runs_rotates_its_log_and_purges_cleanly() {
    require_root("installs a Debian package");
    let status = Command::new("dpkg")
        .args(["-s", "sluice"])
        .output()
        .unwrap();
    assert!(
        !status.status.success(),
        "a sluice package is installed on this machine; this test installs and purges its own: remove it first (dpkg --purge sluice)"
    );

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("deb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let deb = build_package(&dir);

    // What it declares and holds, before anything is installed.
    let mut info = Command::new("dpkg-deb");
    info.arg("-I").arg(&deb);
    let info = stdout(info);
    for field in [
        "Package: sluice",
        "Version: 0.1.0",
        "Depends: libc6 (>= 2.",
        "adduser",
        "Recommends: logrotate",
    ] {
        assert!(
            info.contains(field),
            "no {field:?} in the control file:\n{info}"
        );
    }
    let mut list = Command::new("dpkg-deb");
    list.arg("-c").arg(&deb);
    let list = stdout(list);
    for path in [
        "./usr/bin/sluice",
        "./etc/sluice/sluice.yaml",
        "./lib/systemd/system/sluice.service",
        "./etc/logrotate.d/sluice",
        "./usr/share/man/man1/sluice.1.gz",
        "./usr/share/man/man1/sluice-run.1.gz",
        "./usr/share/man/man1/sluice-validate.1.gz",
        "./usr/share/bash-completion/completions/sluice",
        "./usr/share/zsh/vendor-completions/_sluice",
        "./usr/share/fish/vendor_completions.d/sluice.fish",
        "./usr/share/doc/sluice/copyright",
        "./usr/share/doc/sluice/config.md",
    ] {
        assert!(list.contains(path), "the package has no {path}:\n{list}");
    }
    assert!(
        list.lines().all(|l| l.contains("root/root")),
        "every file belongs to root in the archive:\n{list}"
    );

    run(root_cmd("dpkg", &["-i", deb.to_str().unwrap()]));
    let _installed = Installed;

    // The service's user: a system account without a login.
    let passwd = stdout({
        let mut c = Command::new("getent");
        c.args(["passwd", "sluice"]);
        c
    });
    let fields: Vec<&str> = passwd.trim().split(':').collect();
    let uid: u32 = fields[2].parse().unwrap();
    assert!(uid < 1000, "sluice is a system user: {passwd}");
    assert!(
        fields[6].ends_with("nologin") || fields[6].ends_with("false"),
        "sluice has no login shell: {passwd}"
    );
    // The configuration may hold keys: the service's group reads it, nobody else.
    let mode = stdout(root_cmd(
        "stat",
        &[
            "-c",
            "%a %U:%G",
            "/etc/sluice/sluice.yaml",
            "/var/log/sluice",
        ],
    ));
    let mode: Vec<&str> = mode.lines().collect();
    assert_eq!(mode[0], "640 root:sluice", "/etc/sluice/sluice.yaml");
    assert!(
        mode[1].starts_with("750 sluice:"),
        "/var/log/sluice: {}",
        mode[1]
    );

    // The shipped configuration is valid on this machine for the service's user (its log
    // directory writable, its ports free).
    run(root_cmd(
        "runuser",
        &[
            "-u",
            "sluice",
            "--",
            "/usr/bin/sluice",
            "validate",
            "-c",
            "/etc/sluice/sluice.yaml",
        ],
    ));
    // The man pages and completions are the CLI's.
    let mut man = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open("/usr/share/man/man1/sluice.1.gz").unwrap())
        .read_to_end(&mut man)
        .unwrap();
    let man = String::from_utf8(man).unwrap();
    assert!(man.contains(".TH sluice 1"), "{man}");
    // Its SUBCOMMANDS section points at each command's own page.
    for sub in ["run", "validate", "plugins", "completions", "man"] {
        let entry = format!("sluice\\-{sub}(1)");
        assert!(man.contains(&entry), "sluice(1) has no {entry}:\n{man}");
    }
    let bash = std::fs::read_to_string("/usr/share/bash-completion/completions/sluice").unwrap();
    assert!(bash.contains("complete -F _sluice"), "{bash}");
    assert!(
        bash.contains("--config-only"),
        "bash completes validate's options"
    );
    let unit = std::fs::read_to_string("/lib/systemd/system/sluice.service").unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/sluice run -c /etc/sluice/sluice.yaml"));

    // Run as the service would (its user, its file), on free ports so the test does not
    // collide with anything: the gateway answers, its access log is written.
    let (port, admin, status) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    // setpriv execs sluice (runuser would stay its parent, and a signal would reach runuser).
    let child = root_cmd(
        "setpriv",
        &[
            "--reuid=sluice",
            "--regid=sluice",
            "--init-groups",
            "--",
            "/usr/bin/sluice",
            "run",
            "-c",
            "/etc/sluice/sluice.yaml",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
            "--status-listen",
            &format!("127.0.0.1:{status}"),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let service = Service(child);
    common::wait_for_port(status, "the packaged sluice's status listener");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !get(status, "/readyz").starts_with("HTTP/1.1 200") {
        assert!(
            Instant::now() < deadline,
            "the packaged sluice never got ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(get(status, "/healthz").starts_with("HTTP/1.1 200"));
    // No routes shipped: a 404, logged.
    assert!(get(port, "/before-rotation").starts_with("HTTP/1.1 404"));
    wait_for_text("/var/log/sluice/access.log", "/before-rotation");

    // logrotate moves the file and signals SIGUSR1 (no systemd here: pkill). Each worker
    // reopens the file at its next flush (within `log.access.flush`): a line logged meanwhile
    // goes to the moved file, which `delaycompress` leaves as it is until the next rotation.
    // Nothing is lost, and soon every line goes to the new file.
    run(root_cmd(
        "logrotate",
        &[
            "-f",
            "-s",
            dir.join("logrotate.state").to_str().unwrap(),
            "/etc/logrotate.d/sluice",
        ],
    ));
    assert!(read_root("/var/log/sluice/access.log.1").contains("/before-rotation"));
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        sent += 1;
        assert!(get(port, &format!("/after-rotation/{sent}")).starts_with("HTTP/1.1 404"));
        std::thread::sleep(Duration::from_millis(200));
        let new = read_root("/var/log/sluice/access.log");
        if new.contains("/after-rotation/") {
            assert!(!new.contains("/before-rotation"), "{new}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no line reached the new access.log after the rotation"
        );
    }
    // Every line, in one file or the other, once.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let both =
            read_root("/var/log/sluice/access.log.1") + &read_root("/var/log/sluice/access.log");
        let missing: Vec<usize> = (1..=sent)
            .filter(|n| both.matches(&format!("/after-rotation/{n} ")).count() != 1)
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "requests {missing:?} are not logged once across the two files:\n{both}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(service);

    // Removed: the binary goes, the configuration (a conffile) stays; purged: nothing stays.
    run(root_cmd("dpkg", &["-r", "sluice"]));
    assert!(!Path::new("/usr/bin/sluice").exists());
    assert!(
        Path::new("/etc/sluice/sluice.yaml").exists(),
        "remove keeps the configuration"
    );
    run(root_cmd("dpkg", &["--purge", "sluice"]));
    for gone in [
        "/etc/sluice",
        "/var/log/sluice",
        "/var/lib/sluice",
        "/etc/logrotate.d/sluice",
        "/lib/systemd/system/sluice.service",
        "/usr/share/man/man1/sluice.1.gz",
        "/usr/share/bash-completion/completions/sluice",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} is left after purge");
    }
    let user = Command::new("getent")
        .args(["passwd", "sluice"])
        .output()
        .unwrap();
    assert!(
        !user.status.success(),
        "the sluice user is left after purge"
    );
    let group = Command::new("getent")
        .args(["group", "sluice"])
        .output()
        .unwrap();
    assert!(
        !group.status.success(),
        "the sluice group is left after purge"
    );
}

/// Runs the image's entrypoint, or fails with what the runtime said.
fn podman_run(tag: &str, args: &[String]) -> Result<Child, String> {
    let mut c = as_root("podman");
    c.args(["run", "--rm", "--network", "host", "--no-healthcheck", tag]);
    c.args(args);
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    // A runtime that cannot start the container says so at once.
    std::thread::sleep(Duration::from_secs(2));
    match child.try_wait() {
        Ok(Some(status)) => {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            Err(format!("{status}: {}", err.trim()))
        }
        _ => Ok(child),
    }
}

/// The image built from nothing, inspected, and run: with podman where this machine can run
/// containers, else (a sandbox that refuses a container's setrlimit, as this one does) its
/// root file system run with chroot as the image's user, which shows the image holds all the
/// binary needs.
#[test]
fn the_container_image_holds_what_sluice_needs_and_serves() {
    require_root("builds and runs a container image");
    let tag = format!("localhost/sluice-test:{}", std::process::id());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/oci/build.sh");
    let mut c = as_root(script.to_str().unwrap());
    c.args(["--binary", BIN, "--tag", &tag]);
    assert_eq!(stdout(c).trim(), tag);
    struct Image(String, Option<String>);
    impl Drop for Image {
        fn drop(&mut self) {
            if let Some(ctr) = &self.1 {
                let _ = root_cmd("buildah", &["rm", ctr]).output();
            }
            let _ = root_cmd("buildah", &["rmi", "-f", &self.0]).output();
        }
    }
    let mut image = Image(tag.clone(), None);

    let inspect: serde_json::Value = serde_json::from_str(&stdout(root_cmd(
        "buildah",
        &["inspect", "--type", "image", &tag],
    )))
    .unwrap();
    let config = &inspect["Docker"]["config"];
    assert_eq!(config["User"], "10001:10001", "not root: {config}");
    assert_eq!(config["Entrypoint"], serde_json::json!(["/usr/bin/sluice"]));
    assert_eq!(config["Cmd"], serde_json::json!(["run"]));
    assert_eq!(
        config["Healthcheck"]["Test"],
        serde_json::json!(["CMD", "/usr/bin/sluice", "health", "127.0.0.1:9091"])
    );
    let ports: Vec<&String> = config["ExposedPorts"].as_object().unwrap().keys().collect();
    for p in ["9080", "9091"] {
        assert!(
            ports.iter().any(|k| k.trim_end_matches("/tcp") == p),
            "{config}"
        );
    }
    assert!(
        config["Env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "SLUICE_CONFIG=/etc/sluice/sluice.yaml"),
        "{config}"
    );
    // One layer, from nothing: no base image's files, no shell.
    let layers = inspect["Docker"]["rootfs"]["diff_ids"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(layers, 1, "{}", inspect["Docker"]["rootfs"]);
    let ctr = stdout(root_cmd("buildah", &["from", &tag]))
        .trim()
        .to_owned();
    image.1 = Some(ctr.clone());
    let root = stdout(root_cmd("buildah", &["mount", &ctr]))
        .trim()
        .to_owned();
    let files = stdout(root_cmd("find", &[&root, "-type", "f"]));
    let mut files: Vec<&str> = files
        .lines()
        .map(|f| f.strip_prefix(root.as_str()).unwrap())
        .collect();
    files.sort_unstable();
    for f in [
        "/usr/bin/sluice",
        "/etc/sluice/sluice.yaml",
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/passwd",
    ] {
        assert!(files.contains(&f), "the image has no {f}: {files:?}");
    }
    assert!(
        !files.iter().any(|f| f.ends_with("/sh")),
        "a shell in the image: {files:?}"
    );
    assert!(files.len() < 15, "only what the binary needs: {files:?}");

    // The image's own configuration, as shipped (the run below moves its ports out of the
    // way of anything else on this machine).
    let valid = root_cmd(
        "chroot",
        &[
            "--userspec=10001:10001",
            &root,
            "/usr/bin/sluice",
            "validate",
            "--config-only",
            "-c",
            "/etc/sluice/sluice.yaml",
        ],
    )
    .output()
    .unwrap();
    assert!(valid.status.success(), "the image's sluice.yaml: {valid:?}");
    let (port, admin, status) = (
        common::free_port(),
        common::free_port(),
        common::free_port(),
    );
    let args: Vec<String> = vec![
        "run".into(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--admin-listen".into(),
        format!("127.0.0.1:{admin}"),
        "--status-listen".into(),
        format!("127.0.0.1:{status}"),
    ];
    let (child, how) = match podman_run(&tag, &args) {
        Ok(child) => (child, "podman"),
        Err(refused) => {
            eprintln!(
                "podman cannot run containers on this machine ({refused}); running the image's root file system with chroot as its user instead"
            );
            let mut c = as_root("chroot");
            c.args(["--userspec=10001:10001", &root, "/usr/bin/sluice"])
                .args(&args)
                .env("SLUICE_CONFIG", "/etc/sluice/sluice.yaml")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            (c.spawn().unwrap(), "chroot")
        }
    };
    let _service = Service(child);
    common::wait_for_port(status, "the image's status listener");
    // Its health check, as the runtime runs it: inside the image, as its user.
    let health = |addr: String| {
        let mut c = as_root("chroot");
        c.args([
            "--userspec=10001:10001",
            &root,
            "/usr/bin/sluice",
            "health",
            &addr,
        ]);
        c.output().unwrap()
    };
    let ok = health(format!("127.0.0.1:{status}"));
    assert!(ok.status.success(), "{how}: {ok:?}");
    let down = health(format!("127.0.0.1:{}", common::free_port()));
    assert!(!down.status.success(), "nothing listens there: {down:?}");
    assert!(get(port, "/").starts_with("HTTP/1.1 404"), "{how}");
}
