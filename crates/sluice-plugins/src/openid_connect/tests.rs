use sluice_core::Scope;

use super::*;
use crate::tests::{try_build, yaml_value};

const D: &str = "discovery: http://127.0.0.1:1/.well-known/openid-configuration";

fn errors(yaml: &str) -> Vec<String> {
    match try_build("openid-connect", &yaml_value(yaml), &[], Scope::Route) {
        Ok(_) => Vec::new(),
        Err(e) => e,
    }
}

/// What APISIX's check_schema refuses, and what Sluice does not offer, are refused with the
/// field and the reason; APISIX's usual bodies build.
#[test]
fn configurations_are_checked_with_paths() {
    assert!(errors(&format!("{{client_id: c, {D}, bearer_only: true, use_jwks: true}}")).is_empty());
    assert!(errors(&format!("{{client_id: c, client_secret: s, {D}, session: {{secret: 0123456789abcdef}}}}")).is_empty());
    assert!(errors(&format!("{{client_id: c, {D}, use_pkce: true, session: {{secret: 0123456789abcdef}}}}")).is_empty(), "a public client");
    let cases: &[(String, &str)] = &[
        (format!("{{client_id: c, {D}, bearer_only: true}}"), "client_secret: required: the provider's introspection and token endpoints authenticate the client with it"),
        (format!("{{client_id: c, client_secret: s, {D}}}"), "session.secret: required unless bearer_only: the browser's session cookie is encrypted with it (16 characters or more)"),
        (format!("{{client_id: c, client_secret: s, {D}, session: {{secret: short}}}}"), "session.secret: must be 16 characters or more"),
        (format!("{{client_id: c, client_secret: s, {D}, session: {{secret: 0123456789abcdef, storage: redis, redis: {{}}}}}}"), "session.storage: only \"cookie\" is supported by Sluice (the session travels encrypted in the browser's cookie)"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, par: {{enabled: true}}}}"), "par.enabled: pushed authorization requests are not supported by Sluice"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, dpop: {{enabled: true}}}}"), "dpop.enabled: DPoP is not supported by Sluice"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, accept_none_alg: true}}"), "accept_none_alg: unsigned tokens are never accepted by Sluice"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, introspection_endpoint_auth_method: private_key_jwt}}"), "introspection_endpoint_auth_method: \"private_key_jwt\" is not supported by Sluice, expected client_secret_basic or client_secret_post"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, unauth_action: maybe}}"), "unauth_action: unknown action \"maybe\", expected auth, deny or pass"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, public_key: nope}}"), "public_key: not a PEM public key (RSA, EC or Ed25519: -----BEGIN PUBLIC KEY-----)"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, token_signing_alg_values_expected: RS1}}"), "token_signing_alg_values_expected: unknown algorithm \"RS1\", expected RS256, ES256, PS256, EdDSA or another JWS algorithm"),
        ("{client_id: c, client_secret: s, discovery: ftp://x/, bearer_only: true}".into(), "discovery: must be an http:// or https:// URI"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, timeout: 0}}"), "timeout: must be a whole number from 1 to 600 s, got 0"),
        (format!("{{client_id: c, client_secret: s, {D}, session: {{secret: 0123456789abcdef}}, logout_path: out}}"), "logout_path: must be a path starting with /"),
        (format!("{{client_id: c, {D}, bearer_only: true, use_jwks: true, token_signing_alg_values_expected: HS256}}"), "token_signing_alg_values_expected: \"HS256\" is a shared-secret algorithm: tokens are checked with the provider's public keys"),
        (format!("{{client_id: c, {D}, bearer_only: true, use_jwks: true, claim_validator: {{issuer: {{valid_issuers: []}}}}}}"), "claim_validator.issuer.valid_issuers: must name at least one issuer (leave it out to trust the discovery's)"),
        (format!("{{client_id: c, client_secret: s, {D}, bearer_only: true, introspection_addon_headers: [Authorization]}}"), "introspection_addon_headers[0]: \"Authorization\" is set by the gateway on the introspection call"),
    ];
    for (yaml, want) in cases {
        assert_eq!(errors(yaml), [*want], "{yaml}");
    }
}

/// The session cookie opens only with its route's key and only unchanged; a long session is
/// split across cookies that fit a browser's limit.
#[test]
fn sessions_are_sealed() {
    let value = yaml_value("{secret: 0123456789abcdef}");
    fn parts(secret: &Value) -> BrowserParts<'_> {
        BrowserParts {
        session: secret,
        bind: "c\0d".into(),
        redirect_uri: None,
        logout_path: None,
        post_logout_redirect_uri: None,
        scope: "openid".into(),
        pkce: false,
        nonce: false,
        params: None,
        token_basic: true,
        set_id_token: true,
        set_raw_id_token: false,
        set_refresh_token: false,
        }
    }
    let mut v = Validator::new();
    let b = Browser::build(parts(&value), &mut v).unwrap();
    let other_secret = yaml_value("{secret: fedcba9876543210}");
    let other = Browser::build(parts(&other_secret), &mut v).unwrap();
    let sealed = session::seal_for_test(&b, "alice");
    assert!(session::opens(&b, &sealed));
    assert!(!session::opens(&other, &sealed), "another key");
    let mut elsewhere = parts(&value);
    elsewhere.bind = "another-client\0d".into();
    let elsewhere = Browser::build(elsewhere, &mut v).unwrap();
    assert!(!session::opens(&elsewhere, &sealed), "the same secret on another client's route");
    assert!(!sealed.contains("alice"), "encrypted");
    let mut flipped = sealed.clone().into_bytes();
    let i = flipped.len() / 2;
    flipped[i] = if flipped[i] == b'A' { b'B' } else { b'A' };
    assert!(!session::opens(&b, std::str::from_utf8(&flipped).unwrap()), "authenticated");
}
