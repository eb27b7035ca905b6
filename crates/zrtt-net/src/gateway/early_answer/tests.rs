//! Tests of the early answer: the Reply, the gate, the budget, abandon.
use super::*;
use std::os::fd::AsFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zrtt_proto::handshake::{
    read_frame, ClientHandshake, ClientParams, Expect, ServerConfig, ServerKey, Transport,
};
use zrtt_proto::record::VerifiedKeyRecord;
use zrtt_proto::replay::{BloomReplayFilter, ReplayConfig};
use zrtt_proto::testing;

/// A first flight accepted by the core, as the gateway holds it.
pub(crate) fn accepted() -> Accepted {
    let key = testing::semi_static("abandon");
    let rec = testing::body(&key, &testing::ed25519_cert())
        .sign(&testing::ed25519_signer(), &ring::rand::SystemRandom::new())
        .unwrap();
    let now = UnixTime::from_secs(testing::T0 + 10);
    let rng = ring::rand::SystemRandom::new();
    let (_hs, flight) = ClientHandshake::start(
        &VerifiedKeyRecord::dangerous_assume_verified(rec.clone()),
        &ClientParams::default(),
        b"GET / HTTP/1.1\r\nHost: www.example.com\r\n\r\n",
        now,
        &rng,
    )
    .unwrap();
    let server = ServerConfig::new(vec![ServerKey::new(rec, key).unwrap()]).unwrap();
    let mut replay = BloomReplayFilter::new(
        ReplayConfig::default(),
        [1; 32],
        UnixTime::from_secs(testing::T0 - 100),
    );
    let (frame, _) = read_frame(&flight, Expect::FirstFlight).unwrap().unwrap();
    server
        .accept(&frame, Transport::Tcp, now, &mut replay, &rng)
        .unwrap()
}

#[tokio::test]
async fn an_abandoned_connection_sends_nothing_before_the_reply() {
    // The relay gave up at the gate timeout (a handshake that completes
    // late): the 504 it returns must not reach the client, nor any
    // Reply; the client sees the connection end with nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let fd = Arc::new(server.as_fd().try_clone_to_owned().unwrap());
    let gate = Arc::new(Gate::new(fd, false, Duration::from_secs(3)).unwrap());
    let ctl = Arc::new(EarlyCtl::default());
    ctl.abandon();
    let mut answer = EarlyAnswer::new(
        server,
        accepted(),
        Vec::new(),
        gate,
        Arc::new(Metrics::default()),
        (None, Extensions::new()),
        None,
        EarlyUse::Serve,
        ctl.clone(),
        Duration::from_secs(1),
        None,
    );
    let e = answer
        .write_all(b"HTTP/1.1 504 Gateway Timeout\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
    assert_eq!(
        answer.flush().await.unwrap_err().kind(),
        io::ErrorKind::ConnectionAborted
    );
    // The Reply timer firing after the abandon sends nothing either
    // (the early request's bytes are read first).
    ctl.release_reply();
    let mut buf = vec![0u8; 4096];
    let e = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match answer.read(&mut buf).await {
                Ok(0) => panic!("end of stream instead of an error"),
                Ok(_) => continue,
                Err(e) => break e,
            }
        }
    })
    .await
    .expect("a Reply went out after the abandon (the read waits for the client)");
    assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
    drop(answer);
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        let _ = client.read_to_end(&mut got).await;
    })
    .await
    .expect("the connection neither closed nor was reset");
    assert!(got.is_empty(), "{} bytes reached the client", got.len());
}
