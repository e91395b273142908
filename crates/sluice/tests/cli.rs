//! The `sluice` binary as users run it.

#![allow(clippy::unwrap_used)]

mod common;

use common::free_port;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// Held by the tests that use the default ports (9080, 9180, 9091, 1980): the demo binds them, and
/// `validate` of a file without `listen` probes them for a moment; run together, one could
/// find the other's socket.
static DEFAULT_PORTS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sluice-config/tests/fixtures")
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sluice-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn get(addr: &str, path: &str) -> String {
    get_with(addr, path, "")
}

/// A GET with extra header lines (each ending in CRLF).
fn get_with(addr: &str, path: &str, headers: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Reads the child's stderr until a line contains `needle`; returns the lines read.
fn wait_for_line(child: &mut Child, needle: &str) -> Vec<String> {
    let rx = stderr_lines(child);
    let mut lines = Vec::new();
    expect_line(&rx, &mut lines, needle);
    // Keeps draining after the caller stops listening, so the child never writes to a
    // closed pipe.
    std::thread::spawn(move || while rx.recv().is_ok() {});
    lines
}

/// A child process that is killed if the test fails before stopping it.
struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(cmd: &mut Command) -> Running {
    // stdout is not inherited: a leaked child must not hold the test runner's output open.
    Running(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sluice"),
    )
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "sluice did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn plugins_lists_the_registry_as_json() {
    let out = Command::new(BIN).arg("plugins").output().unwrap();
    assert!(out.status.success());
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<&str> = list.iter().map(|p| p["name"].as_str().unwrap()).collect();
    let priorities: Vec<i64> = list
        .iter()
        .map(|p| p["priority"].as_i64().unwrap())
        .collect();
    assert!(
        priorities.is_sorted_by(|a, b| a >= b),
        "in the order they run: {priorities:?}"
    );
    names.sort_unstable();
    assert_eq!(names, sluice_plugins::builtin().names());
    let real_ip = list.iter().find(|p| p["name"] == "real-ip").unwrap();
    assert_eq!(real_ip["priority"], 23000);
    assert_eq!(real_ip["stream"], false);
    let ip_restriction = list.iter().find(|p| p["name"] == "ip-restriction").unwrap();
    assert_eq!(ip_restriction["stream"], true);
}

#[test]
fn version_is_printed() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    // The commit it was built from, and when: `sluice 0.1.0 (commit 384767eafb of 2026-11-26,
    // built 2026-11-26)`.
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let head = Command::new("git")
        .args(["rev-parse", "--short=10", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let rest = text
        .strip_prefix(&format!("sluice {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{text}"));
    let (commit, dates) = rest.split_once(" of ").unwrap_or_else(|| panic!("{text}"));
    assert_eq!(commit, head, "{text}");
    let (commit_date, built) = dates
        .strip_suffix(')')
        .and_then(|d| d.split_once(", built "))
        .unwrap_or_else(|| panic!("{text}"));
    for d in [commit_date, built] {
        let parts: Vec<&str> = d.split('-').collect();
        assert!(
            parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()),
            "{text}"
        );
    }
}

#[test]
fn validate_prints_every_error_with_its_path_and_exits_1() {
    for case in ["many_errors", "bad_patterns", "bad_nodes"] {
        let file = fixtures().join(format!("invalid/{case}.yaml"));
        let out = Command::new(BIN)
            .args(["validate", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{case}");
        let expected =
            std::fs::read_to_string(fixtures().join(format!("invalid/{case}.err"))).unwrap();
        // Errors go to stderr, as `run`'s do; stdout stays for the "ok" summary.
        assert_eq!(String::from_utf8_lossy(&out.stderr), expected, "{case}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{case}");
    }
}

#[test]
fn validate_summarizes_a_good_file() {
    let _ports = DEFAULT_PORTS.lock();
    let mut text = String::from("routes:\n");
    for i in 1..=5000 {
        text.push_str(&format!(
            "\n  - id: {i}\n    uri: /hello{i}\n    upstream:\n      nodes:\n        \"127.0.0.1:1980\": 1\n      type: roundrobin\n"
        ));
    }
    text.push_str("#END\n");
    let file = temp_file("s4.yaml", &text);
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok: 5000 routes, 1 upstream\n"
    );

    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(fixtures().join("valid/seed_scenario1.yaml"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok: 1 route, 1 upstream\n"
    );
}

#[test]
fn validate_reports_a_missing_file() {
    let out = Command::new(BIN)
        .args(["validate", "-c", "/nonexistent/sluice.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .starts_with("cannot read config file /nonexistent/sluice.yaml:")
    );
}

#[test]
fn run_refuses_an_invalid_file_and_exits_1() {
    for (name, text, error) in [
        (
            "bad.yaml",
            "routes:\n  - uri: /x\n    upstream: {nodes: {}}\n",
            "routes[0].upstream.nodes: must not be empty",
        ),
        // The admin API is never open beyond loopback without a key.
        (
            "open-admin.yaml",
            "listen: 127.0.0.1:0\nadmin: {listen: \"0.0.0.0:0\"}\nroutes: []\n",
            "admin.key: is required when the admin API listens on 0.0.0.0:0, which is not a loopback address",
        ),
    ] {
        let file = temp_file(name, text);
        let out = Command::new(BIN)
            .args(["run", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        // Once: not once by the logger and again on exit.
        assert_eq!(err.matches(error).count(), 1, "{err}");
    }
}

/// Runs a command that must exit by itself within 10 s (it is killed, and the test fails,
/// if it is still running then).
fn exits_within(cmd: &mut Command) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after 10 s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_second_gateway_on_a_served_port_refuses_to_start_and_says_which_setting() {
    let (port, admin_port, other_admin) = (free_port(), free_port(), free_port());
    let config = |name: &str, body: &str, admin: u16| {
        temp_file(
            name,
            &format!(
                "listen: 127.0.0.1:{port}\nadmin: {{listen: \"127.0.0.1:{admin}\"}}\nroutes:\n  - {{uri: /*, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}, plugins: {{mocking: {{response_example: {body}}}}}}}\n"
            ),
        )
    };
    let first_file = config("first.yaml", "first", admin_port);
    let mut first = spawn(Command::new(BIN).args(["run", "-c"]).arg(&first_file));
    wait_for_line(&mut first, "listening on");

    // Same listen address, another admin port: without the check it started and took half
    // of the connections with its own configuration.
    let second_file = config("second.yaml", "second", other_admin);
    let out = exits_within(Command::new(BIN).args(["run", "-c"]).arg(&second_file));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port} (listen[0])"))
            && err.contains("already in use")
            && err.contains("change listen[0]"),
        "{err}"
    );
    assert_eq!(err.matches("in use").count(), 1, "the cause once: {err}");
    for _ in 0..20 {
        let resp = get(&format!("127.0.0.1:{port}"), "/");
        assert!(resp.ends_with("first"), "{resp}");
    }

    // Another listen address, the same admin port: the admin setting is named.
    let third_file = temp_file(
        "third.yaml",
        &format!(
            "listen: 127.0.0.1:0\nadmin: {{listen: \"127.0.0.1:{admin_port}\"}}\nroutes: []\n"
        ),
    );
    let out = exits_within(Command::new(BIN).args(["run", "-c"]).arg(&third_file));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot listen on 127.0.0.1:{admin_port} for the admin API (admin.listen)"
        )) && err.contains("--admin-listen"),
        "{err}"
    );
    assert!(err.contains("the address is already in use"), "{err}");
    assert_eq!(err.matches("in use").count(), 1, "the cause once: {err}");
    assert!(!err.contains("os error"), "words, not errno: {err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("sluice:")).count(),
        1,
        "{err}"
    );
    // The status listener's likewise.
    let fourth_file = temp_file(
        "fourth.yaml",
        &format!(
            "listen: 127.0.0.1:0\nadmin: {{enabled: false}}\nstatus: {{listen: \"127.0.0.1:{admin_port}\"}}\nroutes: []\n"
        ),
    );
    let out = exits_within(Command::new(BIN).args(["run", "-c"]).arg(&fourth_file));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot listen on 127.0.0.1:{admin_port} for the status listener (status.listen): the address is already in use"
        )) && !err.contains("os error"),
        "{err}"
    );
    assert!(terminate(&mut first).success());

    // A gateway's own overlapping addresses are not "another process".
    let overlap = free_port();
    let file = temp_file(
        "overlap.yaml",
        &format!(
            "listen: [127.0.0.1:{overlap}, 0.0.0.0:{overlap}]\nadmin: {{enabled: false}}\nroutes: []\n"
        ),
    );
    let mut own = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
    wait_for_line(&mut own, "listening on");
    assert!(terminate(&mut own).success());
}

