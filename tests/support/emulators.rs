//! Object-store servers on 127.0.0.1 for the storage tests: moto for S3, Azurite for Azure Blob
//! Storage and fake-gcs-server for Google Cloud Storage.
//!
//! Each is installed by a script (`scripts/moto`, `scripts/azurite`, `scripts/gcs-emulator`)
//! whose printed path `scripts/test` exports (`WEIR_MOTO_SERVER`, `WEIR_AZURITE`,
//! `WEIR_GCS_EMULATOR`). [`StoreServer::start`] starts one on a free port with its data in a
//! temporary folder, creates the bucket (container) [`StoreServer::BUCKET`], and the server is
//! killed when the value drops. Without the installed server a test fails, saying how to
//! install it; it never skips.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// Which object store a [`StoreServer`] serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cloud {
    /// moto's S3-compatible server (`s3://`).
    S3,
    /// Azurite's Blob service (`az://`).
    Azure,
    /// fake-gcs-server (`gs://`).
    Gcs,
}

impl Cloud {
    /// The URL scheme Weir's store URLs use for this cloud.
    pub fn scheme(self) -> &'static str {
        match self {
            Cloud::S3 => "s3",
            Cloud::Azure => "az",
            Cloud::Gcs => "gs",
        }
    }

    fn server_name(self) -> &'static str {
        match self {
            Cloud::S3 => "moto_server",
            Cloud::Azure => "azurite-blob",
            Cloud::Gcs => "fake-gcs-server",
        }
    }

    /// The variable `scripts/test` exports with the server's path, and the script that
    /// installs it.
    fn install(self) -> (&'static str, &'static str) {
        match self {
            Cloud::S3 => ("WEIR_MOTO_SERVER", "scripts/moto"),
            Cloud::Azure => ("WEIR_AZURITE", "scripts/azurite"),
            Cloud::Gcs => ("WEIR_GCS_EMULATOR", "scripts/gcs-emulator"),
        }
    }

    /// moto imports its many services and Azurite loads its Node.js modules at start; a loaded
    /// machine can take seconds.
    const START_TIMEOUT: Duration = Duration::from_secs(60);
}

/// Azurite's well-known development account and key (the same in every Azurite).
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// An object-store server on 127.0.0.1 with one bucket, [`StoreServer::BUCKET`]; killed on
/// drop.
pub struct StoreServer {
    cloud: Cloud,
    child: Child,
    port: u16,
    /// Its output, its data and (GCS) the service-account file; removed on drop.
    dir: tempfile::TempDir,
}

impl StoreServer {
    /// The bucket (Azure: container) every server holds.
    pub const BUCKET: &str = "weir";

    /// Starts the server of `cloud` on a free port and creates the bucket.
    pub fn start(cloud: Cloud) -> StoreServer {
        Self::launch(cloud, |_| {})
    }

    /// Starts fake-gcs-server with the objects `seed` writes into the folder it is given: the
    /// server loads them into its bucket at start (`data/weir/a/b` is the object `a/b`).
    pub fn start_gcs_with_objects(seed: impl FnOnce(&Path)) -> StoreServer {
        Self::launch(Cloud::Gcs, seed)
    }

    fn launch(cloud: Cloud, seed: impl FnOnce(&Path)) -> StoreServer {
        let program = installed_server(cloud);
        let port = free_port();
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join(Self::BUCKET)).expect("create the server's data folder");
        seed(&data.join(Self::BUCKET));
        let args: Vec<String> = match cloud {
            Cloud::S3 => vec![
                "-H".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ],
            // The Blob service alone, in memory, without telemetry (nothing leaves the
            // machine), the account always in the path (path-style URLs on 127.0.0.1).
            Cloud::Azure => [
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                &port.to_string(),
                "--inMemoryPersistence",
                "--disableTelemetry",
                "--disableProductStyleUrl",
                "--skipApiVersionCheck",
                "--silent",
            ]
            .map(String::from)
            .to_vec(),
            // In memory, over plain HTTP; the folder `data/weir` makes the bucket `weir`. Its XML
            // API (object_store's puts, gets and deletes) answers only requests whose Host is
            // the public host: this server's address.
            Cloud::Gcs => [
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                &port.to_string(),
                "-backend",
                "memory",
                "-data",
                &data.display().to_string(),
                "-external-url",
                &format!("http://127.0.0.1:{port}"),
                "-public-host",
                &format!("127.0.0.1:{port}"),
                "-log-level",
                "warn",
            ]
            .map(String::from)
            .to_vec(),
        };
        let out = File::create(dir.path().join("server.log")).expect("create the server log");
        let child = Command::new(&program)
            .args(&args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone the log handle"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        // From here on, a panic drops `server` and so stops the process.
        let mut server = StoreServer {
            cloud,
            child,
            port,
            dir,
        };
        server.wait_until_answering();
        if let Err(e) = server.create_bucket() {
            server.fail(&format!(
                "creating the bucket {} failed: {e:#}",
                Self::BUCKET
            ));
        }
        server
    }

