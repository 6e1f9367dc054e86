//! A throw-away PKI for TLS tests, made with the `openssl` command.

use std::path::PathBuf;
use std::process::Command;

/// A CA, an etcd server certificate for 127.0.0.1 and a client certificate.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("weft-test-pki")
            .tempdir()
            .unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl must be installed (run `make deps`)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"],
            &key[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "1",
                "-subj",
                "/CN=weft-test-ca",
            ],
        ]
        .concat());
        for (name, ext) in [
            (
                "server",
                "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
            ),
            ("client", "extendedKeyUsage=clientAuth\n"),
        ] {
            std::fs::write(dir.path().join(format!("{name}.ext")), ext).unwrap();
            let (k, csr, crt, extf) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            run(&[
                &["req"],
                &key[..],
                &["-keyout", &k, "-out", &csr, "-subj", &format!("/CN={name}")],
            ]
            .concat());
            run(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "1",
                "-extfile",
                &extf,
            ]);
        }
        Pki { dir }
    }

    /// Replaces the server certificate with one (same key, same CA) that expired in
    /// 2020: `openssl x509` cannot backdate, `openssl ca` can.
    #[allow(dead_code)] // not every test binary uses it
    pub fn expire_server_certificate(&self) {
        let dir = self.dir.path();
        std::fs::write(
            dir.join("ca.cnf"),
            "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = ca.srl\ndefault_md = sha256\npolicy = p\n[p]\ncommonName = supplied\n",
        )
        .unwrap();
        std::fs::write(dir.join("index.txt"), "").unwrap();
        let out = Command::new("openssl")
            .args([
                "ca", "-batch", "-notext", "-config", "ca.cnf", "-cert", "ca.crt",
            ])
            .args([
                "-keyfile",
                "ca.key",
                "-in",
                "server.csr",
                "-out",
                "server.crt",
            ])
            .args([
                "-startdate",
                "20200101000000Z",
                "-enddate",
                "20200102000000Z",
            ])
            .args(["-extfile", "server.ext"])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl ca: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// etcd-client options trusting the CA and presenting the client certificate.
    pub fn client_options(&self) -> etcd_client::ConnectOptions {
        let read = |f| std::fs::read(self.path(f)).unwrap();
        let tls = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(read("ca.crt")))
            .identity(etcd_client::Identity::from_pem(
                read("client.crt"),
                read("client.key"),
            ));
        etcd_client::ConnectOptions::new().with_tls(tls)
    }
}
