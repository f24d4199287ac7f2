//! Headless Chromium driven over WebDriver, for the console's browser tests.
//!
//! [`Browser::start`] runs Debian's `chromedriver` on a free loopback port of its own and opens
//! one session of headless Chromium (window 1280×900) through it with [`fantoccini`]. Chromium
//! runs with `--no-sandbox` (required as root, harmless otherwise) and a profile, `HOME` and XDG
//! folders in a temporary directory, so neither an unwritable `HOME` nor another test's browser
//! gets in its way. The helpers wait (bounded) for an element or a text, fill fields, click, read
//! the browser's console log (where Chromium reports Content-Security-Policy violations and
//! script errors), and save screenshots as test artifacts under
//! `$CARGO_TARGET_DIR/console-screenshots/<test>/` (`target/` of the workspace without that
//! variable; emptied when the test starts its browser); each saved path is printed. A wait that times out saves a screenshot of the page
//! as it was and names it in the error, with the page's text.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fantoccini::elements::Element;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// How long [`Browser::wait_for`] and friends wait by default: long enough for a loaded
/// 2-core machine to build a page, short enough that a missing element fails the test promptly.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(20);

/// The browser window's size, in CSS pixels.
pub const WINDOW: (u32, u32) = (1280, 900);

/// One headless Chromium session and the `chromedriver` serving it. chromedriver leads a
/// process group of its own, Chromium's processes included: dropping a `Browser` kills that
/// group, so a failing test leaves no browser behind.
pub struct Browser {
    client: Client,
    /// chromedriver; `None` once [`Browser::close`] has ended and reaped it.
    driver: Option<Child>,
    /// Chromium's profile, `HOME` and XDG folders: held, never read; removed on drop, after the
    /// processes (fields drop in order, after [`Drop::drop`]).
    _home: tempfile::TempDir,
    screenshots: PathBuf,
    shots_taken: usize,
    /// How long a wait lasts before it fails ([`DEFAULT_WAIT`] unless [`Browser::set_wait`]).
    wait: Duration,
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(driver) = &self.driver {
            kill_group(driver);
        }
    }
}

/// Kill the process group `leader` leads (chromedriver and the Chromium it started).
fn kill_group(leader: &Child) {
    if let Some(pid) = leader.id().and_then(|id| i32::try_from(id).ok()) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Where screenshots of the test `test` go: `<target>/console-screenshots/<test>/`, `<target>`
/// being `$CARGO_TARGET_DIR` or the workspace's `target/`.
pub fn screenshot_dir(test: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")));
    target.join("console-screenshots").join(test)
}

/// A loopback port nobody listens on right now.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `name`'s full path on `PATH`.
fn on_path(name: &str) -> anyhow::Result<PathBuf> {
    let paths = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .with_context(|| format!("`{name}` is not on PATH (scripts/setup-browser installs it)"))
}

/// Chromium's command line: headless, no sandbox, nothing fetched in the background, the
/// profile in `profile`, the window at [`WINDOW`].
fn chromium_args(profile: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--no-first-run",
        "--no-default-browser-check",
        "--no-proxy-server",
        "--disable-extensions",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("--user-data-dir={}", profile.display()));
    args.push(format!("--window-size={},{}", WINDOW.0, WINDOW.1));
    args
}

/// `POST /session/{id}/se/log {"type":"browser"}`: chromedriver's (non-W3C) read of the browser
/// console's entries since the last read.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/se/log", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({"type": "browser"}).to_string()))
    }
}

