//! What a delete removes and what it keeps, written once for both backends (the argument that
//! nothing is lost and nothing leaks is in the crate's docs):
//!
//! - deleting a response that nothing continues removes it with its own items that nothing else
//!   holds, then each tombstone above it whose last continuation that was; a continued response
//!   becomes a tombstone instead;
//! - removing the last response created in a conversation releases what was kept for it: the whole
//!   conversation if it is a tombstone, else its removed rows, with the items nothing else holds;
//! - deleting a conversation, or an item of it, that a stored response names only hides it (a
//!   tombstone, a row flagged removed); otherwise the rows and their orphaned items go at once;
//! - a save into a conversation needs it live and at the version the response read.
//!
//! Each backend implements [`RetentionTx`], the statements these rules are made of, on a connection
//! inside its write transaction (PostgreSQL's lock the rows they read for a write; SQLite's writer
//! holds the file's write lock). The rules only order them.

use crate::{ConversationAppend, ConversationRecord, StoreError};

/// A stored response as a delete finds it.
pub(crate) struct StoredResponse {
    /// A tombstone: hidden from every reader, kept for its continuations.
    pub deleted: bool,
    /// The response it continues.
    pub history_from: Option<String>,
}

/// A stored conversation as a write finds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConversationState {
    /// A tombstone: hidden from every reader, kept for the responses created in it.
    pub deleted: bool,
    /// Moves on with every change of the item list.
    pub version: i64,
}

/// The statements the rules are made of, run inside one write transaction of a backend. A
/// backend's own SQL may do more than one step at once where that is what makes it fast (one
/// statement instead of several), as long as the result is the one described.
pub(crate) trait RetentionTx {
    /// Where an item stands in a conversation's list.
    type Position: Copy;

    /// Owner `owner`'s response `id` for a delete (locking its row where rows are locked).
    async fn response_for_delete(&mut self, owner: &str, id: &str) -> Result<Option<StoredResponse>, StoreError>;
    /// Whether a stored response (or tombstone) continues `id`.
    async fn has_continuations(&mut self, id: &str) -> Result<bool, StoreError>;
    /// Hide a continued response and drop its body; its own items stay for its continuations.
    async fn make_tombstone(&mut self, id: &str) -> Result<(), StoreError>;
    /// Remove a response's row and its own items' rows, and those of its items that nothing holds
    /// any more; the conversation it was created in.
    async fn remove_response(&mut self, id: &str) -> Result<Option<String>, StoreError>;

    /// Owner `owner`'s conversation `id` for a write (locking its row where rows are locked).
    async fn conversation_for_write(&mut self, owner: &str, id: &str) -> Result<Option<ConversationState>, StoreError>;
    /// Whether a stored response (or tombstone) was created in the conversation.
    async fn conversation_referenced(&mut self, id: &str) -> Result<bool, StoreError>;
    /// Hide a conversation and drop its metadata; its rows stay for the responses created in it.
    async fn make_conversation_tombstone(&mut self, id: &str) -> Result<(), StoreError>;
    /// Remove a conversation's row (after its items' rows).
    async fn delete_conversation_row(&mut self, id: &str) -> Result<(), StoreError>;
    /// Remove every item row of a conversation; the keys they named.
    async fn delete_item_rows(&mut self, id: &str) -> Result<Vec<i64>, StoreError>;
    /// Remove the item rows of a conversation flagged removed; the keys they named.
    async fn delete_removed_item_rows(&mut self, id: &str) -> Result<Vec<i64>, StoreError>;
    /// The position of the first visible item with id `item_id` in conversation `id`.
    async fn find_item(&mut self, id: &str, item_id: &str) -> Result<Option<Self::Position>, StoreError>;
    /// Flag a conversation's item row removed (hidden, kept).
    async fn flag_removed(&mut self, id: &str, position: Self::Position) -> Result<(), StoreError>;
    /// Remove one item row of a conversation; the key it named.
    async fn delete_item_row(&mut self, id: &str, position: Self::Position) -> Result<Vec<i64>, StoreError>;
    /// Move the conversation to its next version; its record.
    async fn bump_version(&mut self, id: &str) -> Result<ConversationRecord, StoreError>;

    /// Of the items under `keys`, delete those that no response's own items and no conversation
    /// (removed rows included) hold any more.
    async fn delete_orphans(&mut self, keys: &[i64]) -> Result<(), StoreError>;
}

