//! Where a listener listens: `host:port` (TCP) or the path of a Unix socket
//! (anything with a `/` in it), and the streams it accepts.

use std::fmt;
use std::io;
use std::path::PathBuf;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    Tcp(String),
    Unix(PathBuf),
}

impl Addr {
    pub fn parse(s: &str) -> Result<Addr, String> {
        if s.contains('/') {
            return Ok(Addr::Unix(PathBuf::from(s)));
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(Addr::Tcp(s.to_string()))
            }
            _ => Err(format!(
                "{s:?} is neither host:port nor a socket path (a path needs a '/', e.g. ./kivi.sock)"
            )),
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Tcp(a) => write!(f, "{a}"),
            Addr::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    pub async fn bind(addr: &Addr) -> io::Result<Listener> {
        match addr {
            Addr::Tcp(a) => Ok(Listener::Tcp(TcpListener::bind(a).await?)),
            Addr::Unix(p) => {
                // A socket file left by a server that is gone (a crash, a
                // kill -9) would make bind fail; one that answers is in use.
                if let Ok(meta) = std::fs::symlink_metadata(p) {
                    use std::os::unix::fs::FileTypeExt;
                    if meta.file_type().is_socket() {
                        if std::os::unix::net::UnixStream::connect(p).is_ok() {
                            return Err(io::Error::new(
                                io::ErrorKind::AddrInUse,
                                format!("{} is in use by a running server", p.display()),
                            ));
                        }
                        std::fs::remove_file(p)?;
                    }
                }
                Ok(Listener::Unix(UnixListener::bind(p)?, p.clone()))
            }
        }
    }

    /// The address actually bound (the port, when port 0 was asked for).
    pub fn local_addr(&self) -> String {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "?".into()),
            Listener::Unix(_, p) => p.display().to_string(),
        }
    }

    /// The next connection and a name for its peer.
    pub async fn accept(&self) -> io::Result<(Box<dyn Stream>, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                // Replies are written whole; waiting to fill packets only
                // adds latency.
                let _ = s.set_nodelay(true);
                Ok((Box::new(s), peer.to_string()))
            }
            Listener::Unix(l, p) => {
                let (s, _) = l.accept().await?;
                Ok((Box::new(s), format!("unix:{}", p.display())))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        assert_eq!(
            Addr::parse("127.0.0.1:6380"),
            Ok(Addr::Tcp("127.0.0.1:6380".into()))
        );
        assert_eq!(Addr::parse("[::1]:7"), Ok(Addr::Tcp("[::1]:7".into())));
        assert_eq!(
            Addr::parse("./kivi.sock"),
            Ok(Addr::Unix(PathBuf::from("./kivi.sock")))
        );
        for bad in ["6380", "localhost:http", ":6380"] {
            let err = Addr::parse(bad).unwrap_err();
            assert!(
                err.starts_with(&format!("{bad:?} is neither host:port nor a socket path")),
                "{err}"
            );
        }
    }
}
