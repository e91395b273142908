//! The PROXY protocol header parser (v1 text and v2 binary, through the `ppp` crate): never
//! panics; a header it accepts lies within the input, and no shorter prefix of the input is
//! accepted as a header (the listener reads until one parses, so a prefix taken for a whole
//! header would cut the client's first bytes).

use sluice_proxy::fuzzing::proxy_protocol;

/// One input.
pub fn check(data: &[u8]) {
    let Ok(Some((len, addrs))) = proxy_protocol(data) else {
        return;
    };
    assert!(len <= data.len(), "a header longer than the input");
    assert!(len > 0, "an empty header");
    for k in 0..len {
        assert!(
            !matches!(proxy_protocol(&data[..k]), Ok(Some(_))),
            "the first {k} of {len} bytes parse as a header"
        );
    }
    if let Some((client, local)) = addrs {
        // The addresses stand in for the TCP peer's: both of one family.
        assert_eq!(client.is_ipv4(), local.is_ipv4(), "{client} to {local}");
    }
}
