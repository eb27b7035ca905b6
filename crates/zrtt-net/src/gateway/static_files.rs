//! Static-file mode: a site whose backend is a directory (`files:DIR`,
//! `zrtt gateway --root DIR`) is answered by the gateway itself, at the
//! point where another site's request goes to its backend (relay.rs), so
//! the zrtt early answer, TLS HTTP/1.1 and HTTP/2 all serve files alike.
//!
//! tower-http's `ServeDir` does the HTTP: content type from the extension,
//! single byte ranges (206, 416; several ranges get the whole file), `ETag`/`If-None-Match` and
//! `Last-Modified`/`If-Modified-Since` (304), `If-Match`/
//! `If-Unmodified-Since` (412), HEAD, and 405 for other methods. Its path
//! check refuses `..` (also percent-encoded) and absolute components (404).
//! This file adds what it leaves to its user:
//! - a directory is 404 unless `index` is set (then its `index.html`);
//!   there is never a listing;
//! - a symbolic link whose target lies outside the root is refused (403)
//!   unless `outside_links` is set: every path is resolved
//!   (`canonicalize`) and the resolved path, checked to lie under the
//!   resolved root, is the one opened;
//! - a path with a hidden component (a name starting with `.`, such as
//!   `.git/config` or `.env`) is 404, except under `/.well-known/` (RFC
//!   8615: ACME challenges, `security.txt`), as the usual nginx rule
//!   `location ~ /\. { deny all; }` with its `.well-known` exception does.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncSeek, ReadBuf};
use tower_http::services::fs::{self, ServeDir};

use super::{access_log, Body};
use crate::http::text_response;

/// A directory served as a site's backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StaticRoot {
    /// The directory.
    pub dir: PathBuf,
    /// Answer a directory with its `index.html` (off: 404).
    pub index: bool,
    /// Follow symbolic links to targets outside `dir` (off: 403).
    pub outside_links: bool,
}

impl StaticRoot {
    /// `dir` with the defaults: no index, no links leaving it.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            index: false,
            outside_links: false,
        }
    }
}

/// A site's files, ready to serve.
pub(super) struct StaticFiles {
    serve: ServeDir<fs::DefaultServeDirFallback, Confined>,
}

impl StaticFiles {
    /// Files under `root` (which must be a directory).
    pub(super) fn new(root: &StaticRoot) -> io::Result<Self> {
        let dir = std::fs::canonicalize(&root.dir)?;
        if !dir.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", root.dir.display()),
            ));
        }
        let confined = Confined {
            root: (!root.outside_links).then(|| Arc::from(dir.as_path())),
            dir: Arc::from(dir.as_path()),
        };
        let serve = ServeDir::with_backend(&dir, confined)
            .append_index_html_on_directories(root.index)
            // Without an index a directory is 404 with or without its slash.
            .redirect_to_trailing_slash(root.index)
            // Several ranges: the whole file (RFC 9110 §14.2 lets a server
            // ignore Range), not 416.
            .ignore_multi_range_requests(true)
            // 16 KiB reads (ServeDir's default is 64 KiB): a quarter of the
            // memory per response in flight; the CPU per connection of a
            // 100 KB file was the same within this machine's noise
            // (2026-11-26: 441-502 µs against 439-495 µs over zrtt).
            .with_buf_chunk_size(16 * 1024);
        Ok(Self { serve })
    }

    /// The answer to `req` (its body, if any, is not read); `early`: it came
    /// in a first flight (the access log says so).
    pub(super) async fn serve(&self, req: Request<()>, early: bool) -> Response<Body> {
        let mut serve = self.serve.clone();
        let mut resp = match serve.try_call(req).await {
            Ok(r) => r.map(|b| BodyExt::boxed(FileBody(std::sync::Mutex::new(b)))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                text_response(StatusCode::NOT_FOUND, "not found")
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                text_response(StatusCode::FORBIDDEN, "forbidden")
            }
            Err(e) => {
                tracing::warn!("static file: {e}");
                text_response(StatusCode::INTERNAL_SERVER_ERROR, "cannot read the file")
            }
        };
        if early {
            resp.extensions_mut().insert(access_log::ServedEarly);
        }
        resp
    }
}

/// ServeDir's body in the gateway's body type. A read error after the head
/// ends the body early: hyper then closes the connection, since the length
/// it announced was not sent (no hyper error can be made from an I/O one).
struct FileBody(std::sync::Mutex<fs::ServeFileSystemResponseBody>);

impl hyper::body::Body for FileBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let inner = self
            .get_mut()
            .0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match ready!(Pin::new(inner).poll_frame(cx)) {
            Some(Ok(f)) => Poll::Ready(Some(Ok(f))),
            Some(Err(e)) => {
                tracing::warn!("static file read: {e}");
                Poll::Ready(None)
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .size_hint()
    }
}

