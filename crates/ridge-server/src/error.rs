//! Errors: every failure a client can cause becomes a 4xx, never a dropped connection or a
//! panic. An [`ApiError`] is protocol-neutral (status, message, offending field, code); each
//! protocol renders it in its own error object ([`ErrorStyle`]): OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` (Chat Completions, Completions, Responses,
//! embeddings) or Anthropic's `{"type": "error", "error": {"type", "message"}}` (Messages).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to the client.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message.
    pub message: String,
    /// The offending request field, if one.
    pub param: Option<String>,
    /// A short machine-readable code.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 with the offending field named.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.to_string()),
            code: Some("invalid_value"),
        }
    }

    /// 400 about the request as a whole.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: None,
            code: Some("invalid_request"),
        }
    }

    /// Any status with a code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: Some(code),
        }
    }

    fn error_type(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::PAYLOAD_TOO_LARGE => "invalid_request_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            StatusCode::SERVICE_UNAVAILABLE => "service_unavailable",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.error_type(),
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// Which protocol's error object to answer with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorStyle {
    /// `{"error": {"message", "type", "param", "code"}}`.
    OpenAi,
    /// `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
}

impl ApiError {
    /// Anthropic's error type for this status (its documented set).
    fn anthropic_type(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// The body in `style`.
    pub fn body_in(&self, style: ErrorStyle) -> serde_json::Value {
        match style {
            ErrorStyle::OpenAi => self.body(),
            ErrorStyle::Anthropic => {
                // Anthropic's object has no `param`: the message names the field instead.
                let message = match &self.param {
                    Some(p) if !self.message.contains(p.as_str()) => {
                        format!("{p}: {}", self.message)
                    }
                    _ => self.message.clone(),
                };
                json!({
                    "type": "error",
                    "error": {"type": self.anthropic_type(), "message": message},
                })
            }
        }
    }

    /// The response in `style`.
    pub fn render(&self, style: ErrorStyle) -> Response {
        crate::access_log::note_error(&self.message);
        (self.status, axum::Json(self.body_in(style))).into_response()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        crate::access_log::note_error(&self.message);
        (self.status, axum::Json(self.body())).into_response()
    }
}
