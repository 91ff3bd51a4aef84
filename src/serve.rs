//! `topdown serve`: a small HTTP server for Prometheus and continuous
//! profilers. GET /metrics reads every pinned instance afresh and answers
//! in the Prometheus text format 0.0.4, or in OpenMetrics for a client
//! whose Accept header asks for it (as Prometheus does), one request at a
//! time, which is plenty for scrapers; with --capture, GET /debug/pprof/topdown?seconds=N waits N
//! seconds (in a thread of its own) and answers with the stacks captured
//! meanwhile, as a gzipped pprof profile.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tiny_http::{Header, Method, Request, Response, Server};

use crate::error::{Error, Result};
use crate::funcname::FuncName;
pub(crate) use crate::listen::Listen;
use crate::report::openmetrics::{CaptureSeries, Format};
use crate::report::pprof::{self, Key};
use crate::report::Gate;
use crate::session::watch::Captured;

/// How long a wait for a request lasts before the stop flag is checked.
const POLL: Duration = Duration::from_millis(200);

/// The pprof endpoint's window: Go's net/http/pprof default, and a bound.
const PPROF_SECONDS: u64 = 30;
const PPROF_MAX_SECONDS: u64 = 600;

const TEXT: &str = "text/plain; charset=utf-8";

/// The start-up line: the address bound (its port, when 0 was asked for).
fn serving_line(bound: SocketAddr, all: bool) -> String {
    let all = if all { " on all addresses" } else { "" };
    format!("topdown: serving http://{bound}/metrics{all}; Ctrl-C to end")
}

/// What serve --capture has captured, shared by the loop that steers
/// capture and the HTTP side: each function's reason captured now, the
/// stacks captured per reason, and the stacks of the pprof windows open.
#[derive(Default)]
pub(crate) struct Captures {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Per function, the reasons captured now (none yet, or the function
    /// is not watched: empty).
    active: BTreeMap<String, Vec<String>>,
    /// Per (function, reason), the stacks captured since serve started,
    /// and its calls at the stack gate (see Gate).
    stacks: BTreeMap<(String, String), u64>,
    gates: BTreeMap<(String, String), Gate>,
    windows: Vec<(u64, HashMap<Key, u64>)>,
    next_window: u64,
}

impl Captures {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere cannot leave the counts half-written.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `func`'s capture now targets `reasons` (empty: none, or it is
    /// watched no more).
    pub(crate) fn switched(&self, func: &str, reasons: Vec<String>) {
        let mut g = self.lock();
        for r in &reasons {
            g.stacks.entry((func.to_string(), r.clone())).or_insert(0);
        }
        g.active.insert(func.to_string(), reasons);
    }

    /// Stacks of `func` captured now.
    pub(crate) fn add(&self, func: &str, got: Vec<Captured>) {
        if got.is_empty() {
            return;
        }
        let mut g = self.lock();
        for c in got {
            *g.stacks
                .entry((func.to_string(), c.reason.clone()))
                .or_insert(0) += 1;
            let key = Key {
                function: func.to_string(),
                reason: c.reason,
                stack: c.stack,
                process: c.process,
            };
            for (_, w) in g.windows.iter_mut() {
                *w.entry(key.clone()).or_insert(0) += 1;
            }
        }
    }

    /// `func`'s reasons' calls at the stack gate since serve started.
    pub(crate) fn gates(&self, func: &str, gates: Vec<(String, Gate)>) {
        let mut g = self.lock();
        for (reason, gate) in gates {
            g.stacks
                .entry((func.to_string(), reason.clone()))
                .or_insert(0);
            g.gates.insert((func.to_string(), reason), gate);
        }
    }

