//! API-key authentication for the API routes: `Authorization: Bearer <key>` (OpenAI's
//! clients) or `x-api-key: <key>` (Anthropic's), compared in constant time so response
//! timing does not reveal how much of a guessed key was right. A refusal is the protocol's
//! own error object (Anthropic's on the Messages routes).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

use crate::app::AppState;
use crate::error::{ApiError, ErrorStyle};

/// Equality whose running time depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Rejects requests without the key when one is set.
pub async fn require_key(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.api_key {
        let headers = req.headers();
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        let ok = [bearer, x_api_key]
            .into_iter()
            .flatten()
            .any(|given| constant_time_eq(given.as_bytes(), key.as_bytes()));
        if !ok {
            let style = if req.uri().path().starts_with("/v1/messages") {
                ErrorStyle::Anthropic
            } else {
                ErrorStyle::OpenAi
            };
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_api_key",
                "missing or wrong API key (send `Authorization: Bearer <key>` or `x-api-key: <key>`)",
            )
            .render(style);
        }
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn eq() {
        assert!(super::constant_time_eq(b"abc", b"abc"));
        assert!(!super::constant_time_eq(b"abc", b"abd"));
        assert!(!super::constant_time_eq(b"abc", b"ab"));
    }
}
