//! Minimal `zrtt dns` for measurements without building the whole binary:
//! `serve ZONE KEYSTORE ADDR:PORT`. Prints `listening udp=.. tcp=..` and
//! serves (rotating) until killed. The real command is `zrtt dns`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zrtt_dns::server::{self, HostConfig, Listener, ZoneState};
use zrtt_proto::UnixTime;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, zone, keystore, listen] = args.as_slice() else {
        eprintln!("usage: serve ZONE KEYSTORE ADDR:PORT");
        std::process::exit(2);
    };
    let hosts = vec![HostConfig {
        keystore: keystore.into(),
        alpn: vec!["http/1.1".into()],
        port: None,
    }];
    let state = match ZoneState::new(zone.as_ref(), None, &hosts, true) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("serve: {e}");
            std::process::exit(1);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let l = Listener::bind(listen.parse().expect("ADDR:PORT"))
            .await
            .expect("bind");
        println!("{}", l.describe());
        let (_trigger, shutdown) = server::shutdown::channel();
        let rng = ring::rand::SystemRandom::new();
        let clock = || {
            UnixTime::since_epoch(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default(),
            )
        };
        server::serve(
            state,
            vec![l],
            clock,
            &rng,
            Duration::from_secs(1),
            shutdown,
        )
        .await
        .expect("serve");
    });
}
