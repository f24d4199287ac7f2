//! Stored responses as clients read them: retrieve one, delete one, list its input items —
//! `GET`/`DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items`. The runs that
//! write them are `run.rs`; this is the other half of what the engine does with the store, so a
//! handler never reaches past the engine into it. A background response is read from its run's
//! record until it is stored (and for good when it ends `failed` or `cancelled`, which are not
//! stored responses).

use respgw_protocol::listing::{Deleted, ListPage, ListQuery};
use respgw_protocol::{ApiError, Item};
use respgw_store_api::background::RunStatus;
use respgw_store_api::{BackgroundStore, ResponseStore};
use serde_json::Value;

/// Reads and deletes of stored responses (see [`crate::Engine::stored`]).
pub struct StoredResponses<'a> {
    pub(crate) store: &'a dyn ResponseStore,
    /// The tenant asking: another tenant's responses are not stored, as far as it can tell.
    pub(crate) owner: &'a str,
    /// Where background runs are, when they are on.
    pub(crate) background: Option<&'a dyn BackgroundStore>,
}

impl StoredResponses<'_> {
    /// The stored response object, exactly as it was when it finished. 404 when the owner
    /// stored no response `id`.
    pub async fn retrieve(&self, id: &str) -> Result<Value, ApiError> {
        if let Some(response) = self.store.response(self.owner, id).await? {
            return Ok(response);
        }
        let Some(background) = self.background else { return Err(ApiError::response_not_found(id)) };
        match background.run(id).await?.filter(|run| run.tenant == self.owner) {
            // Stored as it ended (the read above may have come just before): read it there, where
            // a delete also removes it.
            Some(run) if matches!(run.status, RunStatus::Completed | RunStatus::Incomplete) => {
                self.store.response(self.owner, id).await?.ok_or_else(|| ApiError::response_not_found(id))
            }
            Some(run) => serde_json::from_str(&run.body)
                .map_err(|e| ApiError::internal(format!("The stored response {id} is unreadable: {e}"))),
            None => Err(ApiError::response_not_found(id)),
        }
    }

    /// Whether the owner stored response `id` (not as a background run of its own).
    pub(crate) async fn is_stored(&self, id: &str) -> Result<bool, ApiError> {
        Ok(self.store.response(self.owner, id).await?.is_some())
    }

    /// Delete response `id`; 404 when it is not stored.
    pub async fn delete(&self, id: &str) -> Result<Deleted, ApiError> {
        if self.store.delete(self.owner, id).await? {
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
            .await?
            .ok_or_else(|| ApiError::response_not_found(id))?;
        let items = list.items.into_iter().map(Item::client_view).collect();
        Ok(ListPage::new(items, list.has_more, Item::id))
    }
}
