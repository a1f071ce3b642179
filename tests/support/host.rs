//! A `weir serve` host for the tests: started on 127.0.0.1:0 with a token, killed when
//! dropped, and the client commands and raw HTTP calls that talk to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{cache_dir, stderr};

pub const TOKEN: &str = "a-test-token-of-some-length";

/// A `weir serve` process, killed when dropped.
pub struct Host {
    pub child: Child,
    pub url: String,
    pub data: std::path::PathBuf,
}

impl Host {
    /// Starts a host keeping its jobs in `data`.
    pub fn start(data: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .env("WEIR_TOKEN", TOKEN)
            .env("WEIR_CACHE_DIR", cache_dir())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("weir serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the host says where it listens");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Self {
            child,
            url,
            data: data.to_owned(),
        }
    }

    /// Runs a client command against this host with `token`.
    pub fn weir(&self, args: &[&str], token: Option<&str>) -> Output {
        self.weir_in(None, args, token)
    }

    /// [`Host::weir`] with `dir` as the current folder.
    pub fn weir_in(&self, dir: Option<&Path>, args: &[&str], token: Option<&str>) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        command
            .args(args)
            .args(["--host", &self.url])
            .env("WEIR_CACHE_DIR", cache_dir())
            .env_remove("WEIR_TOKEN")
            .env("HOME", &self.data)
            .env_remove("XDG_CONFIG_HOME");
        if let Some(token) = token {
            command.env("WEIR_TOKEN", token);
        }
        command.output().expect("weir runs")
    }

    /// `weir submit JOB --json`: the job's id, or the refusal's message.
    pub fn submit(&self, job: &Path) -> Result<String, String> {
        let job = job.to_str().expect("utf-8");
        let out = self.weir(&["submit", job, "--json"], Some(TOKEN));
        if !out.status.success() {
            return Err(super::stderr(&out));
        }
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        Ok(info[0]["id"].as_str().expect("id").to_owned())
    }

    pub fn job(&self, id: &str) -> serde_json::Value {
        let out = self.weir(&["job", id, "--json"], Some(TOKEN));
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    /// Waits until job `id` is no longer running; returns its info.
    pub fn wait(&self, id: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let info = self.job(id);
            if info["status"] != "running" {
                return info;
            }
            assert!(Instant::now() < deadline, "job {id} still running: {info}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A raw HTTP GET, with the given Authorization header value: (status, body).
    pub fn get(&self, path: &str, authorization: Option<&str>) -> (u16, String) {
        let (status, _, body) = self.request("GET", path, authorization);
        (status, body)
    }

    /// A raw HTTP request without a body: (status, headers in lower case, body).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
    ) -> (u16, Vec<(String, String)>, String) {
        let address = self.url.strip_prefix("http://").expect("http");
        let mut stream = TcpStream::connect(address).expect("connect");
        let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Content-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
        .expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .expect("a status");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(name, value)| (name.trim().to_lowercase(), value.trim().to_owned()))
            .collect();
        (status, headers, body.to_owned())
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