#[test]
fn command_line_flags_move_the_demo_and_the_help_names_signals() {
    let (port, admin_port, origin_port, status_port) =
        (free_port(), free_port(), free_port(), free_port());
    let mut child = spawn(Command::new(BIN).args([
        "run",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--admin-listen",
        &format!("127.0.0.1:{admin_port}"),
        "--status-listen",
        &format!("127.0.0.1:{status_port}"),
        "--origin-listen",
        &format!("127.0.0.1:{origin_port}"),
    ]));
    let lines = wait_for_line(&mut child, "listening on");
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("listening on 127.0.0.1:{port} "))),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains(&format!(
            "admin API on http://127.0.0.1:{admin_port}/admin/"
        ))),
        "{lines:?}"
    );
    let hello = get(&format!("127.0.0.1:{port}"), "/hello");
    assert!(hello.ends_with("hello world"), "{hello}");
    let ready = get(&format!("127.0.0.1:{status_port}"), "/readyz");
    assert!(ready.ends_with("ready\n"), "{ready}");
    assert!(terminate(&mut child).success());

    // --no-admin: no admin port at all; a file's listen is replaced. The file's admin section
    // (open to the network without a key) would be refused; with --no-admin it is not used,
    // at start and on every later reload.
    let flagged = |body: &str, node: &str| {
        format!(
            "listen: 127.0.0.1:1\nadmin: {{listen: \"0.0.0.0:9\"}}\nupstreams: [{{id: u, nodes: {{\"{node}\": 1}}}}]\nroutes:\n  - {{uri: /*, upstream_id: u, plugins: {{mocking: {{response_example: {body}}}}}}}\n"
        )
    };
    let file = temp_file("flags.yaml", &flagged("flagged", "127.0.0.1:1"));
    let mut child = spawn(
        Command::new(BIN)
            .args([
                "run",
                "--no-admin",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "-c",
            ])
            .arg(&file),
    );
    let rx = stderr_lines(&mut child);
    let mut lines = Vec::new();
    expect_line(&rx, &mut lines, "listening on");
    assert!(
        !lines.iter().any(|l| l.contains("admin API on")),
        "{lines:?}"
    );
    assert!(get(&format!("127.0.0.1:{port}"), "/").ends_with("flagged"));
    // A whole reload (the upstream changes too) is checked with the flags, as the start was.
    std::fs::write(&file, flagged("again", "127.0.0.1:2")).unwrap();
    expect_line(&rx, &mut lines, "configuration reloaded");
    assert!(get(&format!("127.0.0.1:{port}"), "/").ends_with("again"));
    assert!(terminate(&mut child).success());
    std::thread::spawn(move || while rx.recv().is_ok() {});

    // A bad flag value is named as the flag's.
    let out = exits_within(
        Command::new(BIN)
            .args(["run", "--listen", "localhost:1", "-c"])
            .arg(&file),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("listen[0]: invalid listen address \"localhost:1\"")
            && err.contains("(set on the command line)"),
        "{err}"
    );

    let help = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for word in [
        "--listen",
        "--admin-listen",
        "--no-admin",
        "--origin-listen",
        "--status-listen",
        "SIGHUP",
        "SIGUSR1",
        "SIGTERM",
        "SIGINT",
        "RUST_LOG",
        "SLUICE_CONFIG",
        "/etc/sluice/sluice.yaml",
    ] {
        assert!(help.contains(word), "{word} in {help}");
    }
}