    /// The series of /metrics: every (function, reason) captured since
    /// serve started, whether it is captured now, and its stacks.
    pub(crate) fn series(&self) -> Vec<CaptureSeries> {
        let g = self.lock();
        g.stacks
            .iter()
            .map(|((f, r), &n)| CaptureSeries {
                function: f.clone(),
                reason: r.clone(),
                active: g.active.get(f).is_some_and(|a| a.contains(r)),
                stacks: n,
                gate: g
                    .gates
                    .get(&(f.clone(), r.clone()))
                    .copied()
                    .unwrap_or_default(),
            })
            .collect()
    }

    fn open(&self) -> u64 {
        let mut g = self.lock();
        let id = g.next_window;
        g.next_window += 1;
        g.windows.push((id, HashMap::new()));
        id
    }

    fn close(&self, id: u64) -> HashMap<Key, u64> {
        let mut g = self.lock();
        match g.windows.iter().position(|(w, _)| *w == id) {
            Some(i) => g.windows.swap_remove(i).1,
            None => HashMap::new(),
        }
    }
}

/// Serves until `stop` is set; `scrape` renders /metrics in a format;
/// `captures`, with --capture, feeds /debug/pprof/topdown.
pub(crate) fn run(
    listen: &Listen,
    stop: &AtomicBool,
    scrape: impl Fn(Format) -> Result<String> + Sync,
    captures: Option<&Captures>,
) -> Result<()> {
    let server = Server::http(listen.addrs.as_slice()).map_err(|e| {
        Error::msg(format!(
            "cannot listen on {listen}: {e}; pick another address with --listen ADDR:PORT"
        ))
    })?;
    let bound = server.server_addr().to_ip().unwrap_or(listen.addrs[0]);
    eprintln!("{}", serving_line(bound, listen.all));
    if captures.is_some() {
        eprintln!("topdown: serving captured stacks at http://{bound}/debug/pprof/topdown");
    }
    notify_ready();
    std::thread::scope(|s| {
        while !stop.load(Ordering::Relaxed) {
            let req = match server.recv_timeout(POLL) {
                Ok(Some(req)) => req,
                Ok(None) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::msg(format!("serving {bound}: {e}"))),
            };
            let path = req.url().split('?').next().unwrap_or("").to_string();
            match (req.method(), path.as_str(), captures) {
                (Method::Get, PPROF_PATH, Some(c)) => {
                    // A profile takes seconds: /metrics is not kept waiting.
                    let query = req.url().split_once('?').map_or("", |(_, q)| q).to_string();
                    s.spawn(move || respond(req, profile(&query, c, stop)));
                }
                _ => {
                    let accept = accept_header(&req);
                    let reply = answer(
                        req.method(),
                        req.url(),
                        accept.as_deref(),
                        &scrape,
                        captures.is_some(),
                    );
                    respond(req, reply);
                }
            }
        }
        Ok(())
    })
}

const PPROF_PATH: &str = "/debug/pprof/topdown";

fn respond(req: Request, (status, content_type, body): (u16, &'static str, Vec<u8>)) {
    let header = Header::from_bytes("Content-Type", content_type).expect("a valid header");
    // /metrics's format depends on Accept: caches must not mix them up.
    let vary = Header::from_bytes("Vary", "Accept").expect("a valid header");
    // A client that went away is its own business.
    let _ = req.respond(
        Response::from_data(body)
            .with_status_code(status)
            .with_header(header)
            .with_header(vary),
    );
}

/// The request's Accept headers, joined as one (None: none).
fn accept_header(req: &Request) -> Option<String> {
    let values: Vec<&str> = req
        .headers()
        .iter()
        .filter(|h| h.field.equiv("Accept"))
        .map(|h| h.value.as_str())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// The format an Accept header asks for, as the Prometheus client
/// libraries negotiate it: the media ranges by quality, highest first
/// (equal ones in order), and the first that is OpenMetrics (version
/// 1.0.0, 0.0.1 or none) or the text format (version 0.0.4 or none) wins;
/// with none of these, or no header, the text format 0.0.4.
fn negotiate(accept: Option<&str>) -> Format {
    let mut ranges: Vec<(f32, Option<Format>)> = Vec::new();
    for range in accept.unwrap_or("").split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let (mut q, mut version) = (1.0f32, None);
        for param in parts {
            let (k, v) = param.split_once('=').unwrap_or((param, ""));
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                // A quality that does not parse is 0, as Go's goautoneg has it.
                "q" => q = v.parse().unwrap_or(0.0),
                "version" => version = Some(v.to_string()),
                _ => {}
            }
        }
        let format = match (media.as_str(), version.as_deref()) {
            ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => {
                Some(Format::OpenMetrics)
            }
            ("text/plain", None | Some("0.0.4")) => Some(Format::Prometheus),
            _ => None,
        };
        if q > 0.0 {
            ranges.push((q, format));
        }
    }
    // A stable sort: equal qualities keep the client's order.
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranges
        .into_iter()
        .find_map(|(_, f)| f)
        .unwrap_or(Format::Prometheus)
}

