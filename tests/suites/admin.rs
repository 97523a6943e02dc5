//! The data owner's admin page of a worker, end to end: without the admin
//! token every path answers 401 and nothing else; `/metrics` parses as
//! Prometheus (OpenMetrics) text; a form POST without its session's CSRF
//! token or from another origin is refused; and in a real headless
//! Chromium (Debian's `chromium` and `chromium-driver`, driven over
//! WebDriver) the page shows a request made just before, and its approve
//! button makes a pending request answerable.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::profiles::{numbers, pending_id, refusal, site_with};
use crate::support::demo_rows;

const ADMIN_TOKEN: &str = "admin-token-for-tests-0123456789";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

/// GET `url` (with the bearer token when given): status and body.
fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut request = agent().get(url);
    if let Some(token) = token {
        request = request.header("Authorization", &format!("Bearer {token}"));
    }
    let mut response = request.call().unwrap();
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// A worker with an admin page, bob's requests held for approval, and
/// alice free.
async fn admin_site() -> crate::profiles::Site {
    let dir = tempfile::TempDir::new().unwrap();
    let token = dir.path().join("admin.token");
    std::fs::write(&token, ADMIN_TOKEN).unwrap();
    let site = site_with(
        &format!(
            "admin_listen = \"127.0.0.1:0\"\nadmin_token_file = \"{}\"\n",
            token.display()
        ),
        "[analysts.bob]\napproval = \"manual\"\n",
    )
    .await;
    // The token file is read at start-up.
    drop(dir);
    site
}