#[test]
fn run_serves_a_file_and_stops_cleanly_on_sigterm() {
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_addr = origin.local_addr().unwrap();
    drop(origin);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let file = temp_file(
        "run.yaml",
        &format!(
            "listen: 127.0.0.1:{port}\nworkers: 2\nadmin: {{listen: \"127.0.0.1:0\"}}\norigin: {{listen: \"{origin_addr}\"}}\nroutes:\n  - uri: /*\n    upstream: {{nodes: {{\"{origin_addr}\": 1}}}}\n"
        ),
    );
    let mut child = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
    let lines = wait_for_line(&mut child, "listening on");
    assert!(
        lines.iter().any(|l| l.contains(&format!(
            "listening on 127.0.0.1:{port} with 2 worker(s), config: {}",
            file.display()
        ))),
        "{lines:?}"
    );
    let resp = get(&format!("127.0.0.1:{port}"), "/hello");
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    assert!(resp.ends_with("hello world"), "{resp}");
    let status = terminate(&mut child);
    assert!(status.success(), "exit status {status}");
}

#[test]
fn run_without_a_file_serves_the_builtin_demo_on_port_9080() {
    let _ports = DEFAULT_PORTS.lock();
    // The embedded default uses fixed ports by design (127.0.0.1:9080, the origin on 1980,
    // the admin API on 9180, the status listener on 9091): what a user gets on a fresh machine.
    for port in [9080, 1980, 9180, 9091] {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            panic!(
                "port {port} is busy: this test needs 127.0.0.1 ports 9080, 1980, 9180 and 9091 free"
            );
        }
    }
    let mut child = spawn(
        Command::new(BIN)
            .arg("run")
            .env("RUST_LOG", "info")
            .env_remove("SLUICE_CONFIG"),
    );
    let lines = wait_for_line(&mut child, "listening on");
    assert!(
        lines.iter().any(|l| l.contains(
            "listening on 127.0.0.1:9080 with 1 worker(s), config: built-in default configuration"
        )),
        "{lines:?}"
    );
    // Said, not silent: an operator who forgot -c learns it from the log.
    assert!(
        lines.iter().any(|l| l.contains("WARN")
            && l.contains("no configuration file (-c FILE, SLUICE_CONFIG, or /etc/sluice/sluice.yaml): serving the built-in demo configuration")),
        "{lines:?}"
    );
    let hello = get("127.0.0.1:9080", "/hello");
    assert!(hello.ends_with("hello world"), "{hello}");
    let welcome = get("127.0.0.1:9080", "/");
    assert!(welcome.contains("Welcome to Sluice"), "{welcome}");
    let metrics = get("127.0.0.1:9091", "/metrics");
    assert!(
        metrics.contains(
            "sluice_http_requests_total{route=\"hello\",method=\"GET\",status=\"2xx\"} 1"
        ),
        "{metrics}"
    );
    let dashboard = get("127.0.0.1:9091", "/dashboard/");
    assert!(dashboard.contains("<title>Sluice</title>"), "{dashboard}");
    assert!(terminate(&mut child).success());
}

#[test]
fn a_closed_stderr_does_not_crash_the_gateway() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let file = temp_file(
        "stderr.yaml",
        &format!("listen: 127.0.0.1:{port}\nadmin: {{enabled: false}}\nroutes: []\n"),
    );
    let mut child = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "sluice exited early"
        );
    }
    drop(stderr);
    let resp = get(&format!("127.0.0.1:{port}"), "/");
    assert!(resp.starts_with("HTTP/1.1 404"), "{resp}");
    assert!(terminate(&mut child).success());
}

