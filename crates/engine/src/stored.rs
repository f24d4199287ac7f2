//! Stored responses as clients read them: retrieve one, delete one, list its input items —
//! `GET`/`DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items`. The runs that
//! write them are `run.rs`; this is the other half of what the engine does with the store, so a
//! handler never reaches past the engine into it.

use respgw_protocol::listing::{Deleted, ListPage, ListQuery};
use respgw_protocol::{ApiError, Item};
use respgw_store_api::ResponseStore;
use serde_json::Value;

use crate::run::store_error;

/// Reads and deletes of stored responses (see [`crate::Engine::stored`]).
pub struct StoredResponses<'a> {
    pub(crate) store: &'a dyn ResponseStore,
    /// The tenant asking: another tenant's responses are not stored, as far as it can tell.
    pub(crate) owner: &'a str,
}

impl StoredResponses<'_> {
    /// The stored response object, exactly as it was when it finished. 404 when the owner
    /// stored no response `id`.
    pub async fn retrieve(&self, id: &str) -> Result<Value, ApiError> {
        self.store
            .response(self.owner, id)
            .await
            .map_err(|e| store_error(&e))?
            .ok_or_else(|| ApiError::response_not_found(id))
    }

    /// Delete response `id`; 404 when it is not stored.
    pub async fn delete(&self, id: &str) -> Result<Deleted, ApiError> {
        if self.store.delete(self.owner, id).await.map_err(|e| store_error(&e))? {
            Ok(Deleted::new(id.to_owned(), "response"))
        } else {
            Err(ApiError::response_not_found(id))
        }
    }

    /// One page of response `id`'s own input items, as a client sees them. 404 when it is not
    /// stored.
    pub async fn input_items(&self, id: &str, query: ListQuery) -> Result<ListPage<Item>, ApiError> {
        let list = self
            .store
            .input_items(self.owner, id, query.into())
            .await
            .map_err(|e| store_error(&e))?
            .ok_or_else(|| ApiError::response_not_found(id))?;
        let items = list.items.into_iter().map(Item::client_view).collect();
        Ok(ListPage::new(items, list.has_more, Item::id))
    }
}
