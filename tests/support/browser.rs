//! A headless Chromium driven through ChromeDriver, for the console's tests. ChromeDriver is
//! found through `WEIR_CHROMEDRIVER` (`scripts/browser` installs it and prints the path;
//! `scripts/test` exports it), started on 127.0.0.1 at a port of its choosing, and killed when
//! the [`Browser`] drops. Without it the test fails: it never skips.
//!
//! The W3C WebDriver protocol is JSON over HTTP, and these tests use a dozen of its commands,
//! so they are called here with reqwest, which the host already depends on. A WebDriver
//! crate (fantoccini) was tried first: its dependencies turned on features of crates the
//! host shares (syn among them), so CI compiled most of the dependency tree twice, once for
//! the binary and once for the tests, and went over its time budget.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// How long a wait for the page gives up after: a limit, not a pace (Chromium on two busy
/// cores can take seconds to draw).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The key of an element reference in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    http: reqwest::Client,
    /// `http://127.0.0.1:PORT/session/ID`.
    session: String,
}

/// An element of the page, as WebDriver names it.
#[derive(Clone, Debug)]
pub struct Element(String);

/// A command WebDriver refused: its error code (`no such element`, `stale element
/// reference`, `no such alert`...) and message.
#[derive(Debug)]
pub struct Refused {
    pub error: String,
    pub message: String,
}

