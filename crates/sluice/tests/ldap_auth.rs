//! APISIX's `ldap-auth` through a live gateway and a real OpenLDAP `slapd` (Debian's), started
//! here with its own database, over plain LDAP and LDAPS: binds the directory accepts and
//! refuses, DNs that need escaping, consumers matched by DN, and a directory that is down or
//! stalled.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};

const ENTRIES: &str = r"dn: dc=example,dc=org
objectClass: dcObject
objectClass: organization
dc: example
o: Example

dn: ou=users,dc=example,dc=org
objectClass: organizationalUnit
ou: users

dn: cn=alice,ou=users,dc=example,dc=org
objectClass: inetOrgPerson
cn: alice
sn: A
userPassword: alice-pw

dn: cn=bob,ou=users,dc=example,dc=org
objectClass: inetOrgPerson
cn: bob
sn: B
userPassword: bob-pw

dn: cn=Smith\,John,ou=users,dc=example,dc=org
objectClass: inetOrgPerson
cn: Smith,John
sn: Smith
userPassword: john-pw

dn: uid=carol,ou=users,dc=example,dc=org
objectClass: inetOrgPerson
uid: carol
cn: carol
sn: C
userPassword: carol-pw
";

/// A `slapd` with the entries above, on a plain and a TLS port.
struct Slapd {
    child: std::process::Child,
    ldap: u16,
    ldaps: u16,
    dir: PathBuf,
}

fn sbin(name: &str) -> PathBuf {
    let p = PathBuf::from("/usr/sbin").join(name);
    if p.exists() { p } else { PathBuf::from(name) }
}

