//! `topdown serve`: a small HTTP server for Prometheus. GET /metrics reads
//! every pinned instance afresh and answers with OpenMetrics text; one
//! request at a time, which is plenty for scrapers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tiny_http::{Header, Method, Response, Server};

use crate::error::{Error, Result};
use crate::report::openmetrics::CONTENT_TYPE;

/// How long a wait for a request lasts before the stop flag is checked.
const POLL: Duration = Duration::from_millis(200);

/// Serves until `stop` is set; `scrape` renders /metrics.
pub(crate) fn run(
    listen: SocketAddr,
    stop: &AtomicBool,
    scrape: impl Fn() -> Result<String>,
) -> Result<()> {
    let server = Server::http(listen).map_err(|e| {
        Error::msg(format!(
            "cannot listen on {listen}: {e}; pick another address with --listen ADDR:PORT"
        ))
    })?;
    eprintln!("topdown: serving http://{listen}/metrics; Ctrl-C to end");
    notify_ready();
    while !stop.load(Ordering::Relaxed) {
        let req = match server.recv_timeout(POLL) {
            Ok(Some(req)) => req,
            Ok(None) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::msg(format!("serving {listen}: {e}"))),
        };
        let (status, content_type, body) = answer(req.method(), req.url(), &scrape);
        let header = Header::from_bytes("Content-Type", content_type).expect("a valid header");
        // A client that went away is its own business.
        let _ = req.respond(
            Response::from_string(body)
                .with_status_code(status)
                .with_header(header),
        );
    }
    Ok(())
}

/// Tells systemd (a Type=notify unit) that serve listens: READY=1 on the
/// datagram socket named by $NOTIFY_SOCKET (a path, or with '@' an
/// abstract name), as sd_notify(3) does. Without it, nothing to do; a
/// failure is reported and serving goes on (systemd then times out).
fn notify_ready() {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send_notify(&path, "READY=1") {
        eprintln!(
            "topdown: cannot tell systemd that serve is ready ({}): {e}",
            path.to_string_lossy()
        );
    }
}

fn send_notify(path: &std::ffi::OsStr, msg: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
    let bytes = path.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => UnixAddr::from_abstract_name(name)?,
        None => UnixAddr::from_pathname(std::path::Path::new(path))?,
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(msg.as_bytes(), &addr)?;
    Ok(())
}

/// Status, content type and body for a request.
fn answer(
    method: &Method,
    url: &str,
    scrape: &impl Fn() -> Result<String>,
) -> (u16, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    let path = url.split('?').next().unwrap_or(url);
    match (method, path) {
        (Method::Get, "/metrics") => match scrape() {
            Ok(text) => (200, CONTENT_TYPE, text),
            Err(e) => {
                eprintln!("topdown: scrape failed: {e}");
                (500, TEXT, format!("topdown: {e}\n"))
            }
        },
        (Method::Get, "/") => (
            200,
            TEXT,
            "topdown: the counters of pinned functions are at /metrics\n".into(),
        ),
        (Method::Get, _) => (404, TEXT, "not found: try /metrics\n".into()),
        _ => (405, TEXT, "only GET is served\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    #[test]
    fn routes() {
        let ok = || Ok("m 1\n# EOF\n".to_string());
        assert_eq!(answer(&Method::Get, "/metrics", &ok).0, 200);
        assert_eq!(answer(&Method::Get, "/metrics?x=1", &ok).2, "m 1\n# EOF\n");
        assert_eq!(answer(&Method::Get, "/", &ok).0, 200);
        assert_eq!(answer(&Method::Get, "/nope", &ok).0, 404);
        assert_eq!(answer(&Method::Post, "/metrics", &ok).0, 405);
        let bad = || Err(Error::msg("no kallsyms"));
        assert_eq!(
            answer(&Method::Get, "/metrics", &bad),
            (
                500,
                "text/plain; charset=utf-8",
                "topdown: no kallsyms\n".into()
            )
        );
    }

    /// READY=1 reaches a datagram socket named by path and by abstract
    /// name, as systemd listens on either.
    #[test]
    fn notifies_systemd() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
        let dir = std::env::temp_dir().join(format!("topdown-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        send_notify(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = sock.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let name = format!("topdown-notify-{}", std::process::id());
        let abs = UnixDatagram::bind_addr(&UnixAddr::from_abstract_name(&name).unwrap()).unwrap();
        send_notify(std::ffi::OsStr::new(&format!("@{name}")), "READY=1").unwrap();
        let n = abs.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        assert!(send_notify(dir.join("none").as_os_str(), "READY=1").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A real HTTP exchange over loopback, and a second server on the same
    /// port refused with a clear message.
    #[test]
    fn serves_over_loopback_and_refuses_a_port_in_use() {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let server = s.spawn(|| run(addr, &stop, || Ok("topdown_x 1\n# EOF\n".into())));
            let mut conn = None;
            for _ in 0..50 {
                if let Ok(c) = TcpStream::connect(addr) {
                    conn = Some(c);
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let mut c = conn.expect("the server listens");
            c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut reply = String::new();
            c.read_to_string(&mut reply).unwrap();
            assert!(
                reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200"),
                "{reply}"
            );
            assert!(reply.contains("application/openmetrics-text"), "{reply}");
            assert!(reply.ends_with("topdown_x 1\n# EOF\n"), "{reply}");
            let e = run(addr, &AtomicBool::new(false), || Ok(String::new()))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&format!("cannot listen on {addr}: ")), "{e}");
            assert!(
                e.ends_with("pick another address with --listen ADDR:PORT"),
                "{e}"
            );
            stop.store(true, Ordering::Relaxed);
            server.join().unwrap().unwrap();
        });
    }
}
