//! TLS for the AMQP listener on `CONNECTORS_AMQP10_TLS_PORT`: rustls (TLS 1.2 and
//! 1.3 only), certificate and key from PEM files, optional client certificates
//! verified against a CA (mTLS; their CN is the SASL EXTERNAL identity).

use crate::config::Settings;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use sluice_proto::frame::TLS_HEADER;
use std::sync::Arc;

/// The server configuration, or None when no certificate is configured.
pub fn server_config(s: &Settings) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    if s.tls_cert_file.is_empty() && s.tls_key_file.is_empty() {
        return Ok(None);
    }
    if s.tls_cert_file.is_empty() || s.tls_key_file.is_empty() {
        return Err("SLUICE_TLS_CERT_FILE and SLUICE_TLS_KEY_FILE must be set together".into());
    }
    let certs = read_certs(&s.tls_cert_file)?;
    let key = {
        let pem = std::fs::read(&s.tls_key_file).map_err(|e| format!("TLS key file {}: {e}", s.tls_key_file))?;
        rustls_pemfile::private_key(&mut pem.as_slice())
            .map_err(|e| format!("TLS key file {}: {e}", s.tls_key_file))?
            .ok_or_else(|| format!("TLS key file {}: no private key found", s.tls_key_file))?
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = if s.tls_client_ca_file.is_empty() {
        builder.with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for c in read_certs(&s.tls_client_ca_file)? {
            roots.add(c).map_err(|e| format!("TLS client CA {}: {e}", s.tls_client_ca_file))?;
        }
        // Client certificates are verified when presented; a client without one can
        // still authenticate with SASL PLAIN.
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("TLS client CA {}: {e}", s.tls_client_ca_file))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut cfg = builder.with_single_cert(certs, key).map_err(|e| format!("TLS certificate: {e}"))?;
    cfg.alpn_protocols.clear();
    Ok(Some(Arc::new(cfg)))
}

fn read_certs(path: &str) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("certificate file {path}: {e}"))?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut pem.as_slice()).collect();
    let certs = certs.map_err(|e| format!("certificate file {path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("certificate file {path}: no certificate found"));
    }
    Ok(certs)
}

/// AMQP's TLS negotiation (part 5, 5.2.1): a client may send the TLS protocol header
/// before its ClientHello; it is answered with the same header. A client that starts
/// with the ClientHello right away is served too.
///
/// One peek tells the two apart (a ClientHello starts with 0x16, a protocol header
/// with `A`); a header is then read as its bytes come, so a peer that sends part of it
/// and stops costs nothing until the handshake timeout (before, it was peeked again
/// every 5 ms for those 10 s). Any other protocol header is refused.
pub async fn amqp_tls_header(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut first = [0u8; 1];
    #[cfg(test)]
    PEEKS.with(|p| p.set(p.get() + 1));
    if stream.peek(&mut first).await? == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before TLS"));
    }
    if first[0] != TLS_HEADER[0] {
        return Ok(()); // a ClientHello (or garbage the TLS handshake will refuse)
    }
    let mut head = [0u8; 8];
    stream.read_exact(&mut head).await?;
    if head != TLS_HEADER {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not the AMQP TLS protocol header"));
    }
    stream.write_all(&TLS_HEADER).await?;
    Ok(())
}

#[cfg(test)]
thread_local! {
    /// Peeks made by `amqp_tls_header` (tests of its cost).
    static PEEKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The subject CN of the verified client certificate, if any.
pub fn client_cn(conn: &rustls::ServerConnection) -> Option<String> {
    let cert = conn.peer_certificates()?.first()?;
    subject_cn(cert.as_ref())
}

/// A DER element: (tag, content, rest).
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    let first = *b.get(1)? as usize;
    let (len, head) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *b.get(2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let content = b.get(head..head.checked_add(len)?)?;
    Some((tag, content, &b[head + len..]))
}

/// The CN (OID 2.5.4.3) of a certificate's subject, walked by hand:
/// Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version?, serial,
/// signature, issuer, validity, subject, ... }, ... }.
pub fn subject_cn(cert: &[u8]) -> Option<String> {
    let (_, cert, _) = der(cert)?;
    let (_, tbs, _) = der(cert)?;
    let mut rest = tbs;
    let (tag, _, r) = der(rest)?;
    if tag == 0xa0 {
        rest = r; // explicit version
    }
    for _ in 0..4 {
        let (_, _, r) = der(rest)?; // serial, signature, issuer, validity
        rest = r;
    }
    let (_, mut subject, _) = der(rest)?;
    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    while !subject.is_empty() {
        let (_, set, r) = der(subject)?;
        subject = r;
        let (_, atv, _) = der(set)?;
        let (tag, oid, r) = der(atv)?;
        if tag == 0x06 && oid == CN {
            let (_, value, _) = der(r)?;
            return std::str::from_utf8(value).ok().map(str::to_owned);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Duration;

    /// On a real socket: a TLS protocol header sent a byte every 40 ms is answered
    /// after one peek (before: a peek every 5 ms while it came, 55 here); a
    /// ClientHello's first byte is left for the TLS handshake; another protocol header
    /// is refused.
    #[test]
    fn a_trickled_tls_header_is_read_without_polling() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async move {
                let listener = glommio::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let client = |bytes: &'static [u8], gap: Duration| {
                    std::thread::spawn(move || {
                        let mut s = std::net::TcpStream::connect(addr).unwrap();
                        for b in bytes {
                            s.write_all(&[*b]).unwrap();
                            std::thread::sleep(gap);
                        }
                        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        let mut back = [0u8; 8];
                        s.read_exact(&mut back).map(|_| back).ok()
                    })
                };
                let trickle = client(&TLS_HEADER, Duration::from_millis(40));
                let mut stream = listener.accept().await.unwrap();
                PEEKS.with(|p| p.set(0));
                amqp_tls_header(&mut stream).await.unwrap();
                assert_eq!(PEEKS.with(|p| p.get()), 1);
                assert_eq!(trickle.join().unwrap(), Some(TLS_HEADER));

                let hello = client(&[0x16, 0x03, 0x01], Duration::ZERO);
                let mut stream = listener.accept().await.unwrap();
                amqp_tls_header(&mut stream).await.unwrap();
                let mut left = [0u8; 3];
                stream.read_exact(&mut left).await.unwrap();
                assert_eq!(left, [0x16, 0x03, 0x01], "the ClientHello's bytes are left for the handshake");
                drop(stream);
                assert_eq!(hello.join().unwrap(), None);

                let plain = client(b"AMQP\x00\x01\x00\x00", Duration::ZERO);
                let mut stream = listener.accept().await.unwrap();
                let e = amqp_tls_header(&mut stream).await.unwrap_err();
                assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
                drop(stream);
                assert_eq!(plain.join().unwrap(), None);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