impl Slapd {
    fn start(pki: &common::pki::Pki) -> Slapd {
        let (ldap, ldaps) = (common::free_port(), common::free_port());
        let dir = std::env::temp_dir().join(format!("sluice-slapd-{}-{ldap}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let (cert, key) = pki.issue_files("slapd", &["localhost", "127.0.0.1"]);
        let conf = format!(
            "include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {d}/slapd.pid
argsfile {d}/slapd.args
TLSCertificateFile {cert}
TLSCertificateKeyFile {key}
database mdb
maxsize 10485760
suffix \"dc=example,dc=org\"
rootdn \"cn=admin,dc=example,dc=org\"
rootpw admin-secret
directory {d}/data
",
            d = dir.display(),
            cert = cert.display(),
            key = key.display(),
        );
        std::fs::write(dir.join("slapd.conf"), conf).unwrap();
        std::fs::write(dir.join("entries.ldif"), ENTRIES).unwrap();
        let out = std::process::Command::new(sbin("slapadd"))
            .arg("-f")
            .arg(dir.join("slapd.conf"))
            .arg("-l")
            .arg(dir.join("entries.ldif"))
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run slapadd ({e}): ./test.sh installs Debian's slapd")
            });
        assert!(
            out.status.success(),
            "slapadd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let child = std::process::Command::new(sbin("slapd"))
            .arg("-f")
            .arg(dir.join("slapd.conf"))
            .arg("-h")
            .arg(format!(
                "ldap://127.0.0.1:{ldap}/ ldaps://127.0.0.1:{ldaps}/"
            ))
            // In the foreground, logging nothing.
            .args(["-d", "0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        for port in [ldap, ldaps] {
            common::wait_for_port(port, "slapd");
        }
        Slapd {
            child,
            ldap,
            ldaps,
            dir,
        }
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Established TCP connections to a loopback port (from /proc/net/tcp).
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let remote = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[2].ends_with(&remote) && f[3] == "01"
        })
        .count()
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

#[tokio::test]
async fn ldap_auth_binds_against_a_real_directory() {
    let pki = common::pki::Pki::new("ldap");
    let slapd = Slapd::start(&pki);
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let (stalled, held) = common::stalled_service().await;
    let closed = common::closed_port().await;
    let users = "ou=users,dc=example,dc=org";
    let gw = Gateway::start(&format!(
        r#"upstreams:
  - {{id: o, nodes: {{"{o}": 1}}}}
routes:
  - {{uri: /cn, upstream_id: o, plugins: {{ldap-auth: {{base_dn: "{users}", ldap_uri: "127.0.0.1:{p}"}}}}}}
  - {{uri: /uid, upstream_id: o, plugins: {{ldap-auth: {{base_dn: "{users}", ldap_uri: "127.0.0.1:{p}", uid: uid, hide_credentials: true, realm: corp}}}}}}
  - {{uri: /tls, upstream_id: o, plugins: {{ldap-auth: {{base_dn: "{users}", ldap_uri: "127.0.0.1:{s}", use_tls: true}}}}}}
  - {{uri: /tls-verified, upstream_id: o, plugins: {{ldap-auth: {{base_dn: "{users}", ldap_uri: "127.0.0.1:{s}", use_tls: true, tls_verify: true}}}}}}
  - {{uri: /down, upstream_id: o, plugins: {{ldap-auth: {{base_dn: "{users}", ldap_uri: "{closed}"}}}}}}
  - {{uri: /slow, upstream_id: o, plugins: {{ldap-auth: {{base_dn: "{users}", ldap_uri: "{stalled}", timeout: 300}}}}}}
  - {{uri: /free, upstream_id: o}}
  - {{uri: /multi, upstream_id: o, plugins: {{multi-auth: {{auth_plugins: [{{key-auth: {{}}}}, {{ldap-auth: {{base_dn: "{users}", ldap_uri: "127.0.0.1:{p}"}}}}]}}}}}}
consumers:
  - {{username: dave, plugins: {{key-auth: {{key: dave-key}}}}}}
  - {{username: alice, plugins: {{ldap-auth: {{user_dn: "cn=alice,{users}"}}}}}}
  - {{username: john, plugins: {{ldap-auth: {{user_dn: "cn=Smith\\,John,{users}"}}}}}}
  - {{username: carol, plugins: {{ldap-auth: {{user_dn: "uid=carol,{users}"}}}}}}
"#,
        o = origin.node(),
        p = slapd.ldap,
        s = slapd.ldaps,
    ));
    let cl = gw.client();
    let get = |path: &'static str, auth: Option<String>| {
        let cl = cl.clone();
        async move {
            let h: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
            cl.send(Method::GET, path, &h, "").await
        }
    };

    // Accepted by the directory and matched to a consumer by DN.
    let r = get("/cn", Some(basic("alice", "alice-pw"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = origin.last();
    assert_eq!(seen.header("x-consumer-username"), Some("alice"));
    assert!(
        seen.has_header("authorization"),
        "kept without hide_credentials"
    );
    // Whitespace removed (APISIX's), and a comma escaped in the DN (RFC 4514).
    let r = get("/cn", Some(basic("Smith, John", "john-pw"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(origin.last().header("x-consumer-username"), Some("john"));
    // Requests in a row reuse the worker's connection to the directory.
    for _ in 0..5 {
        assert_eq!(
            get("/cn", Some(basic("alice", "alice-pw"))).await.status,
            200
        );
    }
    assert_eq!(connections_to(slapd.ldap), 1, "one kept-alive connection");

    // Refusals, each with APISIX's message and challenge.
    for (auth, message) in [
        (None, "Missing authorization in request"),
        (
            Some("Bearer x".to_owned()),
            "Invalid authorization in request",
        ),
        // An empty password would be an unauthenticated bind (RFC 4513 5.1.2), which some
        // directories accept without checking anything.
        (Some(basic("alice", "")), "Invalid authorization in request"),
        (Some(basic("alice", "wrong")), "Invalid user authorization"),
        (Some(basic("nobody", "x")), "Invalid user authorization"),
        // In the directory, but no consumer has its DN.
        (Some(basic("bob", "bob-pw")), "Invalid user authorization"),
    ] {
        let r = get("/cn", auth.clone()).await;
        assert_eq!(r.status, 401, "{auth:?}");
        assert_eq!(
            r.text().trim_end(),
            format!(r#"{{"message":"{message}"}}"#),
            "{auth:?}"
        );
        assert_eq!(r.header("www-authenticate"), Some(r#"Basic realm="ldap""#));
    }

    // `uid` names the attribute; `hide_credentials` keeps the password from the node.
    let r = get("/uid", Some(basic("carol", "carol-pw"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = origin.last();
    assert_eq!(seen.header("x-consumer-username"), Some("carol"));
    assert!(!seen.has_header("authorization"));
    let r = get("/uid", Some(basic("alice", "alice-pw"))).await;
    assert_eq!(r.status, 401, "no uid=alice entry");
    assert_eq!(r.header("www-authenticate"), Some(r#"Basic realm="corp""#));

    // In multi-auth, the bind waits like the plugin's own.
    let r = get("/multi", Some(basic("alice", "alice-pw"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(origin.last().header("x-consumer-username"), Some("alice"));
    let r = get("/multi", Some(basic("alice", "nope"))).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.text().trim_end(), r#"{"message":"Authorization Failed"}"#);
    assert_eq!(r.header("www-authenticate"), Some(r#"Basic realm="ldap""#));
    let r = cl
        .send(Method::GET, "/multi", &[("apikey", "dave-key")], "")
        .await;
    assert_eq!(
        origin.last().header("x-consumer-username"),
        Some("dave"),
        "{}",
        r.text()
    );

    // LDAPS: without verification the test CA's certificate is accepted; with it (against
    // the system's CAs), refused.
    assert_eq!(
        get("/tls", Some(basic("alice", "alice-pw"))).await.status,
        200
    );
    assert_eq!(
        get("/tls-verified", Some(basic("alice", "alice-pw")))
            .await
            .status,
        401
    );

    // A directory that is down: refused. A stalled one: refused after its timeout, while the
    // worker serves other routes.
    assert_eq!(
        get("/down", Some(basic("alice", "alice-pw"))).await.status,
        401
    );
    let started = Instant::now();
    let slow = tokio::spawn(get("/slow", Some(basic("alice", "alice-pw"))));
    for _ in 0..20 {
        assert_eq!(get("/free", None).await.status, 200);
    }
    assert!(started.elapsed() < Duration::from_millis(300));
    assert_eq!(slow.await.unwrap().status, 401);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    held.abort();
    gw.shutdown();
}

#[test]
fn bad_ldap_auth_settings_are_refused_with_their_place() {
    let plugins = sluice_plugins::shared();
    let at = "routes[0].plugins.ldap-auth";
    common::assert_refusals(
        "ldap-auth",
        &[
            (
                "{ldap_uri: \"x:389\"}",
                format!("{at}.base_dn: is required"),
            ),
            (
                "{base_dn: \"dc=x\", ldap_uri: \"ldap://x:389\"}",
                format!("{at}.ldap_uri: must be host[:port] without a scheme"),
            ),
            (
                "{base_dn: \"dc=x\", ldap_uri: \"x:0\"}",
                format!("{at}.ldap_uri: invalid port in \"x:0\""),
            ),
            (
                "{base_dn: \"dc=x\", ldap_uri: \"x\", uid: \"c n\"}",
                format!("{at}.uid: must be an attribute name"),
            ),
            (
                "{base_dn: \"dc=x\", ldap_uri: \"x\", timeout: 0}",
                format!("{at}.timeout: must be a whole number from 1 to 60000 ms, got 0"),
            ),
        ],
    );
    let consumers = "consumers:\n  - {username: a, plugins: {ldap-auth: {user_dn: \"cn=a\"}}}\n  - {username: b, plugins: {ldap-auth: {user_dn: \"cn=a\"}}}\n";
    let e = sluice_config::load_str_with(consumers, &*plugins)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("consumers[1].plugins.ldap-auth.user_dn: user_dn already used by consumers[0]"),
        "{e}"
    );
}
