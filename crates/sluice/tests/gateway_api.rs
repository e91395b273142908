//! `sluice import gateway-api`: the Gateway API conformance suite's own manifests
//! (sigs.k8s.io/gateway-api/conformance, from the Go module proxy: test.sh links them at
//! target/tools/gateway-api-conformance), translated by the binary with the suite's base
//! manifests (its Gateways and Services), served by a live gateway in front of one test
//! origin per backend Service, and sent the requests each HTTPRoute case sends (copied from
//! the case's Go file): each must reach the backend it expects, as the request it expects, or
//! get the status it expects. And the TLSRoute case, through a TLS backend.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use hyper::Method;
use sluice_testkit::{Gateway, TestOrigin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::pki::{Pki, tls_connect};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const INFRA: &str = "gateway-conformance-infra";

fn suite() -> PathBuf {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/gateway-api-conformance");
    assert!(
        p.join("tests").is_dir(),
        "{} is missing: ./test.sh links the Gateway API conformance manifests there (go mod download sigs.k8s.io/gateway-api/conformance)",
        p.display()
    );
    p
}

/// What a request must get.
enum Expect {
    /// Served by this backend Service, which received this path (None: the one sent), with
    /// these header values (repeated fields joined with `,`, as the suite's echo server
    /// does), and without these headers.
    Backend(
        &'static str,
        Option<&'static str>,
        &'static [(&'static str, &'static str)],
        &'static [&'static str],
    ),
    Status(u16),
    /// Redirected with this status to this host (None: the request's) and path, as the
    /// suite's `RedirectRequest` checks the `Location` it got.
    Redirect(u16, Option<&'static str>, &'static str),
}

use Expect::{Backend, Redirect, Status};

/// A request the suite sends (method, path and query, header fields) and what it must get.
type Sent = (
    Method,
    &'static str,
    &'static [(&'static str, &'static str)],
    Expect,
);

struct Case {
    manifest: &'static str,
    /// The Gateway the case's routes attach to, when not `same-namespace`.
    gateway: Option<&'static str>,
    requests: Vec<Sent>,
}

impl Case {
    /// A case on the `same-namespace` Gateway.
    fn new(manifest: &'static str, requests: Vec<Sent>) -> Self {
        Case {
            manifest,
            gateway: None,
            requests,
        }
    }
}

fn get(path: &'static str, expect: Expect) -> Sent {
    (Method::GET, path, &[], expect)
}

/// A POST of `path`, without a body, redirected with `code` to the same host and path.
fn post_redirected(path: &'static str, code: u16) -> Sent {
    (Method::POST, path, &[], Redirect(code, None, path))
}

/// A GET of `path` with `Host: host`.
fn at(host: &'static str, path: &'static str, expect: Expect) -> Sent {
    let headers: &'static [(&'static str, &'static str)] = Box::leak(Box::new([("Host", host)]));
    (Method::GET, path, headers, expect)
}

fn backend(name: &'static str) -> Expect {
    Backend(name, None, &[], &[])
}

fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "httproute-simple-same-namespace.yaml",
            vec![get("/", backend("infra-backend-v1"))],
        ),
        Case::new(
            "httproute-exact-path-matching.yaml",
            vec![
                get("/one", backend("infra-backend-v1")),
                get("/two", backend("infra-backend-v2")),
                get("/", Status(404)),
                get("/one/example", Status(404)),
                get("/two/", Status(404)),
                get("/Two", Status(404)),
            ],
        ),
        Case::new(
            "httproute-matching.yaml",
            vec![
                get("/", backend("infra-backend-v1")),
                get("/example", backend("infra-backend-v1")),
                (
                    Method::GET,
                    "/",
                    &[("Version", "one")],
                    backend("infra-backend-v1"),
                ),
                get("/v2", backend("infra-backend-v2")),
                get("/v2/example", backend("infra-backend-v2")),
                (
                    Method::GET,
                    "/",
                    &[("Version", "two")],
                    backend("infra-backend-v2"),
                ),
                get("/v2/", backend("infra-backend-v2")),
                get("/v2example", backend("infra-backend-v1")),
                get("/foo/v2/example", backend("infra-backend-v1")),
            ],
        ),
        Case::new(
            "httproute-header-matching.yaml",
            vec![
                (
                    Method::GET,
                    "/",
                    &[("Version", "one")],
                    backend("infra-backend-v1"),
                ),
                (
                    Method::GET,
                    "/",
                    &[("Version", "two")],
                    backend("infra-backend-v2"),
                ),
                (
                    Method::GET,
                    "/",
                    &[("Version", "two"), ("Color", "orange")],
                    backend("infra-backend-v1"),
                ),
                (
                    Method::GET,
                    "/",
                    &[("Version", "two"), ("Color", "blue")],
                    backend("infra-backend-v2"),
                ),
                (Method::GET, "/", &[("Color", "orange")], Status(404)),
                (
                    Method::GET,
                    "/",
                    &[("Some-Other-Header", "one")],
                    Status(404),
                ),
                (
                    Method::GET,
                    "/",
                    &[("Color", "blue")],
                    backend("infra-backend-v1"),
                ),
                (
                    Method::GET,
                    "/",
                    &[("Color", "green")],
                    backend("infra-backend-v1"),
                ),
                (
                    Method::GET,
                    "/",
                    &[("Color", "red")],
                    backend("infra-backend-v2"),
                ),
                (
                    Method::GET,
                    "/",
                    &[("Color", "yellow")],
                    backend("infra-backend-v2"),
                ),
                (Method::GET, "/", &[("Color", "purple")], Status(404)),
            ],
        ),
        Case::new(
            "httproute-query-param-matching.yaml",
            vec![
                get("/?animal=whale", backend("infra-backend-v1")),
                get("/?animal=dolphin", backend("infra-backend-v2")),
                get("/?animal=dolphin&color=blue", backend("infra-backend-v3")),
                get("/?ANIMAL=Whale", backend("infra-backend-v3")),
                get(
                    "/?animal=whale&otherparam=irrelevant",
                    backend("infra-backend-v1"),
                ),
                get("/?animal=dolphin&color=yellow", backend("infra-backend-v2")),
                get("/?color=blue", Status(404)),
                get("/?animal=dog", Status(404)),
                get("/?animal=whaledolphin", Status(404)),
                get("/", Status(404)),
                get("/path1?animal=whale", backend("infra-backend-v1")),
                (
                    Method::GET,
                    "/?animal=whale",
                    &[("version", "one")],
                    backend("infra-backend-v2"),
                ),
                (
                    Method::GET,
                    "/path2?animal=whale",
                    &[("version", "two")],
                    backend("infra-backend-v3"),
                ),
                get("/path3?animal=shark", backend("infra-backend-v1")),
                (
                    Method::GET,
                    "/path4?animal=kraken",
                    &[("version", "three")],
                    backend("infra-backend-v1"),
                ),
                get("/?animal=shark", Status(404)),
                get("/path4?animal=kraken", Status(404)),
                get("/path5?animal=hydra", backend("infra-backend-v1")),
                (
                    Method::GET,
                    "/?animal=hydra",
                    &[("version", "four")],
                    backend("infra-backend-v3"),
                ),
            ],
        ),
        Case::new(
            "httproute-method-matching.yaml",
            vec![
                (Method::POST, "/", &[], backend("infra-backend-v1")),
                (Method::GET, "/", &[], backend("infra-backend-v2")),
                (Method::HEAD, "/", &[], Status(404)),
            ],
        ),
        Case::new(
            "httproute-matching-across-routes.yaml",
            vec![
                at("example.com", "/", backend("infra-backend-v1")),
                at("example.com", "/example", backend("infra-backend-v1")),
                at("example.net", "/example", backend("infra-backend-v1")),
                (
                    Method::GET,
                    "/example",
                    &[("Host", "example.com"), ("Version", "one")],
                    backend("infra-backend-v1"),
                ),
                at("example.com", "/v2", backend("infra-backend-v2")),
                at("example.net", "/v2", backend("infra-backend-v1")),
                at("example.com", "/v2/example", backend("infra-backend-v2")),
                (
                    Method::GET,
                    "/",
                    &[("Host", "example.com"), ("Version", "two")],
                    backend("infra-backend-v2"),
                ),
            ],
        ),
        Case::new(
            "httproute-request-header-modifier.yaml",
            vec![
                (
                    Method::GET,
                    "/set",
                    &[("Some-Other-Header", "val")],
                    Backend(
                        "infra-backend-v1",
                        Some("/set"),
                        &[
                            ("Some-Other-Header", "val"),
                            ("X-Header-Set", "set-overwrites-values"),
                        ],
                        &[],
                    ),
                ),
                (
                    Method::GET,
                    "/set",
                    &[
                        ("Some-Other-Header", "val"),
                        ("X-Header-Set", "some-other-value"),
                    ],
                    Backend(
                        "infra-backend-v1",
                        Some("/set"),
                        &[
                            ("Some-Other-Header", "val"),
                            ("X-Header-Set", "set-overwrites-values"),
                        ],
                        &[],
                    ),
                ),
                (
                    Method::GET,
                    "/add",
                    &[("Some-Other-Header", "val")],
                    Backend(
                        "infra-backend-v1",
                        Some("/add"),
                        &[
                            ("Some-Other-Header", "val"),
                            ("X-Header-Add", "add-appends-values"),
                        ],
                        &[],
                    ),
                ),
                (
                    Method::GET,
                    "/add",
                    &[
                        ("Some-Other-Header", "val"),
                        ("X-Header-Add", "some-other-value"),
                    ],
                    Backend(
                        "infra-backend-v1",
                        Some("/add"),
                        &[
                            ("Some-Other-Header", "val"),
                            ("X-Header-Add", "some-other-value,add-appends-values"),
                        ],
                        &[],
                    ),
                ),
                (
                    Method::GET,
                    "/remove",
                    &[("X-Header-Remove", "val")],
                    Backend(
                        "infra-backend-v1",
                        Some("/remove"),
                        &[],
                        &["X-Header-Remove"],
                    ),
                ),
                (
                    Method::GET,
                    "/multiple",
                    &[
                        ("X-Header-Set-2", "set-val-2"),
                        ("X-Header-Add-2", "add-val-2"),
                        ("X-Header-Remove-2", "remove-val-2"),
                        ("Another-Header", "another-header-val"),
                    ],
                    Backend(
                        "infra-backend-v1",
                        Some("/multiple"),
                        &[
                            ("X-Header-Set-1", "header-set-1"),
                            ("X-Header-Set-2", "header-set-2"),
                            ("X-Header-Add-1", "header-add-1"),
                            ("X-Header-Add-2", "add-val-2,header-add-2"),
                            ("X-Header-Add-3", "header-add-3"),
                            ("Another-Header", "another-header-val"),
                        ],
                        &["X-Header-Remove-1", "X-Header-Remove-2"],
                    ),
                ),
                (
                    Method::GET,
                    "/case-insensitivity",
                    &[
                        ("x-header-set", "original-val-set"),
                        ("x-header-add", "original-val-add"),
                        ("x-header-remove", "original-val-remove"),
                        ("Another-Header", "another-header-val"),
                    ],
                    Backend(
                        "infra-backend-v1",
                        Some("/case-insensitivity"),
                        &[
                            ("X-Header-Set", "header-set"),
                            ("X-Header-Add", "original-val-add,header-add"),
                            ("Another-Header", "another-header-val"),
                        ],
                        &["x-header-remove"],
                    ),
                ),
            ],
        ),
        Case::new(
            "httproute-rewrite-path.yaml",
            vec![
                get(
                    "/prefix/one/two",
                    Backend("infra-backend-v1", Some("/one/two"), &[], &[]),
                ),
                get(
                    "/strip-prefix/three",
                    Backend("infra-backend-v1", Some("/three"), &[], &[]),
                ),
                get(
                    "/strip-prefix",
                    Backend("infra-backend-v1", Some("/"), &[], &[]),
                ),
                get(
                    "/full/one/two",
                    Backend("infra-backend-v1", Some("/one"), &[], &[]),
                ),
                (
                    Method::GET,
                    "/full/rewrite-path-and-modify-headers/test",
                    &[
                        ("X-Header-Remove", "remove-val"),
                        ("X-Header-Add-Append", "append-val-1"),
                        ("X-Header-Set", "set-val"),
                    ],
                    Backend(
                        "infra-backend-v1",
                        Some("/test"),
                        &[
                            ("X-Header-Add", "header-val-1"),
                            ("X-Header-Add-Append", "append-val-1,header-val-2"),
                            ("X-Header-Set", "set-overwrites-values"),
                        ],
                        &["X-Header-Remove"],
                    ),
                ),
                (
                    Method::GET,
                    "/prefix/rewrite-path-and-modify-headers/one",
                    &[
                        ("X-Header-Remove", "remove-val"),
                        ("X-Header-Add-Append", "append-val-1"),
                        ("X-Header-Set", "set-val"),
                    ],
                    Backend(
                        "infra-backend-v1",
                        Some("/prefix/one"),
                        &[
                            ("X-Header-Add", "header-val-1"),
                            ("X-Header-Add-Append", "append-val-1,header-val-2"),
                            ("X-Header-Set", "set-overwrites-values"),
                        ],
                        &["X-Header-Remove"],
                    ),
                ),
            ],
        ),
        Case::new(
            "httproute-invalid-nonexistent-backendref.yaml",
            vec![get("/", Status(500))],
        ),
        Case::new(
            "httproute-invalid-cross-namespace-backend-ref.yaml",
            vec![get("/", Status(500))],
        ),
        Case::new(
            "httproute-reference-grant.yaml",
            vec![get("/", backend("web-backend"))],
        ),
        Case::new(
            "httproute-invalid-backendref-unknown-kind.yaml",
            vec![get("/v2", Status(500))],
        ),
        Case::new(
            "httproute-invalid-reference-grant.yaml",
            vec![get("/", Status(500))],
        ),
        Case::new(
            "httproute-omitted-backendrefs.yaml",
            vec![
                get("/forward", backend("infra-backend-v1")),
                get("/omitted-no-forward", Status(500)),
                get("/empty-no-forward", Status(500)),
            ],
        ),
        Case {
            manifest: "httproute-cross-namespace.yaml",
            gateway: Some("backend-namespaces"),
            requests: vec![get("/", backend("web-backend"))],
        },
        Case::new(
            "httproute-path-match-order.yaml",
            vec![
                get("/match/exact/one", backend("infra-backend-v3")),
                get("/match/exact", backend("infra-backend-v2")),
                get("/match", backend("infra-backend-v1")),
                get("/match/prefix/one/any", backend("infra-backend-v2")),
                get("/match/prefix/any", backend("infra-backend-v1")),
                get("/match/any", backend("infra-backend-v3")),
            ],
        ),
        Case::new(
            "httproute-redirect-host-and-status.yaml",
            vec![
                get(
                    "/hostname-redirect",
                    Redirect(302, Some("example.org"), "/hostname-redirect"),
                ),
                get(
                    "/host-and-status",
                    Redirect(301, Some("example.org"), "/host-and-status"),
                ),
            ],
        ),
        // Extended: HTTPRoutePathRedirect, but for its two prefixes replaced on the request's
        // host (/original-prefix/lemon, /path-and-status): their `Location` is a path alone
        // (redirect's regex_uri takes no `$host`), where the suite wants the scheme too.
        Case::new(
            "httproute-redirect-path.yaml",
            vec![
                get(
                    "/full/path/original",
                    Redirect(302, None, "/full-path-replacement"),
                ),
                get(
                    "/path-and-host",
                    Redirect(302, Some("example.org"), "/replacement-prefix"),
                ),
                get(
                    "/full-path-and-host",
                    Redirect(302, Some("example.org"), "/replacement-full"),
                ),
                get(
                    "/full-path-and-status",
                    Redirect(301, None, "/replacement-full"),
                ),
            ],
        ),
        // Extended: HTTPRoute303/307/308RedirectStatusCode (the suite sends a POST).
        Case::new(
            "httproute-303-redirect.yaml",
            vec![post_redirected("/see-other", 303)],
        ),
        Case::new(
            "httproute-307-redirect.yaml",
            vec![post_redirected("/temporary", 307)],
        ),
        Case::new(
            "httproute-308-redirect.yaml",
            vec![post_redirected("/permanent", 308)],
        ),
        Case {
            manifest: "httproute-listener-hostname-matching.yaml",
            gateway: Some("httproute-listener-hostname-matching"),
            requests: vec![
                at("bar.com", "/", backend("infra-backend-v1")),
                at("foo.bar.com", "/", backend("infra-backend-v2")),
                at("baz.bar.com", "/", backend("infra-backend-v3")),
                at("boo.bar.com", "/", backend("infra-backend-v3")),
                at(
                    "multiple.prefixes.bar.com",
                    "/",
                    backend("infra-backend-v3"),
                ),
                at(
                    "multiple.prefixes.foo.com",
                    "/",
                    backend("infra-backend-v3"),
                ),
                at("foo.com", "/", Status(404)),
                at("no.matching.host", "/", Status(404)),
            ],
        },
        Case {
            manifest: "httproute-hostname-intersection.yaml",
            gateway: Some("httproute-hostname-intersection"),
            requests: vec![
                at("very.specific.com", "/s1", backend("infra-backend-v1")),
                at("very.specific.com:1234", "/s1", backend("infra-backend-v1")),
                at("non.matching.com", "/s1", Status(404)),
                at("foo.nonmatchingwildcard.io", "/s1", Status(404)),
                at("foo.wildcard.io", "/s1", Status(404)),
                at("very.specific.com", "/non-matching-prefix", Status(404)),
                at("foo.wildcard.io", "/s2", backend("infra-backend-v2")),
                at("bar.wildcard.io", "/s2", backend("infra-backend-v2")),
                at("foo.bar.wildcard.io", "/s2", backend("infra-backend-v2")),
                at("non.matching.com", "/s2", Status(404)),
                at("wildcard.io", "/s2", Status(404)),
                at("very.specific.com", "/s2", Status(404)),
                at("foo.wildcard.io", "/non-matching-prefix", Status(404)),
                at("very.specific.com", "/s3", backend("infra-backend-v3")),
                at("non.matching.com", "/s3", Status(404)),
                at("foo.specific.com", "/s3", Status(404)),
                at("foo.wildcard.io", "/s3", Status(404)),
                at("very.specific.com", "/non-matching-prefix", Status(404)),
                at("foo.anotherwildcard.io", "/s4", backend("infra-backend-v1")),
                at("bar.anotherwildcard.io", "/s4", backend("infra-backend-v1")),
                at(
                    "foo.bar.anotherwildcard.io",
                    "/s4",
                    backend("infra-backend-v1"),
                ),
                at("anotherwildcard.io", "/s4", Status(404)),
                at("foo.wildcard.io", "/s4", Status(404)),
                at("very.specific.com", "/s4", Status(404)),
                at(
                    "foo.anotherwildcard.io",
                    "/non-matching-prefix",
                    Status(404),
                ),
            ],
        },
        Case::new(
            "httproute-service-types.yaml",
            vec![
                get("/manual-endpointslices", backend("infra-backend-v1")),
                get("/headless", backend("infra-backend-v1")),
                get(
                    "/headless-manual-endpointslices",
                    backend("infra-backend-v1"),
                ),
            ],
        ),
        // One route shared by two Gateways, and one of each's own: each Gateway translated.
        Case::new(
            "httproute-multiple-gateways.yaml",
            vec![
                get("/shared", backend("infra-backend-v1")),
                get("/", backend("infra-backend-v2")),
            ],
        ),
        Case {
            manifest: "httproute-multiple-gateways.yaml",
            gateway: Some("all-namespaces"),
            requests: vec![
                get("/shared", backend("infra-backend-v1")),
                get("/", backend("infra-backend-v3")),
            ],
        },
        Case::new(
            "httproute-partially-invalid-via-invalid-reference-grant.yaml",
            vec![get("/v2", Status(500)), get("/", backend("app-backend-v1"))],
        ),
    ]
}

