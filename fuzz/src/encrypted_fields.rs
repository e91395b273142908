//! APISIX's encrypted fields (AES-128-CBC, base64): decrypting any text never panics, and
//! what was encrypted decrypts back.

use sluice_config::encryption::{decrypt, encrypt};

/// One input.
pub fn check(data: &[u8]) {
    let keyring = vec![b"edd1c9f0985e76a2".to_vec(), b"qeddd145sfvddff3".to_vec()];
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = decrypt(text, &keyring);
        let sealed = encrypt(text, &keyring[0]);
        assert_eq!(decrypt(&sealed, &keyring).as_deref(), Some(text));
    }
}
