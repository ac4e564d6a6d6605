//! What every route does first with a request: read its body as bytes (so oversized,
//! unreadable and non-UTF-8 bodies get the protocol's error object too) and pick the model
//! its `model` field names (loaded if it is not). Below the routes, above the adapters' own
//! parsing: every protocol's handler starts here.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;

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

/// The body of a request, read as bytes so oversized and unreadable bodies get the
/// protocol's error object too.
pub(crate) fn read_body(body: Body) -> Result<Bytes, ApiError> {
    body_bytes(body)
}

/// The body and the model it names (loaded if it was not), or the error to answer.
pub(crate) async fn body_and_model(
    app: &AppState,
    body: Body,
) -> Result<(Bytes, Arc<ModelState>), ApiError> {
    let b = body_bytes(body)?;
    let m = app.pool.for_body(&b).await?;
    crate::access_log::note_model(&m.model_name);
    Ok((b, m))
}