    /// Stops the server (SIGSTOP): connections are still accepted, by the kernel, but nothing
    /// answers, as when a store is unreachable; [`StoreServer::resume`] starts it again with
    /// its objects intact (moto keeps them in memory).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Starts a paused server again (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(
            status.success(),
            "kill {signal} {}: {status}",
            self.child.id()
        );
    }

    pub fn cloud(&self) -> Cloud {
        self.cloud
    }

    /// The store URL of `path` in the bucket: `s3://weir/path`, `az://weir/path`, ...
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}/{path}", self.cloud.scheme(), Self::BUCKET)
    }

    /// The settings that make a store reach this server, as `open_store_with` takes them:
    /// the endpoint and credentials given explicitly, as for a real account with its own
    /// endpoint.
    pub fn settings(&self) -> Vec<(String, String)> {
        let endpoint = self.endpoint();
        let pairs = match self.cloud {
            Cloud::S3 => vec![
                ("aws_endpoint", endpoint),
                ("aws_allow_http", "true".to_owned()),
                ("aws_region", "us-east-1".to_owned()),
                ("aws_access_key_id", "weir-test".to_owned()),
                ("aws_secret_access_key", "weir-test".to_owned()),
            ],
            Cloud::Azure => vec![
                ("azure_storage_account_name", AZURITE_ACCOUNT.to_owned()),
                ("azure_storage_account_key", AZURITE_KEY.to_owned()),
                (
                    "azure_storage_endpoint",
                    format!("{endpoint}/{AZURITE_ACCOUNT}"),
                ),
                ("azure_allow_http", "true".to_owned()),
            ],
            Cloud::Gcs => vec![
                ("google_service_account_key", self.gcs_service_account()),
                ("google_allow_http", "true".to_owned()),
            ],
        };
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    /// The environment variables that make a `weir` process reach this server, the way a
    /// user sets them up for the emulator: S3 as in [`StoreServer::settings`]; Azure through
    /// the emulator switch (Azurite's well-known account) and `AZURITE_BLOB_STORAGE_URL`;
    /// GCS through a service-account file naming the server (`gcs_base_url`) and turning
    /// OAuth off (`disable_oauth`).
    pub fn env(&self) -> Vec<(String, String)> {
        match self.cloud {
            Cloud::S3 => self
                .settings()
                .into_iter()
                .map(|(k, v)| (k.to_ascii_uppercase(), v))
                .collect(),
            Cloud::Azure => vec![
                ("AZURE_STORAGE_USE_EMULATOR".into(), "true".into()),
                ("AZURITE_BLOB_STORAGE_URL".into(), self.endpoint()),
            ],
            Cloud::Gcs => {
                let file = self.dir.path().join("service-account.json");
                std::fs::write(&file, self.gcs_service_account())
                    .expect("write the service-account file");
                vec![
                    ("GOOGLE_SERVICE_ACCOUNT".into(), file.display().to_string()),
                    ("GOOGLE_ALLOW_HTTP".into(), "true".into()),
                ]
            }
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A service-account key as object_store reads it: no key, the server's URL, no OAuth.
    fn gcs_service_account(&self) -> String {
        serde_json::json!({
            "gcs_base_url": self.endpoint(),
            "disable_oauth": true,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        })
        .to_string()
    }

    fn wait_until_answering(&mut self) {
        let deadline = Instant::now() + Cloud::START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.fail(&format!("it exited ({status}) before answering"));
            }
            // Any HTTP answer will do: the server is up.
            if http(self.port, "GET", "/", &[]).is_ok() {
                return;
            }
            if Instant::now() > deadline {
                self.fail(&format!(
                    "it did not answer within {:?}",
                    Cloud::START_TIMEOUT
                ));
            }
            // Polling an external process: there is no event to wait on.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn create_bucket(&self) -> Result<()> {
        let bucket = format!("/{}", Self::BUCKET);
        let status = match self.cloud {
            Cloud::S3 => http(self.port, "PUT", &bucket, &[])?,
            Cloud::Azure => {
                let target = format!("/{AZURITE_ACCOUNT}{bucket}?restype=container");
                let headers = azure_shared_key_headers("PUT", &target)?;
                http(self.port, "PUT", &target, &headers)?
            }
            // Made from the folder `data/weir` at start; check that it is there.
            Cloud::Gcs => http(self.port, "GET", &format!("/storage/v1/b{bucket}"), &[])?,
        };
        anyhow::ensure!(
            (200..300).contains(&status),
            "{} answered HTTP {status}",
            self.cloud.server_name()
        );
        Ok(())
    }

    fn fail(&self, message: &str) -> ! {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        panic!(
            "{} on 127.0.0.1:{}: {message}; its output:\n{log}",
            self.cloud.server_name(),
            self.port
        );
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server binary named by the cloud's variable; fails (never skips) without it.
fn installed_server(cloud: Cloud) -> PathBuf {
    let (variable, script) = cloud.install();
    let how = format!(
        "run the tests with scripts/test, or `{variable}=$({script}) cargo test ...` \
         ({script} installs {} and prints its path)",
        cloud.server_name()
    );
    let Some(path) = std::env::var_os(variable) else {
        panic!(
            "{variable} is not set, so the {} storage tests have no server: {how}",
            cloud.scheme()
        );
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "{variable} names {}, which does not exist: {how}",
        path.display()
    );
    path
}

/// A port that was free a moment ago; the server binds it right after.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

/// Sends a bodiless HTTP/1.1 request with `headers` to 127.0.0.1:`port`; returns the status.
fn http(port: u16, method: &str, target: &str, headers: &[(String, String)]) -> Result<u16> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Length: 0\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let response = String::from_utf8_lossy(&response);
    let status = response
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| response.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .with_context(|| format!("not an HTTP response: {response:.80}"))?;
    Ok(status.parse()?)
}

/// The `x-ms-*` and `Authorization` headers of a bodiless Azure Blob request signed with
/// Azurite's account key (Shared Key authorisation); `target` is the path and query, with
/// the account as the first path segment.
fn azure_shared_key_headers(method: &str, target: &str) -> Result<Vec<(String, String)>> {
    let date = rfc1123(SystemTime::now());
    let version = "2021-08-06";
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    // Query parameters: sorted, one `name:value` line each.
    let mut params: Vec<(&str, &str)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    params.sort();
    let mut resource = format!("/{AZURITE_ACCOUNT}{path}");
    for (name, value) in params {
        resource.push_str(&format!("\n{name}:{value}"));
    }
    // VERB, eleven standard headers (all empty: no body, no conditions), the x-ms headers,
    // the resource.
    let to_sign = format!(
        "{method}\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n{resource}"
    );
    let key = base64::engine::general_purpose::STANDARD
        .decode(AZURITE_KEY)
        .context("decoding Azurite's key")?;
    let signature =
        base64::engine::general_purpose::STANDARD.encode(hmac_sha256(&key, to_sign.as_bytes()));
    Ok(vec![
        ("x-ms-date".into(), date),
        ("x-ms-version".into(), version.into()),
        (
            "Authorization".into(),
            format!("SharedKey {AZURITE_ACCOUNT}:{signature}"),
        ),
    ])
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner = Sha256::new()
        .chain_update(block.map(|b| b ^ 0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(block.map(|b| b ^ 0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// `time` as an HTTP date: `Tue, 01 Dec 2026 14:03:09 GMT`.
fn rfc1123(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // 1970-01-01 was a Thursday.
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    // Civil date from days since the epoch (H. Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = (shifted_month + 2) % 12; // 0 = January
    let year = year_of_era + era * 400 + u64::from(month < 2);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][month as usize];
    format!(
        "{weekday}, {day:02} {month} {year} {:02}:{:02}:{:02} GMT",
        rest / 3_600,
        rest / 60 % 60,
        rest % 60
    )
}