/// The child's stderr, line by line, read on another thread for as long as the child runs.
fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    rx
}

/// Collects lines into `seen` until one contains `needle`; returns that line.
fn expect_line(
    rx: &std::sync::mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    needle: &str,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            seen.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }
    panic!("no line with {needle:?} in:\n{}", seen.join("\n"));
}

fn admin_get(addr: &str, path: &str, key: &str) -> String {
    get_with(addr, path, &format!("X-API-KEY: {key}\r\n"))
}

#[test]
fn run_prints_a_generated_admin_key_once_and_reloads_on_sighup() {
    let (port, admin_port, origin_port) = (free_port(), free_port(), free_port());
    let route = |uri: &str| {
        format!(
            "listen: 127.0.0.1:{port}\nadmin: {{listen: \"127.0.0.1:{admin_port}\"}}\norigin: {{listen: \"127.0.0.1:{origin_port}\"}}\nroutes:\n  - {{id: r, uri: {uri}, upstream: {{nodes: {{\"127.0.0.1:{origin_port}\": 1}}}}}}\n"
        )
    };
    let file = temp_file("sighup.yaml", &route("/hello"));
    let mut child = spawn(
        Command::new(BIN)
            .args(["run", "-c"])
            .arg(&file)
            .env("RUST_LOG", "info"),
    );
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    let key_line = expect_line(&rx, &mut seen, "admin API key");
    let key = key_line.rsplit(' ').next().unwrap().to_owned();
    assert_eq!(key.len(), 32, "{key_line}");
    expect_line(
        &rx,
        &mut seen,
        &format!("admin API on http://127.0.0.1:{admin_port}/admin/"),
    );
    expect_line(&rx, &mut seen, "listening on");
    let admin = format!("127.0.0.1:{admin_port}");
    let resp = admin_get(&admin, "/admin/routes", &key);
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("\"total\":1"), "{resp}");
    assert!(admin_get(&admin, "/admin/routes", "nope").starts_with("HTTP/1.1 401"));

    // SIGHUP re-reads the file (the watcher would too; SIGHUP is for scripts that want it now)
    // and does not stop the process.
    std::fs::write(&file, route("/bytes/*")).unwrap();
    let ok = Command::new("kill")
        .arg("-HUP")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !get(&format!("127.0.0.1:{port}"), "/bytes/3").starts_with("HTTP/1.1 200") {
        assert!(Instant::now() < deadline, "the edit was not applied");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP must not stop sluice"
    );
    let hup = || {
        let ok = Command::new("kill")
            .arg("-HUP")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(ok.success());
    };
    // Every SIGHUP logs its outcome, whatever it is: unchanged...
    hup();
    expect_line(&rx, &mut seen, "SIGHUP: configuration unchanged");
    // ... refused, and refused again with the same bad file (it used to say only "re-reading",
    // and the status kept an old error after a fix) ...
    std::fs::write(&file, route("nope")).unwrap();
    expect_line(&rx, &mut seen, "configuration rejected (1 error)");
    // (A refused file is checked again on SIGHUP: what it refers to, a certificate file,
    // may have appeared since.)
    hup();
    let again = expect_line(&rx, &mut seen, "configuration rejected (1 error)");
    assert!(again.contains("(SIGHUP)"), "{again}");
    let status = admin_get(&admin, "/admin/status", &key);
    assert!(status.contains("must start with"), "{status}");
    // ... and applied once fixed, which clears the error.
    // (Polled, not read from the log: a "configuration reloaded" line of the watcher for an
    // earlier edit may still be on its way when the file is fixed.)
    std::fs::write(&file, route("/status/*")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = admin_get(&admin, "/admin/status", &key);
        if status.contains("\"last_error\":null") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the fix was not applied: {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(terminate(&mut child).success());
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
        seen.push(line);
    }
    let with_key = seen.iter().filter(|l| l.contains(&key)).count();
    assert_eq!(with_key, 1, "the key is printed once:\n{}", seen.join("\n"));
}

#[test]
fn origin_serves_its_endpoints() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child =
        spawn(Command::new(BIN).args(["origin", "--listen", &format!("127.0.0.1:{port}")]));
    wait_for_line(&mut child, "origin listening on");
    let addr = format!("127.0.0.1:{port}");
    assert!(get(&addr, "/hello").ends_with("\r\n\r\nhello world"));
    let bytes = get(&addr, "/bytes/1000");
    assert!(bytes.contains("Content-Length: 1000\r\n") && bytes.ends_with(&"x".repeat(1000)));
    assert!(get(&addr, "/status/418").starts_with("HTTP/1.1 418 "));
    assert!(get(&addr, "/nope").starts_with("HTTP/1.1 404 "));
    let started = Instant::now();
    assert!(get(&addr, "/delay/200").ends_with("hello world"));
    assert!(started.elapsed() >= Duration::from_millis(200));
    let echo = get(&addr, "/echo?q=1");
    let body = echo.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["method"], "GET");
    assert_eq!(v["path"], "/echo?q=1");
    assert_eq!(v["headers"][0], serde_json::json!(["Host", "localhost"]));
    assert!(terminate(&mut child).success());
}

