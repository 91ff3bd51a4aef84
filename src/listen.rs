//! `serve --listen`: the address forms exporters take.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// Where serve listens: `--listen` as exporters take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    /// Tried in order; the first that binds is served.
    pub(crate) addrs: Vec<SocketAddr>,
    /// `:PORT`: every address of the machine.
    pub(crate) all: bool,
}

impl Listen {
    /// `ADDR:PORT`, `[IPv6]:PORT`, `:PORT` (all addresses: IPv6 and, on a
    /// dual-stack socket, IPv4; IPv4 alone where IPv6 is off) or
    /// `localhost:PORT`.
    pub fn parse(s: &str) -> std::result::Result<Listen, String> {
        let bad = || {
            format!(
                "'{}' is not ADDR:PORT, [ADDR]:PORT, :PORT (all addresses) or localhost:PORT",
                s.escape_debug()
            )
        };
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(Listen::from(a));
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let (addrs, all) = match host {
            "" => (
                vec![
                    (Ipv6Addr::UNSPECIFIED, port).into(),
                    (Ipv4Addr::UNSPECIFIED, port).into(),
                ],
                true,
            ),
            "localhost" => (
                vec![
                    (Ipv4Addr::LOCALHOST, port).into(),
                    (Ipv6Addr::LOCALHOST, port).into(),
                ],
                false,
            ),
            _ => return Err(bad()),
        };
        Ok(Listen { addrs, all })
    }

    /// Whether only this machine can connect.
    pub fn is_loopback(&self) -> bool {
        self.addrs.iter().all(|a| a.ip().is_loopback())
    }
}

impl From<SocketAddr> for Listen {
    fn from(a: SocketAddr) -> Listen {
        Listen {
            addrs: vec![a],
            all: false,
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.all, self.addrs.first()) {
            (true, Some(a)) => write!(f, ":{} (all addresses)", a.port()),
            (_, Some(a)) => write!(f, "{a}"),
            (_, None) => f.write_str("nowhere"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_what_exporters_take() {
        let one = |s: &str| Listen::parse(s).unwrap();
        assert_eq!(
            one("127.0.0.1:9476"),
            Listen::from(SocketAddr::from(([127, 0, 0, 1], 9476)))
        );
        assert_eq!(
            one("[::1]:0").addrs,
            ["[::1]:0".parse::<SocketAddr>().unwrap()]
        );
        let all = one(":9476");
        assert!(all.all && !all.is_loopback());
        assert_eq!(all.addrs[0], "[::]:9476".parse::<SocketAddr>().unwrap());
        assert_eq!(all.addrs[1], "0.0.0.0:9476".parse::<SocketAddr>().unwrap());
        assert_eq!(all.to_string(), ":9476 (all addresses)");
        let local = one("localhost:9476");
        assert!(local.is_loopback() && !local.all);
        for bad in ["nowhere", "127.0.0.1", "example.org:80", ":x", ":70000", ""] {
            let e = Listen::parse(bad).unwrap_err();
            assert!(e.contains("is not ADDR:PORT"), "{bad}: {e}");
        }
    }
}
