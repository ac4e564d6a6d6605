//! What every route does first with a request: read its body as bytes (so oversized,
//! unreadable and non-UTF-8 bodies get the protocol's error object too), parse it — once:
//! the pool and the adapter read the same object — and pick the model its `model` field
//! names (loaded if it is not). Below the routes, above the adapters' own reading: every
//! protocol's handler starts here.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde_json::{Map, Value};

use crate::app::AppState;
use crate::error::ApiError;
use crate::state::ModelState;

/// A request body as axum hands it over (a rejection when it could not be read).
pub type Body = Result<Bytes, BytesRejection>;

fn body_bytes(body: Body) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than this server accepts",
            )
        } else {
            ApiError::bad_request(format!("cannot read the request body: {r}"))
        }
    })
}

/// The body of a request as a JSON object: read as bytes so oversized and unreadable bodies
/// get the protocol's error object too, then parsed (not UTF-8, not JSON, not an object: a
/// 400 saying which).
pub(crate) fn read_json(body: Body) -> Result<Map<String, Value>, ApiError> {
    crate::params::Fields::parse(&body_bytes(body)?)
}

/// The body (parsed) and the model it names (loaded if it was not), or the error to answer.
pub(crate) async fn body_and_model(
    app: &AppState,
    body: Body,
) -> Result<(Map<String, Value>, Arc<ModelState>), ApiError> {
    let b = read_json(body)?;
    let m = app.pool.for_body(&b).await?;
    crate::access_log::note_model(&m.model_name);
    Ok((b, m))
}
