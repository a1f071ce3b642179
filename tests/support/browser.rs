//! A headless Chromium driven through ChromeDriver (WebDriver) with fantoccini, for the
//! console's tests. ChromeDriver is found through `WEIR_CHROMEDRIVER` (`scripts/browser`
//! installs it and prints the path; `scripts/test` exports it), started on 127.0.0.1 at a port
//! of its choosing, and killed when the [`Browser`] is dropped. Without it the test fails: it
//! never skips.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};

/// How long a wait for the page gives up after.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct Browser {
    driver: Child,
    pub client: Client,
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
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", PathBuf::from(&path).display()));
        let port = driver_port(&mut driver);
        let chromium =
            std::env::var("WEIR_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": [
                    "--headless=new",
                    // Tests run as root in CI containers, where the sandbox cannot start.
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--window-size=1280,900",
                ],
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| panic!("ChromeDriver cannot start Chromium ({chromium}): {e}"));
        Self { driver, client }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// The element `css` once it exists.
    pub async fn find(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// Every element `css` now.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        self.client
            .find_all(Locator::Css(css))
            .await
            .expect("find_all")
    }

    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.expect("text")
    }

    pub async fn click(&self, css: &str) {
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Waits until `check` holds of the text of `css`; returns that text.
    pub async fn wait_text(&self, css: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = match self.client.find(Locator::Css(css)).await {
                Ok(element) => element.text().await.unwrap_or_default(),
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

    /// Waits until `check` holds of the elements `css`; returns them.
    pub async fn wait_all(
        &self,
        css: &str,
        what: &str,
        check: impl Fn(&[Element]) -> bool,
    ) -> Vec<Element> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self.find_all(css).await;
            if check(&found) {
                return found;
            }
            assert!(Instant::now() < deadline, "{css}: never {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The attribute `name` of every element `css`, read at one moment (the page re-renders
    /// as it polls, so elements found earlier may be gone).
    pub async fn attrs(&self, css: &str, name: &str) -> Vec<String> {
        let values = self
            .client
            .execute(
                "return [...document.querySelectorAll(arguments[0])]\
                     .map(e => e.getAttribute(arguments[1]) || '')",
                vec![css.into(), name.into()],
            )
            .await
            .expect("script");
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

    /// Runs `script` in the page; returns its value.
    pub async fn eval(&self, script: &str) -> serde_json::Value {
        self.client
            .execute(script, Vec::new())
            .await
            .expect("script")
    }

    /// Saves a screenshot as `target/console-screenshots/NAME.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = super::repo().join("target/console-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot folder");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("screenshot");
    }

    /// Whether the page opened an alert (a script it should never have run would).
    pub async fn alert_open(&self) -> bool {
        self.client.get_alert_text().await.is_ok()
    }

    pub async fn close(self) {
        let Self { mut driver, client } = self;
        let _ = client.close().await;
        let _ = driver.kill();
        let _ = driver.wait();
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