#[test]
fn validate_checks_what_run_needs_and_warns_about_what_is_probably_a_mistake() {
    let _ports = DEFAULT_PORTS.lock();
    let validate = |name: &str, text: &str| {
        let file = temp_file(name, text);
        let out = Command::new(BIN)
            .args(["validate", "-c"])
            .arg(&file)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // What `run` would fail on: passed before, failed at `run`.
    let (code, out, err) = validate(
        "machine.yaml",
        "listen: [127.0.0.1:0, 192.0.2.1:8080]\nadmin: {enabled: false}\nlog: {access: {path: /nonexistent/dir/a.log}}\nroutes: []\n",
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert_eq!(out, "");
    assert!(
        err.contains(
            "log.access.path: cannot create /nonexistent/dir/a.log: the directory /nonexistent/dir does not exist"
        ),
        "{err}"
    );
    // A file meant for another machine: --config-only leaves the machine out.
    let out = Command::new(BIN)
        .args(["validate", "--config-only", "-c"])
        .arg(temp_file(
            "elsewhere.yaml",
            "listen: [192.0.2.1:8080]\nadmin: {enabled: false}\nlog: {access: {path: /nonexistent/dir/a.log}}\nroutes: []\n",
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        err.contains("listen[1]: 192.0.2.1 is not an address of this machine"),
        "{err}"
    );

    // Probably a mistake, but it loads: warnings on stderr, "ok" on stdout, exit 0.
    let (code, out, err) = validate(
        "auth.yaml",
        "listen: 127.0.0.1:0\nadmin: {enabled: false}\nroutes:\n  - {uri: /a, upstream: {nodes: {\"127.0.0.1:1\": 1}}, plugins: {key-auth: {}}}\n  - {uri: /b, upstream: {nodes: {\"127.0.0.1:1\": 1}}, plugins: {basic-auth: {}}}\nconsumers:\n  - {username: u, plugins: {basic-auth: {username: u, password: p}}}\n",
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "ok: 2 routes, 1 upstream\n");
    assert_eq!(
        err,
        "warning: routes[0].plugins.key-auth: no consumer has key-auth credentials: every request of this route will be refused (401) until one has\n"
    );
    let (code, out, err) = validate("empty.yaml", "");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "ok: 0 routes, 0 upstreams\n");
    assert!(
        err.contains("warning: routes: no routes: every request will be answered 404"),
        "{err}"
    );

    // An address served now (by a running gateway, perhaps the one about to reload): a
    // warning, since `validate` runs beside it.
    let served = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (code, _, err) = validate(
        "served.yaml",
        &format!(
            "listen: {}\nadmin: {{enabled: false}}\nroutes: []\n",
            served.local_addr().unwrap()
        ),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("is in use now"), "{err}");
}

/// A log file's lines, from every rotated file, in order of rotation.
fn all_lines(files: &[PathBuf]) -> Vec<String> {
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn sigusr1_reopens_the_access_log_under_load_and_no_line_is_lost_or_split() {
    let origin = free_port();
    let port = free_port();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sluice-cli-rotate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("access.log");
    let file = dir.join("s.yaml");
    std::fs::write(
        &file,
        format!(
            "listen: 127.0.0.1:{port}\nworkers: 2\nadmin: {{enabled: false}}\nlimits: {{keepalive_requests: 100000}}\norigin: {{listen: \"127.0.0.1:{origin}\"}}\nlog:\n  access: {{path: {}, format: json, buffer: 4KiB}}\nroutes:\n  - {{id: r, uri: /*, upstream: {{nodes: {{\"127.0.0.1:{origin}\": 1}}}}}}\n",
            log.display()
        ),
    )
    .unwrap();
    let mut child = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
    wait_for_line(&mut child, "listening on");
    // Load: 4 clients on keep-alive connections, each request numbered, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s.set_nodelay(true).unwrap();
                let mut reader = BufReader::new(s.try_clone().unwrap());
                let mut sent = 0usize;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let req = format!("GET /hello?n={c}-{sent} HTTP/1.1\r\nHost: x\r\n\r\n");
                    s.write_all(req.as_bytes()).unwrap();
                    // Status line, headers, then the body of known length.
                    let mut len = 0usize;
                    loop {
                        let mut line = String::new();
                        reader.read_line(&mut line).unwrap();
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0u8; len];
                    reader.read_exact(&mut body).unwrap();
                    sent += 1;
                }
                sent
            })
        })
        .collect();
    // Meanwhile, three rotations as logrotate does them: move the file, then SIGUSR1; the
    // next one once the gateway has opened the new file.
    let mut files = Vec::new();
    for k in 1..=3 {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !log.exists() {
            assert!(Instant::now() < deadline, "the access log was not reopened");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        let rotated = dir.join(format!("access.log.{k}"));
        std::fs::rename(&log, &rotated).unwrap();
        files.push(rotated);
        let ok = Command::new("kill")
            .args(["-USR1", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    files.push(log.clone());
    // Lines still buffered are written within a second, and at exit.
    assert!(terminate(&mut child).success());
    let lines = all_lines(&files);
    assert!(sent > 1000, "only {sent} requests");
    assert_eq!(lines.len(), sent, "every request logged once");
    let mut seen = std::collections::HashSet::new();
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("a split line ({e}): {l}"));
        assert_eq!(v["status"], 200);
        assert!(seen.insert(v["request"].as_str().unwrap().to_owned()));
    }
    // The rotation took effect: the files after the first move got lines too.
    for f in &files[1..] {
        assert!(
            !std::fs::read_to_string(f).unwrap_or_default().is_empty(),
            "{} is empty",
            f.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_error_log_is_json_when_asked_and_never_coloured_in_a_pipe() {
    let port = free_port();
    let file = temp_file(
        "json-log.yaml",
        &format!(
            "listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\nlog: {{format: json}}\n"
        ),
    );
    let mut child = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
    let lines = wait_for_line(&mut child, "listening on");
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{l}"
        );
    }
    assert!(terminate(&mut child).success());
    // Text, with stderr a pipe (not a terminal): no escape sequences, even with FORCE_COLOR.
    let file = temp_file(
        "text-log.yaml",
        &format!("listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\n"),
    );
    let mut child = spawn(
        Command::new(BIN)
            .args(["run", "-c"])
            .arg(&file)
            .env("FORCE_COLOR", "1"),
    );
    let lines = wait_for_line(&mut child, "listening on");
    assert!(lines.iter().all(|l| !l.contains('\x1b')), "{lines:?}");
    assert!(terminate(&mut child).success());
}

#[test]
fn log_settings_edited_in_the_file_apply_on_reload() {
    let origin = free_port();
    let port = free_port();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sluice-cli-logreload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.log"), dir.join("b.log"));
    let file = dir.join("s.yaml");
    let yaml = |level: &str, format: &str, path: &Path| {
        format!(
            "listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\norigin: {{listen: \"127.0.0.1:{origin}\"}}\nlog:\n  level: {level}\n  format: {format}\n  access: {{path: {}, format: '$status $request_uri'}}\nroutes:\n  - {{id: r, uri: /*, upstream: {{nodes: {{\"127.0.0.1:{origin}\": 1}}}}}}\n",
            path.display()
        )
    };
    std::fs::write(&file, yaml("info", "text", &a)).unwrap();
    let mut child = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    expect_line(&rx, &mut seen, "listening on");
    let addr = format!("127.0.0.1:{port}");
    assert!(get(&addr, "/hello?first").starts_with("HTTP/1.1 200"));
    // Edit: another access log, a debug level, and a format that needs a restart.
    std::fs::write(&file, yaml("debug", "json", &b)).unwrap();
    expect_line(&rx, &mut seen, "log level applied");
    expect_line(&rx, &mut seen, "takes effect after a restart");
    expect_line(&rx, &mut seen, "access log settings applied");
    assert!(get(&addr, "/hello?second").starts_with("HTTP/1.1 200"));
    std::thread::spawn(move || while rx.recv().is_ok() {});
    assert!(terminate(&mut child).success());
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "200 /hello?first\n");
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "200 /hello?second\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sluice run` raises its soft limit of open files to the hard one, and says so when even the
/// hard one is below what `limits.max_connections` can hold (two sockets per connection).
#[test]
fn run_raises_its_open_files_limit_and_warns_when_the_hard_limit_is_too_low() {
    let port = free_port();
    let file = temp_file(
        "nofile.yaml",
        &format!(
            "listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\nlimits: {{max_connections: 5000}}\nroutes:\n  - uri: /*\n    upstream: {{nodes: {{\"127.0.0.1:1\": 1}}}}\n"
        ),
    );
    // Soft 256, hard 1,500: the gateway raises to 1,500 and warns that 10,000 are needed.
    let mut child = spawn(Command::new("sh").arg("-c").arg(format!(
        "ulimit -Sn 256 && ulimit -Hn 1500 && exec {BIN} run -c {}",
        file.display()
    )));
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    let line = expect_line(&rx, &mut seen, "limit of open files");
    assert!(
        line.contains("open_files=1500") && line.contains("needed=10000"),
        "{line}"
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let open = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        open.split_whitespace().collect::<Vec<_>>()[3..5],
        ["1500", "1500"],
        "{open}"
    );
    std::thread::spawn(move || while rx.recv().is_ok() {});
    assert!(terminate(&mut child).success());
}

/// A SIGTERM that arrives while the gateway starts stops it cleanly once it is up (exit 0),
/// instead of killing it with the default action: its handlers are installed before the start.
/// (Two tests that stop the gateway right after "listening on" failed now and then before.)
#[test]
fn a_sigterm_during_the_start_stops_the_gateway_cleanly() {
    let port = free_port();
    let mut routes = String::new();
    for i in 0..20_000 {
        routes.push_str(&format!(
            "  - {{\"id\": \"r{i}\", \"uri\": \"/r{i}/*\", \"upstream_id\": \"u\"}}\n"
        ));
    }
    let file = temp_file(
        "sigterm-start.yaml",
        &format!(
            "listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\nupstreams:\n  - {{\"id\": \"u\", \"nodes\": {{\"127.0.0.1:1\": 1}}}}\nroutes:\n{routes}"
        ),
    );
    let mut child = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
    let rx = stderr_lines(&mut child);
    std::thread::sleep(Duration::from_millis(30));
    let status = terminate(&mut child);
    let lines: Vec<String> = rx.try_iter().collect();
    assert!(status.success(), "exit status {status}: {lines:?}");
}

/// APISIX's environment references are resolved when the file is loaded: `${{NAME}}` in a
/// setting (a number once resolved), `$env://NAME` as a key-auth key. A missing variable is an
/// error at its path; the key the gateway checks is the variable's value, never the reference.
#[test]
fn environment_references_are_resolved_at_load_and_a_missing_one_is_refused() {
    let port = free_port();
    let file = temp_file(
        "env.yaml",
        "listen: \"127.0.0.1:${{SLUICE_TEST_PORT}}\"\nworkers: \"${{SLUICE_TEST_WORKERS:=1}}\"\nadmin: {enabled: false}\nroutes:\n  - {uri: /k, upstream: {nodes: {\"127.0.0.1:1\": 1}}, plugins: {key-auth: {}, mocking: {response_example: inside}}}\nconsumers:\n  - {username: ann, plugins: {key-auth: {key: \"$env://SLUICE_TEST_KEY\"}}}\n",
    );
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&file)
        .env("SLUICE_TEST_PORT", port.to_string())
        .env_remove("SLUICE_TEST_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "consumers[0].plugins.key-auth.key: environment variable SLUICE_TEST_KEY is not set"
        ),
        "{stderr}"
    );

    let mut child = spawn(
        Command::new(BIN)
            .args(["run", "-c"])
            .arg(&file)
            .env("SLUICE_TEST_PORT", port.to_string())
            .env("SLUICE_TEST_KEY", "k-from-env"),
    );
    wait_for_line(&mut child, "listening on");
    let addr = format!("127.0.0.1:{port}");
    let ok = get_with(&addr, "/k", "apikey: k-from-env\r\n");
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.ends_with("inside"),
        "{ok}"
    );
    // The reference itself is not a key.
    let refused = get_with(&addr, "/k", "apikey: $env://SLUICE_TEST_KEY\r\n");
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(terminate(&mut child).success());
}