const BACKENDS: [(&str, &str); 6] = [
    (INFRA, "infra-backend-v1"),
    (INFRA, "infra-backend-v2"),
    (INFRA, "infra-backend-v3"),
    ("gateway-conformance-web-backend", "web-backend"),
    ("gateway-conformance-app-backend", "app-backend-v1"),
    // In the map, so that a 500 for it is the ReferenceGrant's doing.
    ("gateway-conformance-app-backend", "app-backend-v2"),
];

/// Services whose endpoints are another's pods (the service-types case: EndpointSlices made by
/// hand, headless Services): what a controller reads from their EndpointSlices, here the
/// addresses of the backend named second.
const ALIASES: [(&str, &str); 3] = [
    ("manual-endpointslices", "infra-backend-v1"),
    ("headless", "infra-backend-v1"),
    ("headless-manual-endpointslices", "infra-backend-v1"),
];

/// `sluice import gateway-api` on the base manifests and one case's.
fn translate(case: &str, backends: &Path) -> String {
    let text = std::fs::read_to_string(suite().join("tests").join(case)).unwrap();
    translate_text(case, &text, backends)
}

/// `translate` for manifests given as text.
fn translate_text(case: &str, text: &str, backends: &Path) -> String {
    translate_for(case, text, backends, &format!("{INFRA}/same-namespace"))
}