/// The file system under a root: a path whose resolution leaves the root
/// (through a symbolic link) is refused, and the resolved path is the one
/// opened. `root: None` follows every link.
///
/// Looking up, opening and reading a file are done in place, on the
/// runtime's thread, as nginx without `aio` does: from the page cache they
/// take microseconds, where each hand-off to tokio's blocking pool cost
/// about 15 µs of server CPU in `zrtt lab throughput` (four per 1 KB
/// request). A file on a slow disk then holds a runtime thread. Reads are
/// 16 KiB chunks, so a response holds at most one in memory.
#[derive(Clone, Debug)]
struct Confined {
    root: Option<Arc<Path>>,
    /// The served directory (resolved).
    dir: Arc<Path>,
}

/// Whether `path` (under `dir`) names a hidden file or goes through a
/// hidden directory, other than `.well-known` at the top.
fn hidden(dir: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(dir) else {
        return false;
    };
    rel.components().enumerate().any(|(i, c)| {
        let name = c.as_os_str().to_string_lossy();
        name.starts_with('.') && !(i == 0 && name == ".well-known")
    })
}

impl Confined {
    fn check_hidden(&self, path: &Path) -> io::Result<()> {
        if hidden(&self.dir, path) {
            return Err(io::Error::new(io::ErrorKind::NotFound, "a hidden file"));
        }
        Ok(())
    }

    /// `path` resolved, if it stays under the root.
    fn resolve(root: Option<&Path>, path: &Path) -> io::Result<PathBuf> {
        let Some(root) = root else {
            return Ok(path.to_path_buf());
        };
        let real = std::fs::canonicalize(path)?;
        if real.starts_with(root) {
            Ok(real)
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a link leads outside the root",
            ))
        }
    }

    fn open_now(&self, path: &Path) -> io::Result<File> {
        self.check_hidden(path)?;
        let file = std::fs::File::open(Self::resolve(self.root.as_deref(), path)?)?;
        let meta = file.metadata()?;
        Ok(File {
            file,
            meta,
            seek: None,
        })
    }
}

impl fs::Backend for Confined {
    type File = File;
    type Metadata = std::fs::Metadata;
    type OpenFuture = std::future::Ready<io::Result<File>>;
    type MetadataFuture = std::future::Ready<io::Result<std::fs::Metadata>>;

    fn open(&self, path: PathBuf) -> Self::OpenFuture {
        std::future::ready(self.open_now(&path))
    }

    fn metadata(&self, path: PathBuf) -> Self::MetadataFuture {
        std::future::ready(
            self.check_hidden(&path)
                .and_then(|()| Self::resolve(self.root.as_deref(), &path))
                .and_then(std::fs::metadata),
        )
    }
}

/// An open file read in place, with its metadata taken when it was
/// opened.
#[derive(Debug)]
struct File {
    file: std::fs::File,
    meta: std::fs::Metadata,
    /// The result of the last `start_seek`, for `poll_complete`.
    seek: Option<io::Result<u64>>,
}

