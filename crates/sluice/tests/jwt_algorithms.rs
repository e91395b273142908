//! jwt-auth with each of APISIX's thirteen algorithms through a live gateway. The keys and the
//! tokens are made by Python's `cryptography` and `hmac` (not by the code under test): a token
//! signed by the consumer's key passes, one with a changed signature, another `alg` in its
//! header, another key or a passed `exp` does not.

#![allow(clippy::unwrap_used)]

use serde_json::Value;
use sluice_testkit::{Gateway, TestOrigin};

const ALGORITHMS: [&str; 13] = [
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
    "ES384", "ES512", "EdDSA",
];

/// For each algorithm: the consumer's `public_key` (or secret), a valid token, an expired one,
/// one signed by another key of the same kind, and the same payload relabelled as another
/// algorithm of the family (keeping the signature). Made by Python.
fn python_tokens() -> Value {
    let script = r#"
import base64, hashlib, hmac, json, sys, time
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

def b64(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
H = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
HL = {"256": hashlib.sha256, "384": hashlib.sha384, "512": hashlib.sha512}
CURVE = {"256": (ec.SECP256R1, 32), "384": (ec.SECP384R1, 48), "512": (ec.SECP521R1, 66)}

def keypair(alg):
    kind, bits = alg[:2], alg[2:]
    if kind == "HS":
        secret = "secret-" + alg
        return secret, secret
    if kind in ("RS", "PS"):
        k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif kind == "ES":
        k = ec.generate_private_key(CURVE[bits][0]())
    else:
        k = ed25519.Ed25519PrivateKey.generate()
    pem = k.public_key().public_bytes(serialization.Encoding.PEM,
        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return k, pem

def sign(alg, key, msg):
    kind, bits = alg[:2], alg[2:]
    if kind == "HS":
        return hmac.new(key.encode(), msg, HL[bits]).digest()
    if kind == "RS":
        return key.sign(msg, padding.PKCS1v15(), H[bits]())
    if kind == "PS":
        h = H[bits]()
        return key.sign(msg, padding.PSS(mgf=padding.MGF1(h), salt_length=h.digest_size), h)
    if kind == "ES":
        r, s = decode_dss_signature(key.sign(msg, ec.ECDSA(H[bits]())))
        n = CURVE[bits][1]
        return r.to_bytes(n, "big") + s.to_bytes(n, "big")
    return key.sign(msg)

def token(alg, key, claims, label=None):
    header = b64(json.dumps({"alg": label or alg, "typ": "JWT"}).encode())
    payload = b64(json.dumps(claims).encode())
    msg = (header + "." + payload).encode()
    return header + "." + payload + "." + b64(sign(alg, key, msg))

out = {}
now = int(time.time())
for alg in sys.argv[1:]:
    key, public = keypair(alg)
    other, _ = keypair(alg) if alg[:2] != "HS" else ("another-secret", None)
    claims = {"key": "user-" + alg, "exp": now + 600}
    sibling = {"HS": "HS256", "RS": "RS256", "PS": "PS256", "ES": "ES256", "Ed": "HS256"}[alg[:2]]
    if sibling == alg:
        sibling = alg[:2] + "384"
    out[alg] = {
        "public": public,
        "valid": token(alg, key, claims),
        "expired": token(alg, key, {"key": "user-" + alg, "exp": now - 60}),
        "other_key": token(alg, other, claims),
        "relabelled": token(alg, key, claims, label=sibling),
    }
print(json.dumps(out))
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(ALGORITHMS)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn every_algorithm_apisix_names_verifies_tokens_python_signed() {
    let tokens = python_tokens();
    let origin = TestOrigin::http1().route("/", "ok").run().await;
    let mut consumers = String::new();
    for alg in ALGORITHMS {
        let t = &tokens[alg];
        let key = if alg.starts_with("HS") {
            format!("secret: {}", t["public"])
        } else {
            format!("public_key: {}", t["public"])
        };
        consumers.push_str(&format!(
            "  - username: u_{alg}\n    plugins: {{jwt-auth: {{key: user-{alg}, algorithm: {alg}, {key}}}}}\n"
        ));
    }
    let gw = Gateway::start(&format!(
        "upstreams:\n  - {{id: o, nodes: {{\"{o}\": 1}}}}\nroutes:\n  - {{uri: /a, upstream_id: o, plugins: {{jwt-auth: {{}}}}}}\nconsumers:\n{consumers}",
        o = origin.node()
    ));
    let cl = gw.client();
    for alg in ALGORITHMS {
        let t = &tokens[alg];
        let send = |token: &str| {
            let cl = cl.clone();
            let auth = format!("Bearer {token}");
            async move {
                cl.send(hyper::Method::GET, "/a", &[("authorization", &auth)], "")
                    .await
            }
        };
        let valid = t["valid"].as_str().unwrap();
        let r = send(valid).await;
        assert_eq!(r.status, 200, "{alg}: {}", r.text());
        let consumer = format!("u_{alg}");
        assert_eq!(
            origin.last().header("x-consumer-username"),
            Some(consumer.as_str())
        );
        // A changed signature: its first character swapped for another.
        let (message, signature) = valid.rsplit_once('.').unwrap();
        let first = if signature.starts_with('A') { 'B' } else { 'A' };
        let forged = format!("{message}.{first}{}", &signature[1..]);
        // A fourth part: refused before anything is read from it.
        let four = format!("{message}.{message}.{signature}");
        let r = send(&four).await;
        assert_eq!(r.status, 401);
        assert_eq!(r.text().trim_end(), r#"{"message":"JWT token invalid"}"#);
        for (what, token) in [
            ("a changed signature", forged.as_str()),
            ("an expired token", t["expired"].as_str().unwrap()),
            ("another key", t["other_key"].as_str().unwrap()),
            (
                "another alg in the header",
                t["relabelled"].as_str().unwrap(),
            ),
        ] {
            let r = send(token).await;
            assert_eq!(r.status, 401, "{alg} with {what}");
            assert_eq!(
                r.text().trim_end(),
                r#"{"message":"failed to verify jwt"}"#,
                "{alg} with {what}"
            );
        }
    }
    gw.shutdown();
}

#[test]
fn keys_of_the_wrong_kind_are_refused_when_loaded() {
    let tokens = python_tokens();
    let plugins = sluice_plugins::shared();
    let refused = |alg: &str, key_of: &str| {
        let yaml = format!(
            "consumers:\n  - username: u\n    plugins: {{jwt-auth: {{key: k, algorithm: {alg}, public_key: {}}}}}\n",
            tokens[key_of]["public"]
        );
        match sluice_config::load_str_with(&yaml, &*plugins) {
            Ok(_) => panic!("{alg} with a key for {key_of} accepted"),
            Err(e) => e.to_string(),
        }
    };
    let at = "consumers[0].plugins.jwt-auth.public_key";
    // An Ed25519 key of 16 bytes instead of 32 (jsonwebtoken would panic on each token).
    let mut der = vec![
        0x30, 0x1a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x11, 0x00,
    ];
    der.extend([7u8; 16]);
    use base64::Engine as _;
    let short = format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        base64::engine::general_purpose::STANDARD.encode(&der)
    );
    let yaml = format!(
        "consumers:\n  - username: u\n    plugins: {{jwt-auth: {{key: k, algorithm: EdDSA, public_key: {short:?}}}}}\n"
    );
    let e = sluice_config::load_str_with(&yaml, &*plugins)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains(&format!(
            "{at}: invalid PEM public key for EdDSA: not an Ed25519 key"
        )),
        "{e}"
    );
    for (alg, key_of, says) in [
        (
            "ES384",
            "ES256",
            "invalid PEM public key for ES384: not a P-384 key",
        ),
        (
            "ES256",
            "ES512",
            "invalid PEM public key for ES256: not a P-256 key",
        ),
        (
            "ES512",
            "ES384",
            "invalid PEM public key for ES512: not a P-521 key",
        ),
        ("RS256", "EdDSA", "invalid PEM public key for RS256"),
    ] {
        let e = refused(alg, key_of);
        assert!(e.contains(&format!("{at}: {says}")), "{alg}: {e}");
    }
}