/// A node that is down makes every request to it fail the same way: the error log says so once,
/// then counts (it wrote a line per request, 11 MB in 2 s of `wrk`); the access log and the
/// metrics keep every request.
#[test]
fn repeated_failures_are_summarised_in_the_error_log_and_kept_elsewhere() {
    let (port, status_port) = (free_port(), free_port());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sluice-cli-flood-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let access = dir.join("access.log");
    let file = temp_file(
        "flood.yaml",
        &format!(
            "listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\nstatus: {{listen: 127.0.0.1:{status_port}}}\nlog: {{failure_summary: 1s, access: {{path: {}, flush: 10ms}}}}\nroutes:\n  - {{id: down, uri: /down, upstream: {{nodes: {{\"127.0.0.1:1\": 1}}, retries: 0}}}}\n",
            access.display()
        ),
    );
    let mut child = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
    let rx = stderr_lines(&mut child);
    let mut lines = Vec::new();
    expect_line(&rx, &mut lines, "listening on");
    let addr = format!("127.0.0.1:{port}");
    const N: usize = 300;
    for _ in 0..N {
        assert!(get(&addr, "/down").starts_with("HTTP/1.1 502"));
    }
    let summary = expect_line(&rx, &mut lines, "more like it");
    assert!(
        summary.contains(&format!("request failed: {} more like it", N - 1)),
        "{summary}"
    );
    assert!(summary.contains("side=upstream"), "{summary}");
    let failures: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("request failed"))
        .collect();
    // The first one whole, then its summary.
    assert_eq!(failures.len(), 2, "{lines:#?}");
    assert!(
        failures[0].contains("route=down") && failures[0].contains("cause=connect failed: "),
        "{}",
        failures[0]
    );
    // Every request is in the metrics and the access log.
    let metrics = get(&format!("127.0.0.1:{status_port}"), "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_http_requests_total{")
                && l.contains("route=\"down\"")
                && l.contains("status=\"5xx\"")
                && l.ends_with(&format!(" {N}"))),
        "{metrics}"
    );
    assert_eq!(terminate(&mut child).code(), Some(0));
    let logged = std::fs::read_to_string(&access).unwrap();
    assert_eq!(logged.lines().count(), N, "{logged}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Line-based shippers split records on newlines: a refusal with several errors is one line,
/// with its errors in one field after everything else (nothing glued to the last error), in
/// both formats; the JSON names where a record comes from in words, not module paths.
#[test]
fn a_refused_configuration_is_one_log_record_on_one_line() {
    for format in ["text", "json"] {
        let port = free_port();
        let head = format!(
            "listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\nlog: {{format: {format}}}\nupstreams:\n  - {{id: up, nodes: {{\"127.0.0.1:1\": 1}}}}\nroutes:\n  - {{id: a, uri: /a, upstream_id: up}}\n"
        );
        let file = temp_file(&format!("one-line-{format}.yaml"), &head);
        let mut child = spawn(Command::new(BIN).args(["run", "-c"]).arg(&file));
        let rx = stderr_lines(&mut child);
        let mut lines = Vec::new();
        expect_line(&rx, &mut lines, "listening on");
        std::fs::write(
            &file,
            format!(
                "{head}  - {{id: b, uri: /b, upstream_id: missing-up, timeout: {{connect: 0}}}}\n"
            ),
        )
        .unwrap();
        let refused = expect_line(&rx, &mut lines, "configuration rejected");
        std::fs::write(&file, &head).unwrap();
        expect_line(&rx, &mut lines, "the file is accepted again");
        std::thread::spawn(move || while rx.recv().is_ok() {});
        assert!(terminate(&mut child).success());
        match format {
            "text" => {
                assert!(
                    refused.ends_with(
                        r#"errors="routes[1].upstream_id: upstream \"missing-up\" not found; routes[1].timeout.connect: must be > 0""#
                    ),
                    "{refused}"
                );
                // Every line is a record of its own: it starts with its timestamp.
                for l in &lines {
                    assert!(l.starts_with("20") && l.contains('Z'), "{l}\nin {lines:#?}");
                }
            }
            _ => {
                for l in &lines {
                    let v: serde_json::Value =
                        serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
                    assert!(v.get("target").is_none(), "{l}");
                    let c = v["component"].as_str().unwrap();
                    assert!(!c.contains("::"), "{l}");
                }
                let v: serde_json::Value = serde_json::from_str(&refused).unwrap();
                assert_eq!(v["component"], "config", "{refused}");
                assert_eq!(
                    v["fields"]["errors"],
                    r#"routes[1].upstream_id: upstream "missing-up" not found; routes[1].timeout.connect: must be > 0"#,
                    "{refused}"
                );
            }
        }
    }
}

/// Without -c, `SLUICE_CONFIG` names the file, else /etc/sluice/sluice.yaml when it exists (as
/// NGINX and APISIX look in a fixed place); `validate` looks the same way.
#[test]
fn run_and_validate_find_the_file_in_sluice_config_then_in_etc() {
    let port = free_port();
    let file = temp_file(
        "from-env.yaml",
        &format!("listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\nroutes: []\n"),
    );
    let mut child = spawn(Command::new(BIN).arg("run").env("SLUICE_CONFIG", &file));
    let lines = wait_for_line(&mut child, "listening on");
    assert!(
        lines.iter().any(|l| l.contains(&format!(
            "configuration file {} (from SLUICE_CONFIG)",
            file.display()
        ))),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains(&format!(
            "listening on 127.0.0.1:{port} with 1 worker(s), config: {}",
            file.display()
        ))),
        "{lines:?}"
    );
    assert!(terminate(&mut child).success());
    let out = Command::new(BIN)
        .arg("validate")
        .env("SLUICE_CONFIG", &file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    // The fixed place: only where this test may write it and no operator's file is there.
    let etc = Path::new("/etc/sluice/sluice.yaml");
    let _ports = DEFAULT_PORTS.lock();
    if etc.exists() || not_root() {
        eprintln!("skipped: {} exists, or this is not root", etc.display());
        return;
    }
    let made_dir = !etc.parent().unwrap().exists();
    std::fs::create_dir_all(etc.parent().unwrap()).unwrap();
    let port = free_port();
    std::fs::write(
        etc,
        format!("listen: 127.0.0.1:{port}\nworkers: 1\nadmin: {{enabled: false}}\nroutes: []\n"),
    )
    .unwrap();
    struct Remove(bool);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file("/etc/sluice/sluice.yaml");
            if self.0 {
                let _ = std::fs::remove_dir("/etc/sluice");
            }
        }
    }
    let _remove = Remove(made_dir);
    let mut child = spawn(Command::new(BIN).arg("run").env_remove("SLUICE_CONFIG"));
    let lines = wait_for_line(&mut child, "listening on");
    assert!(
        lines
            .iter()
            .any(|l| l
                .contains("configuration file /etc/sluice/sluice.yaml (from the default path)"))
            && lines
                .iter()
                .any(|l| l.contains(&format!("listening on 127.0.0.1:{port}"))),
        "{lines:?}"
    );
    assert!(terminate(&mut child).success());
}

fn not_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() != "0"
}

/// A file with one error of each stage of loading (a key written twice, a wrong type, a bad
/// reference, a bad plugin setting, a regex, what only compiling finds, a check across items):
/// `validate` and `run` report every one at once, in the file's order (they came in stages:
/// the duplicate key alone, then three, then the regex...).
#[test]
fn every_error_of_every_stage_is_reported_at_once_in_file_order() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/validate-fixtures");
    let file = dir.join("every_stage.yaml");
    let expected = std::fs::read_to_string(dir.join("every_stage.err")).unwrap();
    assert!(expected.lines().count() >= 10, "{expected}");
    let out = Command::new(BIN)
        .args(["validate", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stderr), expected);
    let out = exits_within(Command::new(BIN).args(["run", "-c"]).arg(&file));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let (errors, last) = err.trim_end().rsplit_once('\n').unwrap();
    assert_eq!(format!("{errors}\n"), expected);
    assert!(
        last.ends_with(&format!("refused, {} errors", expected.lines().count())),
        "{last}"
    );
}
