//! How long one route change takes to reach service, with many routes configured.
//!
//!   cargo run --release -p sluice --example reload_apply -- ROUTES [CHANGES]
//!
//! Starts a node in file mode (a temporary YAML file with ROUTES routes shaped as the seeds'
//! scenario 4: `/hello<i>`, each with an inline upstream), then changes one route CHANGES times
//! through the admin API (`PUT /admin/routes/<id>`) and CHANGES times by editing the file, and
//! reports, for each way, the median, 95th percentile and worst time from the change until the
//! gateway serves the new route (the admin call returns only once it does, so its latency is
//! that time). Sends traffic to 127.0.0.1 only; stops everything it started.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn http(addr: SocketAddr, method: &str, path: &str, key: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: x\r\nx-api-key: {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, out)
}

fn summary(name: &str, mut times: Vec<Duration>) {
    times.sort();
    let pick = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name:<28} median {:>8.2} ms   p95 {:>8.2} ms   max {:>8.2} ms   ({} changes)",
        pick(0.5).as_secs_f64() * 1e3,
        pick(0.95).as_secs_f64() * 1e3,
        times.last().unwrap().as_secs_f64() * 1e3,
        times.len()
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let routes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let changes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let origin = sluice_proxy::origin::Origin::start("127.0.0.1:0".parse().unwrap(), 1).unwrap();
    let o = origin.addr();
    let dir = std::env::temp_dir().join(format!("sluice-reload-apply-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("sluice.yaml");
    let key = "bench-key-0123456789abcdef";
    let head = format!(
        "listen: 127.0.0.1:0\nworkers: 1\nadmin: {{listen: \"127.0.0.1:0\", key: {key}}}\nlog: {{level: warn}}\nroutes:\n"
    );
    let route_line = |i: usize, uri: &str| {
        format!(
            "  - {{id: \"{i}\", uri: \"{uri}\", upstream: {{type: roundrobin, nodes: {{\"{o}\": 1}}}}}}\n"
        )
    };
    let mut text = head.clone();
    for i in 1..=routes {
        text.push_str(&route_line(i, &format!("/hello{i}")));
    }
    std::fs::write(&file, &text).unwrap();
    let started = Instant::now();
    let node = sluice::Node::start(sluice::Source::File(file.clone()), |_| {}).unwrap();
    println!(
        "{routes} routes: started in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    let proxy = node.server().local_addrs()[0];
    let (admin, _) = node.admin().unwrap();
    let served = |path: &str| http(proxy, "GET", path, "", "").0 == 200;
    assert!(served(&format!("/hello{routes}")));

    let mut api = Vec::new();
    for k in 0..changes {
        let id = 1 + (k * 7919) % routes;
        let uri = format!("/bytes/{}", k + 1);
        let body = format!(
            "{{\"uri\": \"{uri}\", \"upstream\": {{\"type\": \"roundrobin\", \"nodes\": {{\"{o}\": 1}}}}}}"
        );
        let t = Instant::now();
        let (status, resp) = http(admin, "PUT", &format!("/admin/routes/{id}"), key, &body);
        assert_eq!(status, 200, "{resp}");
        assert!(
            served(&uri),
            "the change is in service when the admin call returns"
        );
        api.push(t.elapsed());
        if std::env::var_os("VERBOSE").is_some() {
            println!("  change {k}: {:?}", t.elapsed());
        }
    }

    // File edits: the file as the admin API left it, with one more route line changed each time.
    let mut file_times = Vec::new();
    for k in 0..changes {
        let current = std::fs::read_to_string(&file).unwrap();
        let uri = format!("/bytes/{}", 100_000 + k);
        let id = 1 + (k * 104_729 + 13) % routes;
        let needle = format!("{{id: \"{id}\",");
        let edited: String = current
            .lines()
            .map(|l| {
                if l.contains(&needle) || l.contains(&format!("\"id\":\"{id}\"")) {
                    route_line(id, &uri)
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        assert!(edited != current, "route {id} not found in the file");
        let tmp = dir.join("edit.tmp");
        std::fs::write(&tmp, &edited).unwrap();
        let t = Instant::now();
        std::fs::rename(&tmp, &file).unwrap();
        while !served(&uri) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "file edit not applied"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        file_times.push(t.elapsed());
    }
    summary("admin PUT (until served)", api);
    summary("file edit (until served)", file_times);
    drop(node);
    origin.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