/// The pprof window a query asks for: `seconds` (default 30) and
/// `function`, or why not (a 400's text).
fn pprof_query(query: &str) -> std::result::Result<(u64, Option<FuncName>), String> {
    let (mut seconds, mut function) = (PPROF_SECONDS, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "seconds" => {
                seconds = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=PPROF_MAX_SECONDS).contains(n))
                    .ok_or_else(|| {
                        format!("seconds={v}: give a whole number from 1 to {PPROF_MAX_SECONDS}")
                    })?
            }
            "function" => {
                function =
                    Some(FuncName::parse(v).map_err(|why| {
                        format!("function={v}: not a kernel function name: {why}")
                    })?)
            }
            _ => {
                return Err(format!(
                    "unknown parameter '{k}': give seconds=N and function=FUNC"
                ))
            }
        }
    }
    Ok((seconds, function))
}

/// Waits the window out and answers with its stacks, gzipped pprof.
fn profile(query: &str, captures: &Captures, stop: &AtomicBool) -> (u16, &'static str, Vec<u8>) {
    let (seconds, function) = match pprof_query(query) {
        Ok(q) => q,
        Err(e) => return (400, TEXT, format!("topdown: {e}\n").into_bytes()),
    };
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let id = captures.open();
    let began = Instant::now();
    let end = began + Duration::from_secs(seconds);
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(POLL.min(end.saturating_duration_since(Instant::now())));
    }
    let taken = began.elapsed();
    let mut got = captures.close(id);
    if let Some(f) = &function {
        got.retain(|k, _| k.function == f.as_str());
    }
    let body = pprof::encode(&got, start, taken.as_nanos() as i64);
    (200, "application/octet-stream", body)
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

