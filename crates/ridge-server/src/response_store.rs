//! The Responses API's store of past responses (`store: true`, the default): what `GET
//! /v1/responses/{id}` returns and what `previous_response_id` continues. In memory, bounded
//! by count — at most [`MAX_STORED`] responses, the oldest evicted first; a server restart
//! forgets them. Its own module so the protocol adapter and the server state both use it
//! without depending on each other.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use ridge_tokenizer::ChatMessage;
use serde_json::Value;

/// Most responses the store keeps; the oldest is evicted first.
pub const MAX_STORED: usize = 1024;

/// A response kept for `GET` and `previous_response_id`.
#[derive(Clone)]
pub(crate) struct Stored {
    pub(crate) response: Value,
    pub(crate) conversation: Vec<ChatMessage>,
}

/// Past responses, bounded by count (insertion order: the oldest goes first).
#[derive(Default)]
pub struct ResponseStore {
    inner: Mutex<(HashMap<String, Stored>, VecDeque<String>)>,
}

impl ResponseStore {
    pub(crate) fn insert(&self, id: String, stored: Stored) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        let (map, order) = &mut *g;
        if map.insert(id.clone(), stored).is_none() {
            order.push_back(id);
        }
        while order.len() > MAX_STORED {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    /// The stored response object with this id.
    pub fn get(&self, id: &str) -> Option<Value> {
        let g = self.inner.lock().ok()?;
        g.0.get(id).map(|s| s.response.clone())
    }

    /// The conversation (input and output) of the stored response with this id.
    pub fn conversation(&self, id: &str) -> Option<Vec<ChatMessage>> {
        let g = self.inner.lock().ok()?;
        g.0.get(id).map(|s| s.conversation.clone())
    }

    /// Removes a stored response; whether it was there.
    pub fn remove(&self, id: &str) -> bool {
        let Ok(mut g) = self.inner.lock() else {
            return false;
        };
        let (map, order) = &mut *g;
        let found = map.remove(id).is_some();
        if found {
            order.retain(|k| k != id);
        }
        found
    }

    /// How many responses are stored.
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |g| g.0.len())
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
