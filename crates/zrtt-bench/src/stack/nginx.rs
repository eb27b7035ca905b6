//! nginx configurations: one worker, no daemon, a `server` block per
//! listener (plain HTTP or TLS), everything under one prefix. TLS as the
//! reference machine's well-tuned nginx (`../shared/reference/baselines.md`):
//! X25519 only, TLS_AES_128_GCM_SHA256 for TLS 1.3, the server's cipher
//! order, `backlog=4096`, access log off, 8192 connections per worker.

use std::net::SocketAddr;
use std::path::Path;

use super::Site;

/// TLS settings of an nginx listener.
#[derive(Clone, Debug)]
pub(crate) struct NginxTls {
    /// `ssl_protocols`, e.g. "TLSv1.2 TLSv1.3".
    pub(crate) protocols: &'static str,
    /// Session tickets and cache (resumption, 0-RTT) on.
    pub(crate) resumption: bool,
    /// `ssl_early_data on` (TLS 1.3 0-RTT; needs `resumption`).
    pub(crate) early_data: bool,
    /// HTTP/2 offered by ALPN beside HTTP/1.1 (`listen ... http2`).
    pub(crate) http2: bool,
}

impl NginxTls {
    /// TLS 1.3 only, full handshakes (no tickets, no session cache): the
    /// ordinary TLS baseline most scenarios compare with.
    pub(crate) const TLS13: NginxTls = NginxTls {
        protocols: "TLSv1.3",
        resumption: false,
        early_data: false,
        http2: false,
    };
}

/// One nginx `server` block.
#[derive(Clone, Debug)]
pub(crate) struct NginxServer {
    pub(crate) listen: SocketAddr,
    pub(crate) tls: Option<NginxTls>,
    /// `fastopen=256` on the listen socket.
    pub(crate) fast_open: bool,
}

/// An nginx instance: one worker, no daemon, everything under a prefix.
#[derive(Clone, Debug)]
pub(crate) struct Nginx {
    pub(crate) servers: Vec<NginxServer>,
    /// Keep-alive requests per connection (0 turns keep-alive off).
    pub(crate) keepalive_requests: u32,
}

impl Nginx {
    /// The configuration text for `site`, with pid and logs under `prefix`.
    pub(crate) fn conf(&self, site: &Site, prefix: &Path) -> String {
        let d = prefix.display();
        let mut s = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
events {{ worker_connections 8192; }}\n\
http {{\n  access_log off;\n  ssl_ecdh_curve X25519;\n  ssl_prefer_server_ciphers on;\n  ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  default_type text/html;\n  sendfile on;\n  tcp_nopush on;\n  tcp_nodelay on;\n"
        );
        if self.keepalive_requests == 0 {
            s.push_str("  keepalive_timeout 0;\n");
        } else {
            s.push_str(&format!(
                "  keepalive_requests {};\n",
                self.keepalive_requests
            ));
        }
        for srv in &self.servers {
            let fo = if srv.fast_open { " fastopen=256" } else { "" };
            match &srv.tls {
                None => s.push_str(&format!(
                    "  server {{ listen {}{fo}; root {}; }}\n",
                    srv.listen,
                    site.www.display()
                )),
                Some(t) => {
                    let res = if t.resumption {
                        "ssl_session_tickets on; ssl_session_cache shared:zrtt:1m;"
                    } else {
                        "ssl_session_tickets off; ssl_session_cache off;"
                    };
                    let h2 = if t.http2 { " http2" } else { "" };
                    let ed = if t.early_data {
                        " ssl_early_data on;"
                    } else {
                        ""
                    };
                    s.push_str(&format!(
                        "  server {{ listen {} ssl{h2} backlog=4096{fo}; server_name {}; ssl_protocols {}; {res}{ed}\n    ssl_certificate {}; ssl_certificate_key {}; root {}; }}\n",
                        srv.listen,
                        site.name,
                        t.protocols,
                        site.cert.display(),
                        site.key.display(),
                        site.www.display()
                    ));
                }
            }
        }
        s.push_str("}\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_configuration() {
        let dir = Path::new("/srv/x");
        let site = Site {
            name: "www.example.com".into(),
            dir: dir.into(),
            ca: dir.join("ca"),
            cert: dir.join("c.pem"),
            key: dir.join("k.pem"),
            keystore: dir.join("ks"),
            records: dir.join("r"),
            key_records: Vec::new(),
            www: dir.join("www"),
        };
        let n = Nginx {
            servers: vec![
                NginxServer {
                    listen: "198.18.0.2:80".parse().unwrap(),
                    tls: None,
                    fast_open: true,
                },
                NginxServer {
                    listen: "198.18.0.2:443".parse().unwrap(),
                    tls: Some(NginxTls {
                        protocols: "TLSv1.2 TLSv1.3",
                        resumption: true,
                        early_data: true,
                        http2: true,
                    }),
                    fast_open: false,
                },
            ],
            keepalive_requests: 0,
        };
        let c = n.conf(&site, Path::new("/p"));
        assert!(
            c.contains("listen 198.18.0.2:80 fastopen=256; root /srv/x/www;"),
            "{c}"
        );
        assert!(c.contains("listen 198.18.0.2:443 ssl http2 backlog=4096; server_name www.example.com; ssl_protocols TLSv1.2 TLSv1.3; ssl_session_tickets on;"), "{c}");
        assert!(c.contains("ssl_early_data on;"));
        assert!(c.contains("keepalive_timeout 0;"));
        assert!(c.contains("pid /p/nginx.pid;"));
    }
}
