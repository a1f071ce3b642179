//! HTTP clients, and the crypto under their TLS.
//!
//! Weir's HTTP clients (the cloud checkpoint stores through `object_store`, the CLI's calls to
//! `weir serve`) speak TLS with rustls, with ring as its crypto: the default, aws-lc, is a C
//! library whose build was a tenth of a fresh machine's first build (Cargo.toml). rustls
//! takes the crypto from a process-wide default that must be installed before the first
//! client is made; [`install_crypto`] does it once, and [`client`] makes a client after it.

use std::sync::Once;

/// Installs ring as the process's TLS crypto, once. An embedder that installed its own
/// first keeps it.
pub fn install_crypto() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // An error means a default is installed already: the embedder's choice stands.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A new HTTP client, its TLS crypto installed.
pub fn client() -> reqwest::Client {
    install_crypto();
    reqwest::Client::new()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_client_is_made_and_its_crypto_is_installed() {
        let _client = super::client();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