/// Delete owner `owner`'s response `id`; false when it is not stored (or already deleted).
pub(crate) async fn delete_response<T: RetentionTx>(tx: &mut T, owner: &str, id: &str) -> Result<bool, StoreError> {
    let history_from = match tx.response_for_delete(owner, id).await? {
        Some(StoredResponse { deleted: false, history_from }) => history_from,
        Some(StoredResponse { deleted: true, .. }) | None => return Ok(false),
    };
    if tx.has_continuations(id).await? {
        tx.make_tombstone(id).await?;
        return Ok(true);
    }
    remove(tx, owner, id).await?;
    // Up the chain: each tombstone whose last continuation just went goes too. A response
    // continues only its own owner's, so the chain is the same owner's.
    let mut parent = history_from;
    while let Some(p) = parent.take() {
        if let Some(StoredResponse { deleted: true, history_from: next }) = tx.response_for_delete(owner, &p).await?
            && !tx.has_continuations(&p).await?
        {
            remove(tx, owner, &p).await?;
            parent = next;
        }
    }
    Ok(true)
}

/// Remove owner `owner`'s response that nothing continues, then release the conversation it was
/// created in (the same owner's), if any.
async fn remove<T: RetentionTx>(tx: &mut T, owner: &str, id: &str) -> Result<(), StoreError> {
    if let Some(conversation) = tx.remove_response(id).await? {
        release_conversation(tx, owner, &conversation).await?;
    }
    Ok(())
}

/// After a response created in conversation `id` was removed: if no stored response names the
/// conversation any more, what was kept only for such responses goes — the whole conversation if
/// it is a tombstone, else its removed rows (and their items, unless held elsewhere). The
/// conversation is taken for a write first, so a save into it either came before (and is seen
/// here) or waits for this transaction.
async fn release_conversation<T: RetentionTx>(tx: &mut T, owner: &str, id: &str) -> Result<(), StoreError> {
    let Some(state) = tx.conversation_for_write(owner, id).await? else { return Ok(()) };
    if tx.conversation_referenced(id).await? {
        return Ok(());
    }
    if state.deleted {
        collect_conversation(tx, id).await
    } else {
        let keys = tx.delete_removed_item_rows(id).await?;
        tx.delete_orphans(&keys).await
    }
}

/// Remove a conversation with its rows and the items no response holds.
async fn collect_conversation<T: RetentionTx>(tx: &mut T, id: &str) -> Result<(), StoreError> {
    let keys = tx.delete_item_rows(id).await?;
    tx.delete_conversation_row(id).await?;
    tx.delete_orphans(&keys).await
}

/// Delete owner `owner`'s conversation `id`; false when it is not stored (or already deleted).
pub(crate) async fn delete_conversation<T: RetentionTx>(tx: &mut T, owner: &str, id: &str) -> Result<bool, StoreError> {
    if !is_live(tx.conversation_for_write(owner, id).await?) {
        return Ok(false);
    }
    if tx.conversation_referenced(id).await? {
        tx.make_conversation_tombstone(id).await?;
    } else {
        collect_conversation(tx, id).await?;
    }
    Ok(true)
}

/// Delete the first visible item with id `item_id` from owner `owner`'s conversation `id`; the
/// conversation's record after it.
pub(crate) async fn delete_conversation_item<T: RetentionTx>(
    tx: &mut T,
    owner: &str,
    id: &str,
    item_id: &str,
) -> Result<crate::ConversationItemLookup<ConversationRecord>, StoreError> {
    use crate::ConversationItemLookup::{Found, NoConversation, NoItem};
    if !is_live(tx.conversation_for_write(owner, id).await?) {
        return Ok(NoConversation);
    }
    let Some(position) = tx.find_item(id, item_id).await? else { return Ok(NoItem) };
    if tx.conversation_referenced(id).await? {
        // A stored response's history may hold it: only hidden.
        tx.flag_removed(id, position).await?;
    } else {
        let keys = tx.delete_item_row(id, position).await?;
        tx.delete_orphans(&keys).await?;
    }
    tx.bump_version(id).await.map(Found)
}

/// Whether a conversation was found and is not a tombstone: the condition of every write of it.
pub(crate) fn is_live(state: Option<ConversationState>) -> bool {
    state.is_some_and(|state| !state.deleted)
}

/// Whether a response computed from conversation `append` at the version it read may be saved
/// into it, given the conversation's state now.
pub(crate) fn check_save_into(state: Option<ConversationState>, append: &ConversationAppend) -> Result<(), StoreError> {
    match state {
        Some(ConversationState { deleted: false, version }) if version == append.version => Ok(()),
        Some(ConversationState { deleted: false, .. }) => Err(StoreError::ConversationChanged(append.id.clone())),
        Some(ConversationState { deleted: true, .. }) | None => Err(StoreError::ConversationGone(append.id.clone())),
    }
}

/// Refuse `adding` more items to a conversation holding `held` when that passes `max_items`.
pub(crate) fn check_room(held: i64, adding: usize, max_items: usize) -> Result<(), StoreError> {
    let held = usize::try_from(held).unwrap_or(0);
    if held.saturating_add(adding) > max_items {
        return Err(StoreError::ConversationFull { held, adding, limit: max_items });
    }
    Ok(())
}
