//! The web console: a single page served at `/`, its script and styles, and uPlot (vendored
//! from npm, its licence in `console/vendor/`), all compiled into the binary so that the
//! console works offline, with no CDN.
//!
//! The page holds no data: it asks for the host's token, keeps it in `sessionStorage`, and
//! calls the same API as the CLI with it (`console/app.js`). So its assets are served without
//! the token, and every data and action endpoint still refuses calls without it.
//!
//! [`security_headers`] go on every response, the API's too: a Content-Security-Policy that
//! allows only this host's own scripts, styles and connections (no inline script, no remote
//! origin, no framing), `nosniff`, and no referrer.

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The policy of every response. `img-src data:` is for the chart's canvas exports; uPlot
/// sets styles through the CSSOM, which `style-src 'self'` allows.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One asset: its path, content type and bytes.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    ),
    (
        "/console/app.js",
        "text/javascript; charset=utf-8",
        include_str!("console/app.js"),
    ),
    (
        "/console/app.css",
        "text/css; charset=utf-8",
        include_str!("console/app.css"),
    ),
    (
        "/console/vendor/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_str!("console/vendor/uPlot.iife.min.js"),
    ),
    (
        "/console/vendor/uPlot.min.css",
        "text/css; charset=utf-8",
        include_str!("console/vendor/uPlot.min.css"),
    ),
    (
        "/console/vendor/uPlot.LICENSE",
        "text/plain; charset=utf-8",
        include_str!("console/vendor/uPlot.LICENSE"),
    ),
];

/// The console's routes (no token needed: they serve no data).
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    ASSETS
        .iter()
        .fold(Router::new(), |router, &(path, content_type, body)| {
            router.route(
                path,
                get(move || async move {
                    (
                        [
                            (header::CONTENT_TYPE, content_type),
                            // A new binary may serve a new page under the same path.
                            (header::CACHE_CONTROL, "no-cache"),
                        ],
                        body,
                    )
                        .into_response()
                }),
            )
        })
}

/// Adds the console's security headers to `request`'s response.
pub(crate) async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        // Job data is not for caches.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}