/// Every line of an OpenMetrics exposition is a comment (`# HELP`,
/// `# TYPE`, `# UNIT`, `# EOF`) or `name{labels} value`, and it ends with `# EOF`.
fn check_exposition(text: &str) {
    assert!(text.ends_with("# EOF\n"), "{text}");
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            assert!(
                ["HELP ", "TYPE ", "UNIT "]
                    .iter()
                    .any(|p| comment.starts_with(p))
                    || comment == "EOF",
                "{line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        assert!(value.parse::<f64>().is_ok(), "value of {line}");
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "{line}");
            for pair in series[name_end + 1..series.len() - 1].split(',') {
                let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("{line}"));
                assert!(
                    !k.is_empty() && v.starts_with('"') && v.ends_with('"'),
                    "{line}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_token_401_and_metrics_parse() {
    let site = admin_site().await;
    let base = format!("http://{}", site.worker.admin_addr().unwrap());
    let alice = site.session("alice").await;
    crate::remote::run(&alice, "SELECT count(*) FROM clinic")
        .await
        .unwrap();
    let bob = site.session("bob").await;
    let _ = refusal(&bob, "SELECT avg(age) FROM clinic").await;
    let check = base.clone();
    tokio::task::spawn_blocking(move || {
        let base = check;
        for path in ["/", "/metrics", "/healthz", "/nope", "/approvals"] {
            let (status, body) = get(&format!("{base}{path}"), None);
            assert_eq!(status, 401, "{path}");
            assert!(
                !body.contains("clinic") && !body.contains("alice"),
                "{path}: {body}"
            );
            let (status, _) = get(&format!("{base}{path}"), Some("wrong-token"));
            assert_eq!(status, 401, "{path}");
        }
        let (status, body) = get(&format!("{base}/healthz"), Some(ADMIN_TOKEN));
        assert_eq!((status, body.as_str()), (200, "ok\n"));
        let (status, text) = get(&format!("{base}/metrics"), Some(ADMIN_TOKEN));
        assert_eq!(status, 200);
        check_exposition(&text);
        for series in [
            "fedsql_worker_requests_total{decision=\"released\"} 1",
            "fedsql_worker_requests_total{decision=\"pending\"} 1",
            "fedsql_worker_request_duration_seconds_count 2",
            "fedsql_worker_dp_epsilon_spent{analyst=\"alice\",table=\"clinic\"} 0",
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        // A signed-in session's form POST needs its CSRF token and this origin.
        let mut signed_in = agent()
            .post(&format!("{base}/login"))
            .send_form([("token", ADMIN_TOKEN)])
            .unwrap();
        assert_eq!(signed_in.status().as_u16(), 303);
        let cookie = signed_in
            .headers()
            .get("set-cookie")
            .unwrap()
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string();
        let _ = signed_in.body_mut().read_to_string();
        let page = agent()
            .get(&format!("{base}/"))
            .header("Cookie", &cookie)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        let id = page
            .split("pending-")
            .nth(1)
            .map(|s| s[..12].to_string())
            .unwrap_or_else(|| panic!("no pending request: {page}"));
        for (csrf, origin) in [
            ("wrong", None),
            ("", None),
            ("", Some("http://evil.example")),
        ] {
            let mut request = agent()
                .post(&format!("{base}/approvals/{id}/approve"))
                .header("Cookie", &cookie);
            if let Some(origin) = origin {
                request = request.header("Origin", origin);
            }
            let status = request
                .send_form([("csrf", csrf)])
                .unwrap()
                .status()
                .as_u16();
            assert_eq!(status, 403, "csrf {csrf:?}, origin {origin:?}");
        }
    })
    .await
    .unwrap();
    // Nothing was approved by those POSTs.
    assert!(
        refusal(&bob, "SELECT avg(age) FROM clinic")
            .await
            .contains("awaits")
    );
}

/// A chromedriver on a free port, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_driver() -> Option<Driver> {
    let binary = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(binary)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(20) {
        if let Ok(mut r) = agent().get(&format!("{}/status", driver.url)).call()
            && r.body_mut()
                .read_json::<Value>()
                .is_ok_and(|v| v["value"]["ready"] == true)
        {
            return Some(driver);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("chromedriver did not start");
}

/// One WebDriver session in headless Chromium.
struct Browser<'a> {
    driver: &'a Driver,
    session: String,
}

impl<'a> Browser<'a> {
    fn new(driver: &'a Driver, profile: &std::path::Path) -> Self {
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!("--user-data-dir={}", profile.display())])
        .collect::<Vec<_>>();
        let reply = Self::call_on(
            driver,
            "POST",
            "/session",
            json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
            }}}),
        );
        let session = reply["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {reply}"))
            .to_string();
        Self { driver, session }
    }

    fn call_on(driver: &Driver, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", driver.url);
        let mut response = match method {
            "GET" => agent().get(&url).call(),
            "DELETE" => agent().delete(&url).call(),
            _ => agent().post(&url).send_json(body),
        }
        .unwrap();
        let reply: Value = response.body_mut().read_json().unwrap();
        reply["value"].clone()
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        Self::call_on(
            self.driver,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
    }

    fn go(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    fn element(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            json!({"using": "css selector", "value": css}),
        );
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_string()
    }

    fn source(&self) -> String {
        self.call("GET", "/source", Value::Null)
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The page's source once it holds `text` (a form's answer may still
    /// be loading when a click returns); the last source after 20 s.
    fn source_with(&self, text: &str) -> String {
        let started = Instant::now();
        loop {
            let source = self.source();
            if source.contains(text) || started.elapsed() > Duration::from_secs(20) {
                return source;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser<'_> {
    fn drop(&mut self) {
        let _ = Self::call_on(
            self.driver,
            "DELETE",
            &format!("/session/{}", self.session),
            Value::Null,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_page_shows_requests_and_approves() {
    let Some(driver) = start_driver() else {
        eprintln!(
            "SKIPPED: no chromedriver (apt-get install chromium chromium-driver; .ci/run installs them)"
        );
        return;
    };
    let site = admin_site().await;
    let base = format!("http://{}/", site.worker.admin_addr().unwrap());
    let alice = site.session("alice").await;
    crate::remote::run(&alice, "SELECT count(*), avg(bmi) FROM clinic")
        .await
        .unwrap();
    let bob = site.session("bob").await;
    let held = "SELECT sum(visits) FROM clinic";
    let id = pending_id(&refusal(&bob, held).await);
    let profile = tempfile::TempDir::new().unwrap();
    let shown = id.clone();
    let page = tokio::task::spawn_blocking(move || {
        let id = shown;
        let browser = Browser::new(&driver, profile.path());
        browser.go(&base);
        let sign_in = browser.source();
        assert!(
            sign_in.contains("Admin token") && !sign_in.contains("clinic"),
            "{sign_in}"
        );
        let field = browser.element("input[name=token]");
        browser.call(
            "POST",
            &format!("/element/{field}/value"),
            json!({ "text": ADMIN_TOKEN }),
        );
        let button = browser.element("#sign-in");
        browser.call("POST", &format!("/element/{button}/click"), json!({}));
        let page = browser.source_with("Latest requests");
        // The request made just before, the budgets, the pending one.
        assert!(
            page.contains("avg(clinic.bmi)") || page.contains("avg(bmi)"),
            "{page}"
        );
        assert!(page.contains("id=\"budgets\""), "{page}");
        assert!(page.contains(&format!("pending-{id}")), "{page}");
        let approve = browser.element(&format!("#approve-{id}"));
        browser.call("POST", &format!("/element/{approve}/click"), json!({}));
        let after = browser.source_with("id=\"no-pending\"");
        drop(browser);
        drop(driver);
        (page, after)
    })
    .await
    .unwrap();
    assert!(!page.1.contains(&format!("pending-{id}")), "{}", page.1);
    // Approved on the page: answered.
    let got = crate::remote::run(&bob, held).await.unwrap();
    let visits: f64 = demo_rows()
        .1
        .iter()
        .filter_map(|r| r.rsplit(',').next().unwrap().parse::<f64>().ok())
        .sum();
    assert_eq!(numbers(&got, 0), [visits]);
}