impl Browser {
    /// Start `chromedriver` and a headless Chromium session; screenshots go to
    /// [`screenshot_dir`]`(test)`.
    pub async fn start(test: &str) -> anyhow::Result<Browser> {
        let chromium = on_path("chromium")?;
        let chromedriver = on_path("chromedriver")?;
        let home = tempfile::Builder::new().prefix("respgw-browser-").tempdir()?;
        let profile = home.path().join("profile");
        std::fs::create_dir_all(&profile)?;
        let log_path = home.path().join("chromedriver.log");
        let port = free_port()?;
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log_path.display()))
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .env("XDG_CACHE_HOME", home.path().join(".cache"))
            .env("XDG_DATA_HOME", home.path().join(".local/share"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", chromedriver.display()))?;
        let base = format!("http://127.0.0.1:{port}");
        let client = wait_for_driver(&base, &chromium, &profile, &log_path).await?;
        let browser = Browser {
            client,
            driver: Some(driver),
            _home: home,
            screenshots: screenshot_dir(test),
            shots_taken: 0,
            wait: DEFAULT_WAIT,
        };
        browser.client.set_window_size(WINDOW.0, WINDOW.1).await?;
        // Only this run's screenshots: an earlier run's would be mistaken for them.
        if browser.screenshots.exists() {
            std::fs::remove_dir_all(&browser.screenshots)
                .with_context(|| format!("clearing {}", browser.screenshots.display()))?;
        }
        std::fs::create_dir_all(&browser.screenshots)
            .with_context(|| format!("creating {}", browser.screenshots.display()))?;
        Ok(browser)
    }

    /// Make later waits last up to `wait` before they fail.
    pub fn set_wait(&mut self, wait: Duration) {
        self.wait = wait;
    }

    /// The WebDriver client, for what the helpers here do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Load `url` and wait for the document to be loaded.
    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.client.goto(url).await.with_context(|| format!("loading {url}"))
    }

    /// The first element matching the CSS `selector`, waiting for it (up to [`DEFAULT_WAIT`] unless [`Browser::set_wait`]).
    pub async fn wait_for(&mut self, selector: &str) -> anyhow::Result<Element> {
        self.wait_until(&format!("an element `{selector}`"), async |client| {
            Ok(client.find_all(Locator::Css(selector)).await?.into_iter().next())
        })
        .await
    }

    /// Wait until an element matching `selector` shows `needle` in its rendered text; returns
    /// that element's text.
    pub async fn wait_for_text(&mut self, selector: &str, needle: &str) -> anyhow::Result<String> {
        self.wait_until(&format!("`{needle}` in `{selector}`"), async |client| {
            for element in client.find_all(Locator::Css(selector)).await? {
                // An element replaced between the find and the read is simply looked at again.
                if let Ok(text) = element.text().await
                    && text.contains(needle)
                {
                    return Ok(Some(text));
                }
            }
            Ok(None)
        })
        .await
    }

    /// Wait until no element matches `selector` (a view that went away, a spinner done).
    pub async fn wait_for_absence(&mut self, selector: &str) -> anyhow::Result<()> {
        self.wait_until(&format!("no element `{selector}`"), async |client| {
            Ok(client.find_all(Locator::Css(selector)).await?.is_empty().then_some(()))
        })
        .await
    }

    /// Poll `probe` every 100 ms until it returns `Some`, for the wait's length. On a
    /// timeout, a screenshot is saved and the error names `what`, the screenshot and the page's
    /// URL and text.
    pub async fn wait_until<T>(
        &mut self,
        what: &str,
        mut probe: impl AsyncFnMut(&Client) -> Result<Option<T>, fantoccini::error::CmdError>,
    ) -> anyhow::Result<T> {
        let start = Instant::now();
        loop {
            match probe(&self.client).await {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => {}
                Err(error) if start.elapsed() >= self.wait => {
                    return Err(self.timeout_error(what, &format!("the last probe failed: {error}")).await);
                }
                Err(_) => {}
            }
            if start.elapsed() >= self.wait {
                return Err(self.timeout_error(what, "not found").await);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn timeout_error(&mut self, what: &str, detail: &str) -> anyhow::Error {
        let shot = self.screenshot("timeout").await.map(|p| p.display().to_string()).unwrap_or_else(|e| e.to_string());
        let url = self.client.current_url().await.map(|u| u.to_string()).unwrap_or_default();
        let text = self.page_text().await.unwrap_or_default();
        anyhow::anyhow!(
            "waited {:?} for {what}: {detail}; page {url}, screenshot {shot}; page text:\n{text}",
            self.wait
        )
    }

    /// The rendered text of the whole page.
    pub async fn page_text(&self) -> anyhow::Result<String> {
        Ok(self.client.find(Locator::Css("body")).await?.text().await?)
    }

    /// Clear the field matching `selector` (waiting for it) and type `text` into it.
    pub async fn fill(&mut self, selector: &str, text: &str) -> anyhow::Result<()> {
        let field = self.wait_for(selector).await?;
        field.clear().await?;
        field.send_keys(text).await?;
        Ok(())
    }

    /// Click the element matching `selector` (waiting for it).
    pub async fn click(&mut self, selector: &str) -> anyhow::Result<()> {
        self.wait_for(selector).await?.click().await?;
        Ok(())
    }

    /// Run `script` in the page (its `arguments` are `args`) and return its result.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        Ok(self.client.execute(script, args).await?)
    }

    /// The browser console's entries since the last call, as `(level, message)`: script errors,
    /// failed loads and Content-Security-Policy violations (level `SEVERE`), `console.*` calls.
    pub async fn console_log(&self) -> anyhow::Result<Vec<(String, String)>> {
        let entries = self.client.issue_cmd(BrowserLog).await?;
        let entries = entries.as_array().cloned().unwrap_or_default();
        Ok(entries
            .iter()
            .map(|entry| {
                let field = |name: &str| entry[name].as_str().unwrap_or_default().to_owned();
                (field("level"), field("message"))
            })
            .collect())
    }

    /// Save a screenshot of the window as `<NN>-<name>.png` in this test's screenshot folder
    /// (numbered in the order taken) and print its path.
    pub async fn screenshot(&mut self, name: &str) -> anyhow::Result<PathBuf> {
        let png = self.client.screenshot().await?;
        self.shots_taken += 1;
        let path = self.screenshots.join(format!("{:02}-{name}.png", self.shots_taken));
        std::fs::write(&path, png).with_context(|| format!("writing {}", path.display()))?;
        // Past the test harness's output capture, so the artifact is seen in every run.
        let _ = writeln!(std::io::stderr(), "screenshot: {}", path.display());
        Ok(path)
    }

    /// End the WebDriver session (Chromium exits), then chromedriver's process group, and reap it.
    pub async fn close(mut self) -> anyhow::Result<()> {
        let closed = self.client.clone().close().await.context("closing the WebDriver session");
        if let Some(mut driver) = self.driver.take() {
            kill_group(&driver);
            let _ = driver.wait().await;
        }
        closed
    }
}

/// Connect to the chromedriver at `base` once it answers (up to 30 s) and open a session of
/// `chromium` with `profile`. chromedriver's own log (`log_path`) is quoted when it fails.
async fn wait_for_driver(base: &str, chromium: &Path, profile: &Path, log_path: &Path) -> anyhow::Result<Client> {
    let mut capabilities = fantoccini::wd::Capabilities::new();
    capabilities.insert("browserName".into(), json!("chrome"));
    capabilities.insert("goog:chromeOptions".into(), json!({"binary": chromium, "args": chromium_args(profile)}));
    capabilities.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
    let start = Instant::now();
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector).capabilities(capabilities.clone()).connect(base).await {
            Ok(client) => return Ok(client),
            Err(error) if start.elapsed() > Duration::from_secs(30) => {
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                let tail: String =
                    log.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
                bail!("no WebDriver session from chromedriver at {base}: {error}; its log ends with:\n{tail}");
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chromium_runs_headless_unsandboxed_with_its_profile_in_the_given_folder() {
        let args = chromium_args(Path::new("/tmp/x/profile"));
        for expected in ["--headless=new", "--no-sandbox", "--user-data-dir=/tmp/x/profile", "--window-size=1280,900"] {
            assert!(args.iter().any(|a| a == expected), "{expected} missing from {args:?}");
        }
    }

    /// A page whose external script turns a typed name into a greeting on a click, served with a
    /// strict Content-Security-Policy and carrying one inline script that policy blocks.
    async fn serve_greeting_page() -> String {
        use axum::http::header;
        let csp = "default-src 'none'; script-src 'self'";
        let page = "<!doctype html><title>greeting</title><label>Name <input id=name></label>\
                    <button id=greet>Greet</button><p id=out></p>\
                    <script src=greet.js></script><script>document.title = 'inline ran'</script>";
        let script = "document.getElementById('greet').addEventListener('click', () => {\
                      document.getElementById('out').textContent = 'Hello, ' + document.getElementById('name').value; });";
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::get(move || async move {
                    ([(header::CONTENT_SECURITY_POLICY, csp)], axum::response::Html(page))
                }),
            )
            .route(
                "/greet.js",
                axum::routing::get(move || async move { ([(header::CONTENT_TYPE, "text/javascript")], script) }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{address}/")
    }

    #[tokio::test]
    async fn drives_a_page_sees_what_its_script_writes_and_what_its_policy_blocked() {
        crate::skip_unless!(crate::prerequisites::chromium());
        let url = serve_greeting_page().await;
        let mut browser = Browser::start("testkit::browser").await.expect("chromium starts");
        browser.goto(&url).await.expect("the page loads");
        browser.fill("#name", "Ada").await.expect("the field is there");
        browser.click("#greet").await.expect("the button is there");
        assert_eq!(browser.wait_for_text("#out", "Hello").await.expect("the greeting shows"), "Hello, Ada");
        let title = browser.client().title().await.expect("a title");
        assert_eq!(title, "greeting", "the inline script must not have run");
        let log = browser.console_log().await.expect("the console log reads");
        assert!(
            log.iter().any(|(level, message)| level == "SEVERE" && message.contains("Content Security Policy")),
            "the blocked inline script is reported: {log:?}"
        );
        let shot = browser.screenshot("greeting").await.expect("a screenshot");
        let png = std::fs::read(&shot).expect("the screenshot is saved");
        assert!(png.starts_with(b"\x89PNG"), "{} is a PNG", shot.display());
        browser.set_wait(Duration::from_millis(500));
        let missing = browser.wait_until("something that never comes", async |_| Ok(None::<()>)).await;
        let error = missing.expect_err("a wait for nothing times out").to_string();
        assert!(error.contains("something that never comes") && error.contains("Hello, Ada"), "{error}");
        browser.close().await.expect("the session ends");
    }

    #[test]
    fn screenshots_go_under_the_target_folder_per_test() {
        let dir = screenshot_dir("console_browser::admin");
        assert!(dir.ends_with("console-screenshots/console_browser::admin"), "{}", dir.display());
    }
}