impl AsyncRead for File {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = io::Read::read(&mut self.get_mut().file, buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for File {
    fn start_seek(self: Pin<&mut Self>, position: io::SeekFrom) -> io::Result<()> {
        let this = self.get_mut();
        this.seek = Some(io::Seek::seek(&mut this.file, position));
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let this = self.get_mut();
        Poll::Ready(match this.seek.take() {
            Some(r) => r,
            None => io::Seek::stream_position(&mut this.file),
        })
    }
}

impl fs::File for File {
    type Metadata = std::fs::Metadata;
    type MetadataFuture<'a> = std::future::Ready<io::Result<std::fs::Metadata>>;

    fn metadata(&self) -> Self::MetadataFuture<'_> {
        std::future::ready(Ok(self.meta.clone()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn get(
        files: &StaticFiles,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, hyper::HeaderMap, Bytes) {
        let mut b = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let r = files.serve(b.body(()).unwrap(), false).await;
        let (parts, body) = r.into_parts();
        (
            parts.status,
            parts.headers,
            body.collect().await.unwrap().to_bytes(),
        )
    }

    #[tokio::test]
    async fn files_ranges_conditions_and_refusals() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.html"), "<p>hello</p>").unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        std::fs::write(root.path().join("d/index.html"), "index").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.path().join("out"))
            .unwrap();
        std::os::unix::fs::symlink(root.path().join("a.html"), root.path().join("in.html"))
            .unwrap();
        let files = StaticFiles::new(&StaticRoot::new(root.path())).unwrap();

        let (s, h, b) = get(&files, "GET", "/a.html", &[]).await;
        assert_eq!((s, &b[..]), (StatusCode::OK, &b"<p>hello</p>"[..]));
        assert_eq!(h["content-type"], "text/html");
        let etag = h["etag"].to_str().unwrap().to_owned();
        let (s, _, b) = get(&files, "GET", "/a.html", &[("if-none-match", &etag)]).await;
        assert_eq!((s, b.len()), (StatusCode::NOT_MODIFIED, 0));
        let lm = h["last-modified"].to_str().unwrap().to_owned();
        let (s, _, _) = get(&files, "GET", "/a.html", &[("if-modified-since", &lm)]).await;
        assert_eq!(s, StatusCode::NOT_MODIFIED);
        let (s, h, b) = get(&files, "GET", "/a.html", &[("range", "bytes=3-7")]).await;
        assert_eq!((s, &b[..]), (StatusCode::PARTIAL_CONTENT, &b"hello"[..]));
        assert_eq!(h["content-range"], "bytes 3-7/12");
        let (s, _, b) = get(&files, "GET", "/a.html", &[("range", "bytes=0-1,3-4")]).await;
        assert_eq!((s, b.len()), (StatusCode::OK, 12));
        let (s, _, _) = get(&files, "GET", "/a.html", &[("range", "bytes=50-60")]).await;
        assert_eq!(s, StatusCode::RANGE_NOT_SATISFIABLE);
        let (s, h, b) = get(&files, "HEAD", "/a.html", &[]).await;
        assert_eq!((s, b.len()), (StatusCode::OK, 0));
        assert_eq!(h["content-length"], "12");
        let (s, h, _) = get(&files, "POST", "/a.html", &[]).await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(h["allow"], "GET,HEAD");
        for (path, want) in [
            ("/d/", StatusCode::NOT_FOUND),
            ("/d", StatusCode::NOT_FOUND),
            ("/", StatusCode::NOT_FOUND),
            ("/../etc/passwd", StatusCode::NOT_FOUND),
            ("/%2e%2e/etc/passwd", StatusCode::NOT_FOUND),
            ("/d/%2E%2E/%2e%2e/etc/passwd", StatusCode::NOT_FOUND),
            ("/out", StatusCode::FORBIDDEN),
            ("/in.html", StatusCode::OK),
        ] {
            assert_eq!(get(&files, "GET", path, &[]).await.0, want, "{path}");
        }

        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(root.path().join("big.bin"), &big).unwrap();
        let (s, h, b) = get(&files, "GET", "/big.bin", &[]).await;
        assert_eq!((s, &b[..]), (StatusCode::OK, &big[..]));
        assert_eq!(h["content-type"], "application/octet-stream");
        let (s, _, b) = get(
            &files,
            "GET",
            "/big.bin",
            &[("range", "bytes=150000-150009")],
        )
        .await;
        assert_eq!(
            (s, &b[..]),
            (StatusCode::PARTIAL_CONTENT, &big[150_000..150_010])
        );

        let mut open = StaticRoot::new(root.path());
        open.index = true;
        open.outside_links = true;
        let files = StaticFiles::new(&open).unwrap();
        let (s, _, b) = get(&files, "GET", "/d/", &[]).await;
        assert_eq!((s, &b[..]), (StatusCode::OK, &b"index"[..]));
        let (s, _, b) = get(&files, "GET", "/out", &[]).await;
        assert_eq!((s, &b[..]), (StatusCode::OK, &b"secret"[..]));
        assert!(StaticFiles::new(&StaticRoot::new(root.path().join("a.html"))).is_err());
    }

    #[tokio::test]
    async fn hidden_files_are_not_served_but_well_known_is() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::write(r.join(".env"), "SECRET=1").unwrap();
        std::fs::create_dir_all(r.join(".git")).unwrap();
        std::fs::write(r.join(".git/config"), "[core]").unwrap();
        std::fs::create_dir_all(r.join("d/.cache")).unwrap();
        std::fs::write(r.join("d/.cache/x"), "x").unwrap();
        std::fs::create_dir_all(r.join(".well-known")).unwrap();
        std::fs::write(r.join(".well-known/security.txt"), "Contact: x").unwrap();
        let files = StaticFiles::new(&StaticRoot::new(r)).unwrap();
        for path in [
            "/.env",
            "/%2eenv",
            "/.git/config",
            "/d/.cache/x",
            "/d/%2Ecache/x",
        ] {
            let (s, _, b) = get(&files, "GET", path, &[]).await;
            assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {b:?}");
        }
        let (s, _, b) = get(&files, "GET", "/.well-known/security.txt", &[]).await;
        assert_eq!((s, &b[..]), (StatusCode::OK, &b"Contact: x"[..]));
    }
}
