//! A private certificate authority made at test time (rcgen), with server and client
//! certificates signed by it, written as PEM files the way an operator would have them.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

type Error = Box<dyn std::error::Error>;

/// A certificate and its key, in PEM.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl Pair {
    /// Writes `NAME.crt` and `NAME.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> std::io::Result<(PathBuf, PathBuf)> {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert)?;
        std::fs::write(&key, &self.key)?;
        Ok((cert, key))
    }

    /// Certificate and key in one PEM, as reqwest's `Identity::from_pem` takes them.
    pub fn identity_pem(&self) -> Vec<u8> {
        format!("{}{}", self.cert, self.key).into_bytes()
    }
}

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Result<Self, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Self { issuer })
    }

    /// The CA certificate in PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server(&self, common_name: &str, names: &[&str]) -> Result<Pair, Error> {
        self.leaf(common_name, names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate.
    pub fn client(&self, common_name: &str) -> Result<Pair, Error> {
        self.leaf(common_name, &[], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(
        &self,
        common_name: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<Pair, Error> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}