impl Browser {
    /// Starts ChromeDriver and a headless Chromium of 1280×900.
    pub async fn start() -> Self {
        let path = std::env::var_os("WEIR_CHROMEDRIVER").unwrap_or_else(|| {
            panic!(
                "WEIR_CHROMEDRIVER is not set: the console's tests need ChromeDriver and \
                 Chromium; run them through scripts/test, or export \
                 WEIR_CHROMEDRIVER=$(scripts/browser)"
            )
        });
        let mut driver = Command::new(&path)
            .args(["--port=0", "--allowed-ips=127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.to_string_lossy()));
        let port = driver_port(&mut driver);
        let chromium =
            std::env::var("WEIR_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let http = weir_host::http::client();
        let capabilities = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium,
                    "args": [
                        "--headless=new",
                        // Tests run as root in CI containers, where the sandbox cannot start.
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-dev-shm-usage",
                        "--window-size=1280,900",
                    ],
                },
            }},
        });
        let mut browser = Self {
            driver,
            http,
            session: format!("http://127.0.0.1:{port}/session"),
        };
        let created = browser
            .command(reqwest::Method::POST, "", Some(capabilities))
            .await
            .unwrap_or_else(|e| panic!("ChromeDriver cannot start Chromium ({chromium}): {e:?}"));
        let id = created["sessionId"].as_str().expect("a session id");
        browser.session = format!("{}/{id}", browser.session);
        browser
    }

    /// Sends one WebDriver command to the session (`path` after its URL); its `value`.
    async fn command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Refused> {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("ChromeDriver: {e}"));
        let ok = response.status().is_success();
        let mut reply: Value = response.json().await.expect("WebDriver answers JSON");
        let value = reply["value"].take();
        if ok {
            return Ok(value);
        }
        Err(Refused {
            error: value["error"].as_str().unwrap_or("unknown").to_owned(),
            message: value["message"].as_str().unwrap_or_default().to_owned(),
        })
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value, Refused> {
        self.command(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Result<Value, Refused> {
        self.command(reqwest::Method::GET, path, None).await
    }

    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url }))
            .await
            .unwrap_or_else(|e| panic!("navigate to {url}: {e:?}"));
    }

    /// The page's URL now.
    pub async fn url(&self) -> String {
        let url = self.get("/url").await.expect("the URL");
        url.as_str().expect("a string").to_owned()
    }

    async fn try_find(&self, css: &str) -> Result<Element, Refused> {
        let found = self
            .post("/element", json!({ "using": "css selector", "value": css }))
            .await?;
        Ok(Element(
            found[ELEMENT].as_str().expect("an element").to_owned(),
        ))
    }

    /// The element `css`, once it exists.
    pub async fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.try_find(css).await {
                Ok(element) => return element,
                Err(e) => assert!(Instant::now() < deadline, "no element {css}: {e:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How many elements `css` there are now.
    pub async fn count(&self, css: &str) -> usize {
        let found = self
            .post(
                "/elements",
                json!({ "using": "css selector", "value": css }),
            )
            .await
            .unwrap_or_else(|e| panic!("{css}: {e:?}"));
        found.as_array().map_or(0, Vec::len)
    }

    /// The text of the element `css` (found again each time: the page re-renders as it
    /// polls).
    pub async fn text(&self, css: &str) -> String {
        let element = self.find(css).await;
        self.text_of(&element)
            .await
            .unwrap_or_else(|e| panic!("the text of {css}: {e:?}"))
    }

    async fn text_of(&self, element: &Element) -> Result<String, Refused> {
        let text = self.get(&format!("/element/{}/text", element.0)).await?;
        Ok(text.as_str().unwrap_or_default().to_owned())
    }

    pub async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.post(&format!("/element/{}/click", element.0), json!({}))
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e:?}"));
    }

    /// Empties the field `css` and types `text` into it.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.post(&format!("/element/{}/clear", element.0), json!({}))
            .await
            .unwrap_or_else(|e| panic!("clear {css}: {e:?}"));
        self.post(
            &format!("/element/{}/value", element.0),
            json!({ "text": text }),
        )
        .await
        .unwrap_or_else(|e| panic!("type into {css}: {e:?}"));
    }

    /// Chooses `value` in the select `css`, as a person does: by clicking its option.
    pub async fn choose(&self, css: &str, value: &str) {
        self.click(&format!("{css} option[value=\"{value}\"]"))
            .await;
    }

    /// Waits until `check` holds of the text of `css`; returns that text.
    pub async fn wait_text(&self, css: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = match self.try_find(css).await {
                Ok(element) => self.text_of(&element).await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if check(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{css} never showed {what}: it shows {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The attribute `name` of every element `css`, read at one moment (the page re-renders
    /// as it polls, so elements found earlier may be gone).
    pub async fn attrs(&self, css: &str, name: &str) -> Vec<String> {
        let values = self
            .eval_with(
                "return [...document.querySelectorAll(arguments[0])]\
                     .map(e => e.getAttribute(arguments[1]) || '')",
                vec![css.into(), name.into()],
            )
            .await;
        serde_json::from_value(values).expect("strings")
    }

    /// Waits until `check` holds of [`Browser::attrs`]; returns them.
    pub async fn wait_attrs(
        &self,
        css: &str,
        name: &str,
        what: &str,
        check: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self.attrs(css, name).await;
            if check(&found) {
                return found;
            }
            assert!(Instant::now() < deadline, "{css}: never {what}: {found:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `script` (a function body) returns `true` in the page.
    pub async fn wait_true(&self, what: &str, script: &str) {
        let deadline = Instant::now() + PATIENCE;
        while self.eval(script).await != Value::Bool(true) {
            assert!(Instant::now() < deadline, "never {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs `script` in the page; returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.eval_with(script, Vec::new()).await
    }

    async fn eval_with(&self, script: &str, args: Vec<Value>) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": args }))
            .await
            .unwrap_or_else(|e| panic!("script {script}: {e:?}"))
    }

    /// Saves a screenshot as `target/console-screenshots/NAME.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.get("/screenshot").await.expect("screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("base64"))
            .expect("a PNG in base64");
        let dir = super::repo().join("target/console-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot folder");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("screenshot");
    }

    /// Whether the page opened an alert (a script it should never have run would).
    pub async fn alert_open(&self) -> bool {
        match self.get("/alert/text").await {
            Ok(_) => true,
            Err(e) if e.error == "no such alert" => false,
            Err(e) => panic!("asking for an alert: {e:?}"),
        }
    }

    /// Ends the session: Chromium quits.
    pub async fn close(self) {
        let _ = self.command(reqwest::Method::DELETE, "", None).await;
    }
}

/// The session ends and ChromeDriver stops with the Browser, also when a test fails half-way:
/// no Chromium outlives its test. ChromeDriver stays in the test's process group, which
/// nextest kills whole when a test times out.
impl Drop for Browser {
    fn drop(&mut self) {
        end_session(&self.session);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `DELETE` of the session at `url` (`http://127.0.0.1:PORT/session/ID`), without async:
/// Chromium quits. Best effort: after [`Browser::close`] the session is gone already.
fn end_session(url: &str) {
    use std::io::{Read as _, Write as _};
    let Some((address, path)) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
    else {
        return;
    };
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request =
        format!("DELETE /{path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_ok() {
        let _ = stream.read_to_end(&mut Vec::new());
    }
}

/// The port ChromeDriver says it started on.
fn driver_port(driver: &mut Child) -> u16 {
    let stdout = driver.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.expect("ChromeDriver's output");
        if let Some(rest) = line.split("started successfully on port ").nth(1) {
            let port = rest.trim_end_matches('.').trim().parse().expect("a port");
            // Keep reading (and dropping) its output so that it never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return port;
        }
    }
    panic!("ChromeDriver ended without saying its port");
}