/// `translate_text` for the Gateway `gateway` (`namespace/name`).
fn translate_for(case: &str, text: &str, backends: &Path, gateway: &str) -> String {
    // The gateway's listener is the test's: the translation's `listen` (port 80) goes.
    let mut doc = import(case, text, backends, gateway).0;
    doc.as_object_mut().unwrap().remove("listen");
    yaml_serde::to_string(&doc).unwrap()
}

/// `sluice import gateway-api` of the base manifests and `text` for the Gateway `gateway`:
/// the configuration whole, and what was said on stderr. Panics when the import fails.
fn import(case: &str, text: &str, backends: &Path, gateway: &str) -> (serde_json::Value, String) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gwapi-{}", std::process::id()))
        .join(case.trim_end_matches(".yaml"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(suite().join("base/manifests.yaml"), dir.join("base.yaml")).unwrap();
    std::fs::write(dir.join("case.yaml"), text).unwrap();
    let out = Command::new(BIN)
        .args(["import", "gateway-api"])
        .arg(&dir)
        .arg("--backends")
        .arg(backends)
        .args(["--gateway", gateway])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{case}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    (
        yaml_serde::from_str(&yaml).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[tokio::test]
async fn core_httproute_conformance_cases_get_the_answers_the_suite_expects() {
    let mut origins = BTreeMap::new();
    let mut map = String::new();
    for (ns, name) in BACKENDS {
        let o = TestOrigin::http1().route("/", name).run().await;
        map.push_str(&format!("\"{ns}/{name}:8080\": \"{}\"\n", o.node()));
        origins.insert(name, o);
    }
    for (alias, of) in ALIASES {
        map.push_str(&format!(
            "\"{INFRA}/{alias}:8080\": \"{}\"\n",
            origins[of].node()
        ));
    }
    let backends = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gwapi-backends-{}.yaml", std::process::id()));
    std::fs::write(&backends, map).unwrap();
    let mut failures = Vec::new();
    let mut sent = 0;
    for case in cases() {
        let text = std::fs::read_to_string(suite().join("tests").join(case.manifest)).unwrap();
        let config = translate_for(
            case.manifest,
            &text,
            &backends,
            &format!("{INFRA}/{}", case.gateway.unwrap_or("same-namespace")),
        );
        let gw = Gateway::start(&config);
        let cl = gw.client();
        for (i, (method, path, headers, expect)) in case.requests.iter().enumerate() {
            sent += 1;
            let before: BTreeMap<&str, usize> = origins
                .iter()
                .map(|(n, o)| (*n, o.requests().len()))
                .collect();
            let mut h: Vec<(&str, &str)> = headers.to_vec();
            if !h.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
                h.push(("Host", "gateway.example"));
            }
            let r = cl.send(method.clone(), path, &h, "").await;
            let place = format!("{}[{i}] {method} {path} {headers:?}", case.manifest);
            match expect {
                Status(code) => {
                    if r.status.as_u16() != *code {
                        failures.push(format!("{place}: {} where {code} was expected", r.status));
                    }
                }
                Redirect(code, want_host, want_path) => {
                    let location = r.header("location").unwrap_or_default();
                    // scheme://host[:port]/path
                    let (host, rest) = location
                        .split_once("://")
                        .map(|(_, after)| after.split_at(after.find('/').unwrap_or(after.len())))
                        .unwrap_or(("", location));
                    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
                    let want_host = want_host.unwrap_or("gateway.example");
                    if r.status.as_u16() != *code || host != want_host || rest != *want_path {
                        failures.push(format!(
                            "{place}: {} to {location:?} where {code} to {want_host}{want_path} was expected",
                            r.status
                        ));
                    }
                }
                Backend(name, want_path, want_headers, absent) => {
                    if r.status != 200 || r.text() != *name {
                        failures.push(format!(
                            "{place}: {} {:?} where {name} was expected",
                            r.status,
                            r.text()
                        ));
                        continue;
                    }
                    let o = &origins[name];
                    assert_eq!(o.requests().len(), before[name] + 1, "{place}");
                    let seen = o.last();
                    let want = want_path.unwrap_or(path);
                    if seen.uri != want {
                        failures.push(format!(
                            "{place}: the backend got {} where {want} was expected",
                            seen.uri
                        ));
                    }
                    for (k, v) in *want_headers {
                        let got = seen.header_all(k).join(",");
                        if got != *v {
                            failures
                                .push(format!("{place}: {k}: {got:?} where {v:?} was expected"));
                        }
                    }
                    for k in *absent {
                        if seen.has_header(k) {
                            failures.push(format!("{place}: {k} reached the backend"));
                        }
                    }
                }
            }
        }
        gw.shutdown();
    }
    assert!(sent >= 136, "{sent} requests");
    assert!(
        failures.is_empty(),
        "{} of {sent} requests:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn what_cannot_attach_or_translate_is_said() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gwapi-notes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(suite().join("base/manifests.yaml"), dir.join("base.yaml")).unwrap();
    // A route in another namespace than the Gateway's "Same", and one on an unknown listener.
    std::fs::write(
        dir.join("routes.yaml"),
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: elsewhere, namespace: gateway-conformance-app-backend}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra}]
  rules: [{backendRefs: [{name: app-backend-v1, port: 8080}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wrong-section, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, sectionName: nope}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
"#,
    )
    .unwrap();
    let backends = dir.join("backends.yaml");
    std::fs::write(&backends, "{}\n").unwrap();
    let out = Command::new(BIN)
        .args(["import", "gateway-api"])
        .arg(&dir)
        .arg("--backends")
        .arg(&backends)
        .args(["--gateway", "gateway-conformance-infra/same-namespace"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for line in [
        "HTTPRoute gateway-conformance-app-backend/elsewhere: not accepted by Gateway gateway-conformance-infra/same-namespace",
        "HTTPRoute gateway-conformance-infra/wrong-section: not accepted",
    ] {
        assert!(err.contains(line), "no {line:?} in:\n{err}");
    }
    // Several Gateways and none named: refused, with the way out.
    let out = Command::new(BIN)
        .args(["import", "gateway-api"])
        .arg(&dir)
        .arg("--backends")
        .arg(&backends)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--gateway NAMESPACE/NAME"));
}

/// GRPCRoute (the suite's exact-method case): a method is the path `/service/method`, POST,
/// to an upstream spoken to in gRPC (HTTP/2).
#[test]
fn a_grpcroute_method_is_an_exact_path_to_a_grpc_upstream() {
    let backends = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gwapi-grpc-{}.yaml", std::process::id()));
    std::fs::write(
        &backends,
        format!(
            "\"{INFRA}/grpc-infra-backend-v1:8080\": 127.0.0.1:50051\n\"{INFRA}/grpc-infra-backend-v2:8080\": [127.0.0.1:50052, 127.0.0.1:50053]\n"
        ),
    )
    .unwrap();
    let yaml = translate("grpcroute-exact-method-matching.yaml", &backends);
    let doc: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
    let routes = doc["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 2, "{yaml}");
    let echo = &routes[0];
    assert_eq!(
        echo["uris"],
        serde_json::json!(["/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/Echo"])
    );
    assert_eq!(echo["methods"], serde_json::json!(["POST"]));
    assert_eq!(echo["upstream"]["scheme"], "grpc");
    assert_eq!(
        echo["upstream"]["nodes"],
        serde_json::json!({"127.0.0.1:50051": 1})
    );
    assert_eq!(
        routes[1]["uris"],
        serde_json::json!(["/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/EchoTwo"])
    );
    assert_eq!(
        routes[1]["upstream"]["nodes"],
        serde_json::json!({"127.0.0.1:50052": 1, "127.0.0.1:50053": 1}),
        "a Service's every address"
    );
}

/// A rule whose backends are partly invalid: their share of the weight gets 500s (the
/// Gateway API's rule), the rest goes to the valid ones.
#[test]
fn an_invalid_backends_share_of_the_weight_gets_500() {
    let backends = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gwapi-partial-{}.yaml", std::process::id()));
    std::fs::write(
        &backends,
        format!("\"{INFRA}/infra-backend-v1:8080\": 127.0.0.1:50061\n"),
    )
    .unwrap();
    let yaml = translate_text(
        "partial.yaml",
        &format!(
            r#"apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: partial, namespace: {INFRA}}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - backendRefs:
    - {{name: infra-backend-v1, port: 8080, weight: 3}}
    - {{name: not-in-the-map, port: 8080, weight: 1}}
"#
        ),
        &backends,
    );
    let doc: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
    let route = &doc["routes"][0];
    assert_eq!(
        route["upstream"]["nodes"],
        serde_json::json!({"127.0.0.1:50061": 3}),
        "{yaml}"
    );
    let abort = &route["plugins"]["fault-injection"]["abort"];
    assert_eq!(abort["http_status"], 500, "{yaml}");
    assert_eq!(abort["percentage"], 25.0, "{yaml}");
}

/// TLSRoute (the suite's simple same-namespace case, its Gateway a TLS listener in Passthrough
/// mode): a connection whose TLS server name is the route's hostname reaches its backend
/// through the gateway without TLS being terminated there (the client checks the backend's own
/// certificate, and reads the backend's name from it); a name the route does not have is not
/// taken anywhere.
#[tokio::test]
async fn a_tlsroute_passes_tls_through_by_server_name() {
    let pki = Pki::new("gwapi-tls");
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config(&["abc.example.com"]));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let _ = tls.write_all(b"tcp-backend").await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    let backends = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gwapi-tls-{}.yaml", std::process::id()));
    std::fs::write(
        &backends,
        format!("\"{INFRA}/tcp-backend:8443\": \"{backend}\"\n"),
    )
    .unwrap();
    let case = "tlsroute-simple-same-namespace.yaml";
    let text = std::fs::read_to_string(suite().join("tests").join(case)).unwrap();
    let yaml = translate_for(case, &text, &backends, &format!("{INFRA}/gateway-tlsroute"));
    let mut doc: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
    let streams = doc["stream_routes"].as_array_mut().unwrap();
    assert_eq!(streams.len(), 1, "{yaml}");
    assert_eq!(streams[0]["sni"], "abc.example.com", "{yaml}");
    assert_eq!(
        streams[0]["listen"], "0.0.0.0:443",
        "the listener's port: {yaml}"
    );
    assert_eq!(
        streams[0]["upstream"]["nodes"],
        serde_json::json!({ (backend.to_string()): 1 })
    );
    // The test's own port instead of 443.
    let port = common::free_port();
    streams[0]["listen"] = serde_json::json!(format!("127.0.0.1:{port}"));
    let _gw = Gateway::start(&yaml_serde::to_string(&doc).unwrap());
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let mut s = tls_connect(&pki, addr, "abc.example.com").await.unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).await.unwrap();
    assert_eq!(got, "tcp-backend");
    // Another name of the listener's wildcard, not the route's: no backend.
    let other = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tls_connect(&pki, addr, "xyz.example.com"),
    )
    .await
    .unwrap();
    assert!(other.is_err(), "xyz.example.com was taken somewhere");
}

/// The suite's weight case: 500 requests, each backend's share within 5 points of its weight
/// (70, 30, 0), as its `TestWeightedDistribution` checks.
#[tokio::test]
async fn backend_weights_spread_the_requests_as_the_suite_expects() {
    let mut map = String::new();
    let mut origins = Vec::new();
    for name in ["infra-backend-v1", "infra-backend-v2", "infra-backend-v3"] {
        let o = TestOrigin::http1().route("/", name).run().await;
        map.push_str(&format!("\"{INFRA}/{name}:8080\": \"{}\"\n", o.node()));
        origins.push(o);
    }
    let backends = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gwapi-weight-{}.yaml", std::process::id()));
    std::fs::write(&backends, map).unwrap();
    let gw = Gateway::start(&translate("httproute-weight.yaml", &backends));
    let cl = gw.client();
    let mut seen: BTreeMap<String, f64> = BTreeMap::new();
    for _ in 0..500 {
        let r = cl
            .send(Method::GET, "/", &[("Host", "gateway.example")], "")
            .await;
        assert_eq!(r.status, 200);
        *seen.entry(r.text()).or_default() += 1.0;
    }
    for (name, weight) in [
        ("infra-backend-v1", 0.7),
        ("infra-backend-v2", 0.3),
        ("infra-backend-v3", 0.0),
    ] {
        let share = seen.get(name).copied().unwrap_or(0.0) / 500.0;
        assert!(
            (share - weight).abs() <= 0.05,
            "{name}: {share} of the requests, weight {weight}: {seen:?}"
        );
    }
}

/// A Secret as the suite makes one (`MustCreateSelfSignedCertSecret`): of type
/// `kubernetes.io/tls`, the certificate and key in `data`, base64.
fn tls_secret(ns: &str, name: &str, cert: &str, key: &str) -> String {
    use base64::Engine as _;
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    format!(
        "\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: kubernetes.io/tls\ndata:\n  tls.crt: {}\n  tls.key: {}\n",
        b64(cert),
        b64(key)
    )
}

/// The suite's HTTPS listener case (`httproute-https-listener`, its Gateway four HTTPS
/// listeners on 443 sharing one Secret): the Secret's certificate becomes one ssl, the default
/// one (a listener has no hostname) and the others' hostnames its names; port 443 terminates
/// TLS; and the requests the suite sends, by curl with the server name as the Host, get what
/// it expects.
#[tokio::test]
async fn an_https_listener_serves_its_routes_with_its_secrets_certificate() {
    let pki = Pki::new("gwapi-https");
    // The suite's certificate names `*.org`, which curl (OpenSSL) does not take for a
    // wildcard: the names the requests use instead.
    let (cert, key) = pki.issue(&[
        "example.org",
        "second-example.org",
        "unknown-example.org",
        "*.wildcard.org",
    ]);
    let mut origins = BTreeMap::new();
    let mut map = String::new();
    for name in ["infra-backend-v1", "infra-backend-v2"] {
        let o = TestOrigin::http1().route("/", name).run().await;
        map.push_str(&format!("\"{INFRA}/{name}:8080\": \"{}\"\n", o.node()));
        origins.insert(name, o);
    }
    let backends = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gwapi-https-{}.yaml", std::process::id()));
    std::fs::write(&backends, map).unwrap();
    let case = "httproute-https-listener.yaml";
    let text = std::fs::read_to_string(suite().join("tests").join(case)).unwrap()
        + &tls_secret(INFRA, "tls-validity-checks-certificate", &cert, &key);
    let (mut doc, notes) = import(
        case,
        &text,
        &backends,
        &format!("{INFRA}/same-namespace-with-https-listener"),
    );
    assert_eq!(
        doc["listen"],
        serde_json::json!([{"addr": "0.0.0.0:443", "tls": true, "http2": true}]),
        "{doc:#}"
    );
    let ssls = doc["ssls"].as_array().unwrap();
    assert_eq!(ssls.len(), 1, "one Secret, one ssl: {doc:#}");
    assert_eq!(ssls[0]["default"], true, "{doc:#}");
    assert_eq!(
        ssls[0]["snis"],
        serde_json::json!([
            "second-example.org",
            "*.wildcard.org",
            "fourth-example.wildcard.org"
        ])
    );
    assert_eq!(ssls[0]["cert"], cert.as_str());
    assert!(!notes.contains("HTTPS"), "{notes}");
    // One port: no route has a port condition.
    for r in doc["routes"].as_array().unwrap() {
        assert!(r.get("vars").is_none(), "{r}");
    }
    let port = common::free_port();
    doc["listen"] =
        serde_json::json!([{"addr": format!("127.0.0.1:{port}"), "tls": true, "http2": true}]);
    let _gw = Gateway::start(&yaml_serde::to_string(&doc).unwrap());
    let ca = pki.ca_file();
    for (host, want) in [
        ("example.org", "infra-backend-v1\n1.1 200"),
        ("unknown-example.org", "\n1.1 404"),
        ("second-example.org", "infra-backend-v2\n1.1 200"),
    ] {
        let (code, out) = common::pki::curl(host, port, "/", &ca, &["--http1.1"]).await;
        assert_eq!(code, 0, "{host}: {out}");
        assert!(
            out.ends_with(want),
            "{host}: {out:?} where {want:?} was expected"
        );
    }
    // HTTP/2 by ALPN, as a GRPCRoute's calls need.
    let (code, out) = common::pki::curl("example.org", port, "/", &ca, &["--http2"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("infra-backend-v1\n2 200"), "{out:?}");
}

/// Listeners whose certificate cannot be had (the suite's invalid TLS configuration and
/// Secret reference cases, and a key of another certificate) are left out, each with its
/// reason, and the import still succeeds; a Secret in another namespace is served when a
/// ReferenceGrant allows it.
#[test]
fn https_listeners_without_a_usable_certificate_are_left_out_and_said() {
    let backends = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("gwapi-tls-notes-{}.yaml", std::process::id()));
    std::fs::write(&backends, "{}\n").unwrap();
    let pki = Pki::new("gwapi-tls-notes");
    let (cert, key) = pki.issue(&["example.org"]);
    let (_, other_key) = pki.issue(&["example.org"]);
    let read = |case: &str| std::fs::read_to_string(suite().join("tests").join(case)).unwrap();
    let invalid = read("gateway-invalid-tls-configuration.yaml");
    for (gateway, why) in [
        (
            "gateway-certificate-nonexistent-secret",
            "no Secret gateway-conformance-infra/nonexistent-certificate among the resources",
        ),
        (
            "gateway-certificate-unsupported-group",
            "a certificate of kind wrong.group.company.io/Secret is not supported",
        ),
        (
            "gateway-certificate-unsupported-kind",
            "a certificate of kind /WrongKind is not supported",
        ),
        (
            "gateway-certificate-malformed-secret",
            "Secret gateway-conformance-infra/malformed-certificate: tls.crt is not PEM",
        ),
    ] {
        let (doc, notes) = import(
            "gateway-invalid-tls-configuration.yaml",
            &invalid,
            &backends,
            &format!("{INFRA}/{gateway}"),
        );
        let want = format!("Gateway {INFRA}/{gateway} listener https: {why}");
        assert!(notes.contains(&want), "{want:?} not in:\n{notes}");
        assert!(doc.get("ssls").is_none(), "{doc:#}");
    }
    // A key that does not go with the certificate: Sluice's own check, named.
    let (doc, notes) = import(
        "mismatched-key.yaml",
        &tls_secret(INFRA, "tls-validity-checks-certificate", &cert, &other_key),
        &backends,
        &format!("{INFRA}/same-namespace-with-https-listener"),
    );
    assert!(doc.get("ssls").is_none(), "{doc:#}");
    assert!(
        notes.contains(&format!("Gateway {INFRA}/same-namespace-with-https-listener listener https: Secret {INFRA}/tls-validity-checks-certificate: ssls[0].key: does not go with the certificate")),
        "{notes}"
    );
    // Across namespaces: refused without a ReferenceGrant, served with one.
    let secret = tls_secret(
        "gateway-conformance-web-backend",
        "certificate",
        &cert,
        &key,
    );
    let (doc, notes) = import(
        "gateway-secret-missing-reference-grant.yaml",
        &(read("gateway-secret-missing-reference-grant.yaml") + &secret),
        &backends,
        &format!("{INFRA}/gateway-secret-missing-reference-grant"),
    );
    assert!(
        notes.contains("Secret gateway-conformance-web-backend/certificate is in another namespace and no ReferenceGrant allows it"),
        "{notes}"
    );
    assert!(doc.get("ssls").is_none());
    let (doc, notes) = import(
        "gateway-secret-reference-grant-specific.yaml",
        &(read("gateway-secret-reference-grant-specific.yaml") + &secret),
        &backends,
        &format!("{INFRA}/gateway-secret-reference-grant-specific"),
    );
    assert_eq!(doc["ssls"][0]["default"], true, "{doc:#}\n{notes}");
    assert_eq!(doc["ssls"][0]["key"], key.as_str());
}