/// Status, content type and body for a request other than a profile,
/// given its Accept header.
fn answer(
    method: &Method,
    url: &str,
    accept: Option<&str>,
    scrape: &impl Fn(Format) -> Result<String>,
    capture: bool,
) -> (u16, &'static str, Vec<u8>) {
    let path = url.split('?').next().unwrap_or(url);
    let text = |status: u16, t: String| (status, TEXT, t.into_bytes());
    match (method, path) {
        (Method::Get, "/metrics") => {
            let format = negotiate(accept);
            match scrape(format) {
                Ok(body) => (200, format.content_type(), body.into_bytes()),
                Err(e) => {
                    eprintln!("topdown: scrape failed: {e}");
                    text(500, format!("topdown: {e}\n"))
                }
            }
        }
        (Method::Get, PPROF_PATH) if !capture => text(
            404,
            "topdown: no stacks are captured: start topdown serve with --capture\n".into(),
        ),
        (Method::Get, "/") => text(
            200,
            if capture {
                "topdown: the counters of pinned functions are at /metrics, their stacks at \
                 /debug/pprof/topdown?seconds=N\n"
            } else {
                "topdown: the counters of pinned functions are at /metrics\n"
            }
            .into(),
        ),
        (Method::Get, _) => text(404, "not found: try /metrics\n".into()),
        _ => text(405, "only GET is served\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    #[test]
    fn routes() {
        let ok = |f: Format| Ok(format!("m 1 {f:?}\n"));
        let get = |url: &str, capture: bool| answer(&Method::Get, url, None, &ok, capture);
        assert_eq!(get("/metrics", false).0, 200);
        assert_eq!(
            get("/metrics?x=1", false),
            (
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                b"m 1 Prometheus\n".to_vec()
            )
        );
        assert_eq!(
            answer(
                &Method::Get,
                "/metrics",
                Some("application/openmetrics-text"),
                &ok,
                false
            ),
            (
                200,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                b"m 1 OpenMetrics\n".to_vec()
            )
        );
        assert_eq!(get("/", false).0, 200);
        assert_eq!(get("/nope", false).0, 404);
        assert_eq!(answer(&Method::Post, "/metrics", None, &ok, false).0, 405);
        let no = get("/debug/pprof/topdown?seconds=1", false);
        assert_eq!(
            (no.0, String::from_utf8(no.2).unwrap()),
            (
                404,
                "topdown: no stacks are captured: start topdown serve with --capture\n".into()
            )
        );
        let bad = |_: Format| Err(Error::msg("no kallsyms"));
        assert_eq!(
            answer(&Method::Get, "/metrics", None, &bad, false),
            (
                500,
                "text/plain; charset=utf-8",
                b"topdown: no kallsyms\n".to_vec()
            )
        );
    }

    /// Accept headers as real clients send them.
    #[test]
    fn negotiates_the_format() {
        use Format::{OpenMetrics as Om, Prometheus as Text};
        for (accept, want) in [
            // No header (curl -s, wget, promtool's own fetch): the text format.
            (None, Text),
            (Some(""), Text),
            (Some("*/*"), Text),
            // Prometheus 2.42's scrape.
            (Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), Om),
            // Prometheus 3's, with escaping, and an older Prometheus's.
            (Some("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"), Om),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.1"), Text),
            // Scrapers that ask for the text format first.
            (Some("text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5"), Text),
            (Some("text/plain; version=0.0.4, application/openmetrics-text; version=1.0.0"), Text),
            // Quality decides, not order; equal qualities keep the order.
            (Some("text/plain;q=0.2, application/openmetrics-text;q=0.9"), Om),
            (Some("Application/OpenMetrics-Text; Version=\"1.0.0\""), Om),
            (Some("application/openmetrics-text;version=0.0.1"), Om),
            // A version not spoken, or refused with q=0: not that one.
            (Some("application/openmetrics-text;version=2.0.0"), Text),
            (Some("application/openmetrics-text;q=0"), Text),
            (Some("application/openmetrics-text;q=x"), Text),
            (Some("text/plain;version=1.0.0;q=0.9,application/openmetrics-text;q=0.1"), Om),
            (Some("text/html, application/json"), Text),
        ] {
            assert_eq!(negotiate(accept), want, "Accept: {accept:?}");
        }
    }

    #[test]
    fn pprof_queries() {
        assert_eq!(pprof_query(""), Ok((30, None)));
        assert_eq!(pprof_query("seconds=5"), Ok((5, None)));
        let (n, f) = pprof_query("seconds=2&function=vfs_read").unwrap();
        assert_eq!((n, f.unwrap().as_str()), (2, "vfs_read"));
        assert_eq!(
            pprof_query("seconds=0").unwrap_err(),
            "seconds=0: give a whole number from 1 to 600"
        );
        assert_eq!(
            pprof_query("seconds=x").unwrap_err(),
            "seconds=x: give a whole number from 1 to 600"
        );
        assert_eq!(
            pprof_query("function=../x").unwrap_err(),
            "function=../x: not a kernel function name: it starts with '.'"
        );
        assert_eq!(
            pprof_query("debug=1").unwrap_err(),
            "unknown parameter 'debug': give seconds=N and function=FUNC"
        );
    }

    /// Stacks reach the windows open when they are captured, and only
    /// those; the series say which reason is captured now.
    #[test]
    fn captures_feed_open_windows_and_series() {
        let c = Captures::default();
        let got = |reason: &str| Captured {
            reason: reason.into(),
            stack: crate::report::Stack {
                kernel: vec!["zap+0x1".into()],
                user: vec![],
            },
            process: crate::report::Process {
                comm: "thp".into(),
                pid: 3,
            },
        };
        c.switched("f", vec!["ZAP".into()]);
        c.add("f", vec![got("ZAP")]);
        let w = c.open();
        c.add("f", vec![got("ZAP"), got("ZAP")]);
        c.switched("f", vec!["FAULT".into()]);
        c.add("f", vec![got("FAULT")]);
        let taken = c.close(w);
        assert_eq!(taken.len(), 2);
        assert_eq!(taken.values().sum::<u64>(), 3);
        c.add("f", vec![got("FAULT")]);
        let s: Vec<(String, bool, u64)> = c
            .series()
            .into_iter()
            .map(|s| (s.reason, s.active, s.stacks))
            .collect();
        assert_eq!(s, [("FAULT".into(), true, 2), ("ZAP".into(), false, 3)]);
        c.switched("f", vec!["FAULT".into(), "ZAP".into()]);
        assert!(c.series().iter().all(|s| s.active));
        c.switched("f", Vec::new());
        assert!(c.series().iter().all(|s| !s.active));
        assert!(c.close(w).is_empty());
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
        let scrape = |f: Format| {
            Ok(match f {
                Format::OpenMetrics => "topdown_x 1\n# EOF\n".into(),
                Format::Prometheus => "topdown_x 1\n".into(),
            })
        };
        let stop = AtomicBool::new(false);
        let listen = Listen::from(addr);
        std::thread::scope(|s| {
            let server = s.spawn(|| run(&listen, &stop, scrape, None));
            let get = |accept: &str| {
                let mut conn = None;
                for _ in 0..50 {
                    if let Ok(c) = TcpStream::connect(addr) {
                        conn = Some(c);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let mut c = conn.expect("the server listens");
                write!(c, "GET /metrics HTTP/1.0\r\nHost: x\r\n{accept}\r\n").unwrap();
                let mut reply = String::new();
                c.read_to_string(&mut reply).unwrap();
                assert!(
                    reply.starts_with("HTTP/1.1 200") || reply.starts_with("HTTP/1.0 200"),
                    "{reply}"
                );
                assert!(reply.contains("\r\nVary: Accept\r\n"), "{reply}");
                reply
            };
            let reply = get("");
            assert!(
                reply.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
                "{reply}"
            );
            assert!(reply.ends_with("\r\n\r\ntopdown_x 1\n"), "{reply}");
            let reply = get("Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n");
            assert!(
                reply.contains(
                    "\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"
                ),
                "{reply}"
            );
            assert!(reply.ends_with("topdown_x 1\n# EOF\n"), "{reply}");
            let e = run(
                &listen,
                &AtomicBool::new(false),
                |_| Ok(String::new()),
                None,
            )
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

    #[test]
    fn the_serving_line_names_the_port_bound() {
        assert_eq!(
            serving_line("[::1]:40123".parse().unwrap(), false),
            "topdown: serving http://[::1]:40123/metrics; Ctrl-C to end"
        );
        assert!(serving_line("[::]:9476".parse().unwrap(), true).contains(" on all addresses;"));
    }

    /// Port 0: the server binds one, and that is the one served.
    #[test]
    fn port_zero_binds_a_real_port() {
        let listen = Listen::parse("127.0.0.1:0").unwrap();
        let server = Server::http(listen.addrs.as_slice()).unwrap();
        assert_ne!(server.server_addr().to_ip().unwrap().port(), 0);
    }
}
